package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	openai "github.com/sashabaranov/go-openai"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/config"
	"github.com/eoc-proxy/eoc-proxy/energy"
	"github.com/eoc-proxy/eoc-proxy/internal/testenv/fakes"
	"github.com/eoc-proxy/eoc-proxy/ledger"
	"github.com/eoc-proxy/eoc-proxy/proxy"
)

// stack is eoc-proxy served by a real HTTP server over loopback, wired from a config as main does.
type stack struct {
	*httptest.Server
	app *app
}

// settled waits until the requests s served so far have ended: what follows a response (the
// metrics, /ui, the trace span, the learning of the answer) is there.
func (s *stack) settled(t *testing.T) {
	t.Helper()
	edge, ok := s.app.handler.(*proxy.Server)
	if !ok {
		t.Fatalf("the handler is a %T, not the edge", s.app.handler)
	}
	edge.WaitReported()
}

func startStack(t *testing.T, yaml string) *stack {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), registry())
	if err != nil {
		t.Fatal(err)
	}
	a, err := build(cfg, configFiles{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.handler)
	t.Cleanup(func() { srv.Close(); a.close() })
	return &stack{Server: srv, app: a}
}

// oneBackend is a config with the cache and neural stages in front of a single backend that
// serves the fake-* models.
func oneBackend(typ, url string, extra string) string {
	stages := "cascade: {stages: [cache, neural]}"
	if strings.Contains(extra, "cascade:") {
		stages = ""
	}
	return fmt.Sprintf(`
log_level: error
%s
backends: [{name: up, type: %s, url: %q, models: ["fake-*"], timeout: 2s}]
%s`, stages, typ, url, extra)
}

func client(s *stack, key string) *openai.Client {
	c := openai.DefaultConfig(key)
	c.BaseURL = s.URL + "/v1"
	return openai.NewClientWithConfig(c)
}

func chatReq(content string) openai.ChatCompletionRequest {
	return openai.ChatCompletionRequest{Model: fakes.DefaultModel, Messages: []openai.ChatCompletionMessage{{Role: "user", Content: content}}}
}

// streamChat sends content as a streamed chat call and reads the stream to its end.
func streamChat(t *testing.T, c *openai.Client, content string) {
	t.Helper()
	req := chatReq(content)
	req.Stream = true
	st, err := c.CreateChatCompletionStream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	for {
		if _, err := st.Recv(); err != nil {
			return
		}
	}
}

var hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

func checkEnergyHeaders(t *testing.T, h http.Header, stage string) {
	t.Helper()
	if got := h.Get("X-EOC-Stage"); got != stage {
		t.Errorf("X-EOC-Stage %q, want %q", got, stage)
	}
	if j := h.Get("X-EOC-Joules"); j == "" || strings.ContainsAny(j, "eE") {
		t.Errorf("X-EOC-Joules %q is not a decimal", j)
	}
	switch h.Get("X-EOC-Energy") {
	case "measured":
	case "estimated":
		if h.Get("X-EOC-Energy-Reason") == "" {
			t.Error("an estimated figure without X-EOC-Energy-Reason")
		}
	default:
		t.Errorf("X-EOC-Energy %q", h.Get("X-EOC-Energy"))
	}
	if h.Get("X-EOC-Energy-Method") == "" || h.Get("X-EOC-Coverage") == "" {
		t.Errorf("no method or coverage: %v", h)
	}
	if !hex64.MatchString(h.Get("X-EOC-Receipt")) {
		t.Errorf("X-EOC-Receipt %q", h.Get("X-EOC-Receipt"))
	}
	checkBoundsHeaders(t, h)
}

var dialects = []struct {
	typ string
	new func(testing.TB, ...fakes.Config) *fakes.Server
}{
	{"ollama", fakes.NewOllama},
	{"openai", fakes.NewOpenAI},
	{"llamacpp", fakes.NewLlamaCpp},
}

func TestEachBackendWholeAndStreamed(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.typ, func(t *testing.T) {
			fake := d.new(t, fakes.Config{Reply: "one two three four", Chunks: 4})
			s := startStack(t, oneBackend(d.typ, fake.BaseURL(), ""))
			c := client(s, "")
			ctx := context.Background()

			resp, err := c.CreateChatCompletion(ctx, chatReq("whole "+d.typ))
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Choices[0].Message.Content; got != "one two three four" {
				t.Fatalf("content %q", got)
			}
			if resp.Usage.TotalTokens == 0 {
				t.Error("no usage")
			}
			checkEnergyHeaders(t, resp.Header(), "neural")

			// The same call again is a cache hit that saves what the first one cost.
			again, err := c.CreateChatCompletion(ctx, chatReq("whole "+d.typ))
			if err != nil {
				t.Fatal(err)
			}
			checkEnergyHeaders(t, again.Header(), "cache")
			if again.Choices[0].Message.Content != "one two three four" || fake.Requests() != 1 {
				t.Fatalf("cache hit: content %q, upstream calls %d", again.Choices[0].Message.Content, fake.Requests())
			}
			if again.Header().Get("X-EOC-Joules-Saved") != resp.Header().Get("X-EOC-Joules") {
				t.Errorf("saved %q, original cost %q", again.Header().Get("X-EOC-Joules-Saved"), resp.Header().Get("X-EOC-Joules"))
			}

			req := chatReq("stream " + d.typ)
			req.Stream = true
			req.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
			st, err := c.CreateChatCompletionStream(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			var text strings.Builder
			var usage *openai.Usage
			for {
				ch, err := st.Recv()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if len(ch.Choices) > 0 {
					text.WriteString(ch.Choices[0].Delta.Content)
				}
				if ch.Usage != nil {
					usage = ch.Usage
				}
			}
			_ = st.Close()
			if text.String() != "one two three four" || usage == nil || usage.TotalTokens == 0 {
				t.Fatalf("stream: text %q usage %v", text.String(), usage)
			}
		})
	}
}

// postChat posts body to the chat endpoint with the given headers; the caller closes the body.
func postChat(t *testing.T, url, body string, hdr map[string]string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// rawStream posts a streaming request and returns the SSE events, the response and its trailers.
func rawStream(t *testing.T, url, body string, hdr map[string]string) ([]string, *http.Response) {
	t.Helper()
	resp := postChat(t, url, body, hdr)
	defer func() { _ = resp.Body.Close() }()
	var events []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			events = append(events, d)
		}
	}
	if err := sc.Err(); err != nil {
		events = append(events, "ERROR: "+err.Error())
	}
	return events, resp
}

func TestStreamTrailersAndEOCChunk(t *testing.T) {
	fake := fakes.NewOpenAI(t, fakes.Config{Reply: "abcdef", Chunks: 3})
	s := startStack(t, oneBackend("openai", fake.BaseURL(), ""))
	body := `{"model":"fake-model","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	for _, stage := range []string{"neural", "cache"} {
		t.Run(stage, func(t *testing.T) {
			events, resp := rawStream(t, s.URL, body, nil) //nolint:bodyclose // rawStream closed it
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("status %d type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			// Go's client moves the announced trailers from Header["Trailer"] into resp.Trailer.
			if _, announced := resp.Trailer["X-Eoc-Joules"]; !announced {
				t.Fatalf("trailers not announced: %v", resp.Header)
			}
			checkEnergyHeaders(t, resp.Trailer, stage)
			n := len(events)
			if n < 3 || events[n-1] != "[DONE]" {
				t.Fatalf("events %q", events)
			}
			var final struct {
				Choices []any `json:"choices"`
				EOC     struct {
					Joules  float64 `json:"joules"`
					Stage   string  `json:"stage"`
					Energy  string  `json:"energy"`
					Receipt string  `json:"receipt"`
				} `json:"eoc"`
			}
			if err := json.Unmarshal([]byte(events[n-2]), &final); err != nil {
				t.Fatal(err)
			}
			if final.EOC.Stage != stage || final.EOC.Receipt != resp.Trailer.Get("X-EOC-Receipt") || len(final.Choices) != 0 {
				t.Fatalf("final chunk %+v, trailer receipt %q", final, resp.Trailer.Get("X-EOC-Receipt"))
			}
			for _, e := range events[:n-2] {
				if strings.Contains(e, `"usage"`) {
					t.Fatalf("usage chunk forwarded though the client did not ask: %s", e)
				}
			}
		})
	}
	if !strings.Contains(string(fake.LastBody()), `"include_usage":true`) {
		t.Fatalf("usage not requested upstream: %s", fake.LastBody())
	}
}

func TestCachedAnswerReplaysAsSSE(t *testing.T) {
	fake := fakes.NewOllama(t, fakes.Config{Reply: "replayed text"})
	s := startStack(t, oneBackend("ollama", fake.BaseURL(), ""))
	c := client(s, "")
	if _, err := c.CreateChatCompletion(context.Background(), chatReq("q")); err != nil {
		t.Fatal(err)
	}
	events, resp := rawStream(t, s.URL, `{"model":"fake-model","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"q"}]}`, nil) //nolint:bodyclose // rawStream closed it
	if resp.Trailer.Get("X-EOC-Stage") != "cache" || fake.Requests() != 1 {
		t.Fatalf("stage %q, upstream calls %d", resp.Trailer.Get("X-EOC-Stage"), fake.Requests())
	}
	var text strings.Builder
	sawUsage := false
	for _, e := range events {
		var ch openai.ChatCompletionStreamResponse
		if json.Unmarshal([]byte(e), &ch) != nil {
			continue
		}
		if len(ch.Choices) > 0 {
			text.WriteString(ch.Choices[0].Delta.Content)
		}
		sawUsage = sawUsage || ch.Usage != nil
	}
	if text.String() != "replayed text" || !sawUsage {
		t.Fatalf("replay %q usage %v", text.String(), sawUsage)
	}
}

func TestEveryAnswerFieldMissesTheCache(t *testing.T) {
	fake := fakes.NewOpenAI(t)
	s := startStack(t, oneBackend("openai", fake.BaseURL(), ""))
	c := client(s, "")
	base := func() openai.ChatCompletionRequest {
		r := chatReq("base question")
		r.Messages = append([]openai.ChatCompletionMessage{{Role: "system", Content: "sys"}}, r.Messages...)
		return r
	}
	if _, err := c.CreateChatCompletion(context.Background(), base()); err != nil {
		t.Fatal(err)
	}
	seed := 7
	tests := []struct {
		name   string
		change func(*openai.ChatCompletionRequest)
	}{
		{"model", func(r *openai.ChatCompletionRequest) { r.Model = "fake-model-2" }},
		{"system prompt", func(r *openai.ChatCompletionRequest) { r.Messages[0].Content = "other sys" }},
		{"history", func(r *openai.ChatCompletionRequest) {
			r.Messages = append(r.Messages[:1], append([]openai.ChatCompletionMessage{{Role: "user", Content: "earlier"}, {Role: "assistant", Content: "ok"}}, r.Messages[1:]...)...)
		}},
		{"last message", func(r *openai.ChatCompletionRequest) { r.Messages[1].Content = "another question" }},
		{"temperature", func(r *openai.ChatCompletionRequest) { r.Temperature = 0.7 }},
		{"top_p", func(r *openai.ChatCompletionRequest) { r.TopP = 0.5 }},
		{"seed", func(r *openai.ChatCompletionRequest) { r.Seed = &seed }},
		{"max_tokens", func(r *openai.ChatCompletionRequest) { r.MaxTokens = 5 }}, //nolint:staticcheck // SA1019: the deprecated max_tokens is the field under test
		{"max_completion_tokens", func(r *openai.ChatCompletionRequest) { r.MaxCompletionTokens = 5 }},
		{"stop", func(r *openai.ChatCompletionRequest) { r.Stop = []string{"\n"} }},
		{"n", func(r *openai.ChatCompletionRequest) { r.N = 2 }},
		{"logprobs", func(r *openai.ChatCompletionRequest) { r.LogProbs = true }},
		{"presence_penalty", func(r *openai.ChatCompletionRequest) { r.PresencePenalty = 0.5 }},
		{"response_format", func(r *openai.ChatCompletionRequest) {
			r.ResponseFormat = &openai.ChatCompletionResponseFormat{Type: openai.ChatCompletionResponseFormatTypeJSONObject}
		}},
		{"tools", func(r *openai.ChatCompletionRequest) {
			r.Tools = []openai.Tool{{Type: "function", Function: &openai.FunctionDefinition{Name: "f", Parameters: json.RawMessage(`{"type":"object"}`)}}}
		}},
		{"tool_choice", func(r *openai.ChatCompletionRequest) {
			r.Tools = []openai.Tool{{Type: "function", Function: &openai.FunctionDefinition{Name: "f", Parameters: json.RawMessage(`{"type":"object"}`)}}}
			r.ToolChoice = "none"
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := base()
			tc.change(&r)
			if tc.name == "model" {
				fake.Configure(func(c *fakes.Config) { c.Models = []string{"fake-model", "fake-model-2"} })
			}
			resp, err := c.CreateChatCompletion(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Header().Get("X-EOC-Stage"); got != "neural" {
				t.Fatalf("changed %s, still served by %q", tc.name, got)
			}
		})
	}
	// The table's requests differ from each other too: 1 + len(tests) upstream calls, none cached.
	if fake.Requests() != 1+len(tests) {
		t.Fatalf("upstream calls %d, want %d", fake.Requests(), 1+len(tests))
	}
}

func TestNothingCachedFromFailures(t *testing.T) {
	t.Run("5xx", func(t *testing.T) {
		fake := fakes.NewOpenAI(t, fakes.Config{Status: 500})
		s := startStack(t, oneBackend("openai", fake.BaseURL(), ""))
		c := client(s, "")
		for range 2 {
			if _, err := c.CreateChatCompletion(context.Background(), chatReq("x")); err == nil {
				t.Fatal("a 500 upstream gave no error")
			}
		}
		if fake.Requests() != 2 {
			t.Fatalf("the second call did not reach the upstream: %d", fake.Requests())
		}
	})
	t.Run("truncated stream", func(t *testing.T) {
		fake := fakes.NewOpenAI(t, fakes.Config{Chunks: 4, TruncateAfter: 2})
		s := startStack(t, oneBackend("openai", fake.BaseURL(), ""))
		body := `{"model":"fake-model","stream":true,"messages":[{"role":"user","content":"t"}]}`
		events, _ := rawStream(t, s.URL, body, nil) //nolint:bodyclose // rawStream closed it
		if len(events) > 0 && events[len(events)-1] == "[DONE]" {
			t.Fatalf("a truncated upstream ended cleanly: %q", events)
		}
		fake.Configure(func(c *fakes.Config) { c.TruncateAfter = 0 })
		_, resp := rawStream(t, s.URL, body, nil) //nolint:bodyclose // rawStream closed it
		if resp.Trailer.Get("X-EOC-Stage") != "neural" || fake.Requests() != 2 {
			t.Fatalf("after a truncated stream: stage %q, upstream calls %d", resp.Trailer.Get("X-EOC-Stage"), fake.Requests())
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		fake := fakes.NewOllama(t, fakes.Config{Chunks: 4, BlockAfter: 2})
		s := startStack(t, oneBackend("ollama", fake.BaseURL(), ""))
		c := client(s, "")
		disconnectMidStream(t, c, fake, "c")
		fake.Configure(func(c *fakes.Config) { c.BlockAfter = 0 })
		resp, err := c.CreateChatCompletion(context.Background(), chatReq("c"))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header().Get("X-EOC-Stage") != "neural" {
			t.Fatal("a cancelled stream was cached")
		}
	})
}

func TestClientDisconnectCancelsUpstream(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.typ, func(t *testing.T) {
			fake := d.new(t, fakes.Config{Block: true})
			s := startStack(t, oneBackend(d.typ, fake.BaseURL(), ""))
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := client(s, "").CreateChatCompletion(ctx, chatReq("block"))
				done <- err
			}()
			// Cancel once the call reached the fake: cancelled earlier, it never gets there and
			// the fake has nothing to see (a fixed sleep lost that race on a loaded machine).
			// The bounds below end waits on events; they only turn a hang into a failure, so they
			// are generous for a loaded machine under -race.
			for deadline := time.Now().Add(30 * time.Second); fake.Requests() == 0 && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
			cancel()
			if !fake.WaitCanceled(30 * time.Second) {
				t.Fatal("the fake never saw its request's context end")
			}
			if err := <-done; err == nil {
				t.Fatal("the cancelled call succeeded")
			}
		})
	}
}

// errorOf posts body and decodes OpenAI's error shape.
func errorOf(t *testing.T, url, body string, hdr map[string]string) (int, string, string) {
	t.Helper()
	resp := postChat(t, url, body, hdr)
	defer func() { _ = resp.Body.Close() }()
	var e struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("status %d: not OpenAI's error shape (%v)", resp.StatusCode, err)
	}
	code := ""
	if e.Error.Code != nil {
		code = *e.Error.Code
	}
	return resp.StatusCode, e.Error.Message, code
}

func TestErrorStatuses(t *testing.T) {
	ok := `{"model":"fake-model","messages":[{"role":"user","content":"e"}]}`
	slow := fakes.NewOpenAI(t, fakes.Config{Delay: 5 * time.Second})
	bad := fakes.NewOpenAI(t, fakes.Config{Status: 400, ErrorBody: `{"error":{"message":"upstream says no","type":"invalid_request_error","param":"messages","code":"bad"}}`})
	dead := fakes.NewOpenAI(t)
	deadURL := dead.BaseURL()
	dead.Close()
	tests := []struct {
		name, backend, body string
		status              int
		msg                 string
	}{
		{"400 malformed", bad.BaseURL(), `{"model":`, 400, "malformed"},
		{"400 upstream passes through", bad.BaseURL(), ok, 400, "upstream says no"},
		{"404 unknown model", bad.BaseURL(), `{"model":"nope","messages":[{"role":"user","content":"e"}]}`, 404, "nope"},
		{"413", bad.BaseURL(), `{"model":"fake-model","messages":[{"role":"user","content":"` + strings.Repeat("x", 4096) + `"}]}`, 413, "larger"},
		{"502 unreachable", deadURL, ok, 502, `backend "up"`},
		{"504 timeout", slow.BaseURL(), ok, 504, "timed out"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := startStack(t, fmt.Sprintf(`
log_level: error
limits: {max_body_bytes: 2048}
cascade: {stages: [cache, neural]}
backends: [{name: up, type: openai, url: %q, models: ["fake-*"], timeout: 300ms}]
`, tc.backend))
			status, msg, _ := errorOf(t, s.URL, tc.body, nil)
			if status != tc.status || !strings.Contains(msg, tc.msg) {
				t.Fatalf("got %d %q, want %d containing %q", status, msg, tc.status, tc.msg)
			}
			if tc.status == 502 || tc.status == 504 {
				// The walk ran: the error carries its figure and receipt.
				resp := postChat(t, s.URL, tc.body, nil)
				_ = resp.Body.Close()
				if !hex64.MatchString(resp.Header.Get("X-EOC-Receipt")) || resp.Header.Get("X-EOC-Energy") == "" {
					t.Fatalf("error response without energy headers: %v", resp.Header)
				}
			}
		})
	}
}

func TestAuthTenantsAndBudgets(t *testing.T) {
	fake := fakes.NewOpenAI(t)
	t.Setenv("EOC_TEST_KEY_B", "key-b-secret")
	s := startStack(t, oneBackend("openai", fake.BaseURL(), `
meter: {token_models: [{models: ["fake-*"], joules_per_prompt_token: 1, joules_per_completion_token: 1}]}
auth:
  keys:
    - {id: team-a, key: key-a-secret, budget: {joules: 1000000, per: day}}
    - {id: team-b, key: "${EOC_TEST_KEY_B}", budget: {joules: 40, per: day}}
`))
	if status, _, code := errorOf(t, s.URL, `{}`, nil); status != 401 || code != "missing_api_key" {
		t.Fatalf("no key: %d %s", status, code)
	}
	if status, _, code := errorOf(t, s.URL, `{}`, map[string]string{"Authorization": "Bearer wrong"}); status != 401 || code != "invalid_api_key" {
		t.Fatalf("bad key: %d %s", status, code)
	}
	a, b := client(s, "key-a-secret"), client(s, "key-b-secret")
	ra, err := a.CreateChatCompletion(context.Background(), chatReq("shared question"))
	if err != nil {
		t.Fatal(err)
	}
	if ra.Header().Get("X-EOC-Budget-Remaining") == "" {
		t.Fatal("no X-EOC-Budget-Remaining")
	}
	if got, want := ra.Header().Get("X-EOC-Budget-Coverage"), ra.Header().Get("X-EOC-Coverage"); got == "" || got != want {
		t.Fatalf("X-EOC-Budget-Coverage %q after the key's first call, whose coverage is %q", got, want)
	}
	rb, err := b.CreateChatCompletion(context.Background(), chatReq("shared question"))
	if err != nil {
		t.Fatal(err)
	}
	if rb.Header().Get("X-EOC-Stage") != "neural" {
		t.Fatal("team-b was served team-a's cached answer")
	}
	// team-b's budget (40 J) holds two 16 J calls (12 prompt + 4 completion tokens at 1 J each).
	var refused error
	for i := range 4 {
		if _, err := b.CreateChatCompletion(context.Background(), chatReq(fmt.Sprint("q", i))); err != nil {
			refused = err
			break
		}
	}
	var apiErr *openai.APIError
	if !errors.As(refused, &apiErr) || apiErr.HTTPStatusCode != 429 || !strings.Contains(apiErr.Message, "40 J per day") {
		t.Fatalf("over budget: %v", refused)
	}
}

func TestBudgetUnderConcurrentCalls(t *testing.T) {
	fake := fakes.NewOpenAI(t, fakes.Config{Delay: 5 * time.Millisecond})
	s := startStack(t, oneBackend("openai", fake.BaseURL(), `
cascade: {stages: [neural]}
meter: {token_models: [{models: ["fake-*"], joules_per_prompt_token: 1, joules_per_completion_token: 1}]}
auth: {keys: [{id: k, key: secret, budget: {joules: 800, per: day}}]}
`))
	c := client(s, "secret")
	var passed atomic.Int32
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.CreateChatCompletion(context.Background(), chatReq(fmt.Sprint("c", i))); err == nil {
				passed.Add(1)
			}
		}()
	}
	wg.Wait()
	// Each call costs 16 J: room for 50.
	if passed.Load() > 50 || passed.Load() == 0 || fake.Requests() > 50 {
		t.Fatalf("%d calls passed, %d reached the upstream; the budget has room for 50", passed.Load(), fake.Requests())
	}
}

func TestMetricsAfterKnownSequence(t *testing.T) {
	fake := fakes.NewOpenAI(t)
	s := startStack(t, oneBackend("openai", fake.BaseURL(), ""))
	c := client(s, "")
	for _, q := range []string{"m1", "m1", "m1", "m2"} { // 2 neural, 2 cache hits
		if _, err := c.CreateChatCompletion(context.Background(), chatReq(q)); err != nil {
			t.Fatal(err)
		}
	}
	errorOf(t, s.URL, `{"model":"nope","messages":[{"role":"user","content":"e"}]}`, nil)
	s.settled(t)
	resp, err := http.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	for _, want := range []string{
		`eoc_requests_total{model="fake-model",stage="neural",status="200"} 2`,
		`eoc_requests_total{model="fake-model",stage="cache",status="200"} 2`,
		`eoc_requests_total{model="",stage="",status="404"} 1`,
		`eoc_stage_duration_seconds_count{outcome="hit",stage="cache"} 2`,
		`eoc_stage_duration_seconds_count{outcome="miss",stage="cache"} 2`,
		`eoc_cache_entries 2`,
		`eoc_requests_in_flight 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if !regexp.MustCompile(`eoc_meter_counter_live\{counter="rapl"\} [01]\n`).Match(body) {
		t.Error("no eoc_meter_counter_live for rapl")
	}
	if !regexp.MustCompile(`eoc_joules_total\{coverage="whole",grade="estimated",model="fake-model",stage="neural"\} [0-9.e+-]+`).Match(body) {
		t.Error("no eoc_joules_total for the neural calls")
	}
	if !regexp.MustCompile(`eoc_joules_saved_total\{model="fake-model",stage="cache"\} [1-9]`).Match(body) && !regexp.MustCompile(`eoc_joules_saved_total\{model="fake-model",stage="cache"\} 0\.[0-9]*[1-9]`).Match(body) {
		t.Errorf("no joules saved by the cache hits:\n%s", grep(body, "eoc_joules"))
	}
}

func grep(b []byte, s string) string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestCacheControlHeaders(t *testing.T) {
	fake := fakes.NewOpenAI(t)
	s := startStack(t, oneBackend("openai", fake.BaseURL(), ""))
	post := func(content, cc string) string {
		hdr := map[string]string{}
		if cc != "" {
			hdr["Cache-Control"] = cc
		}
		resp := postChat(t, s.URL, `{"model":"fake-model","messages":[{"role":"user","content":"`+content+`"}]}`, hdr)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.Header.Get("X-EOC-Stage")
	}
	if post("a", "no-store") != "neural" || post("a", "") != "neural" {
		t.Fatal("no-store stored the answer")
	}
	if post("a", "no-cache") != "neural" {
		t.Fatal("no-cache looked up the cache")
	}
	if post("b", "no-cache") != "neural" || post("b", "") != "cache" {
		t.Fatal("no-cache did not store")
	}
}

// TestLedgerRecordsEveryCall checks that whole answers, streams, cache hits, errors and a client
// that went away each append one record whose receipt is the one the client was sent, and that
// the chain verifies.
func TestLedgerRecordsEveryCall(t *testing.T) {
	fake := fakes.NewOpenAI(t, fakes.Config{Chunks: 4})
	path := t.TempDir() + "/receipts.jsonl"
	s := startStack(t, oneBackend("openai", fake.BaseURL(), fmt.Sprintf(`
ledger: {path: %q, fsync: every, hmac_key: test-hmac}
auth: {keys: [{id: team-a, key: secret-a}]}
`, path)))
	hdr := map[string]string{"Authorization": "Bearer secret-a"}
	c := client(s, "secret-a")
	var receipts []string
	for range 2 { // neural, then cache
		resp, err := c.CreateChatCompletion(context.Background(), chatReq("ledger"))
		if err != nil {
			t.Fatal(err)
		}
		receipts = append(receipts, resp.Header().Get("X-EOC-Receipt"))
	}
	_, resp := rawStream(t, s.URL, `{"model":"fake-model","stream":true,"messages":[{"role":"user","content":"ledger stream"}]}`, hdr) //nolint:bodyclose // rawStream closed it
	receipts = append(receipts, resp.Trailer.Get("X-EOC-Receipt"))
	errorOf(t, s.URL, `{"model":"nope","messages":[{"role":"user","content":"e"}]}`, hdr)
	fake.Configure(func(c *fakes.Config) { c.BlockAfter = 2 })
	disconnectMidStream(t, c, fake, "ledger gone")
	// The disconnected call's record is written once the walk returns.
	deadline := time.Now().Add(5 * time.Second)
	var recs []ledger.Record
	for time.Now().Before(deadline) {
		recs = readRecords(t, path)
		if len(recs) == 5 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(recs) != 5 {
		t.Fatalf("%d records, want 5", len(recs))
	}
	for i, r := range receipts {
		if recs[i].Receipt != r {
			t.Errorf("record %d receipt %q, client got %q", i, recs[i].Receipt, r)
		}
		if recs[i].KeyID != "team-a" || recs[i].Status != 200 {
			t.Errorf("record %d: %+v", i, recs[i])
		}
	}
	if recs[1].Stage != "cache" || recs[1].Saved == 0 || recs[3].Status != 404 || !recs[4].Disconnected {
		t.Errorf("records: %+v", recs)
	}
	rep, err := ledger.Verifier{HMACKey: []byte("test-hmac")}.Verify(path)
	if err != nil || rep.Records != 5 {
		t.Fatalf("verify: %v, %+v", err, rep)
	}
}

func readRecords(t *testing.T, path string) []ledger.Record {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []ledger.Record
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var r ledger.Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// disconnectMidStream starts a stream, reads one chunk, goes away, and waits for the upstream
// (configured to block after a few chunks) to see the cancellation.
func disconnectMidStream(t *testing.T, c *openai.Client, fake *fakes.Server, content string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req := chatReq(content)
	req.Stream = true
	st, err := c.CreateChatCompletionStream(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	_ = st.Close()
	if !fake.WaitCanceled(30 * time.Second) {
		t.Fatal("the upstream never saw the client go away")
	}
}

// TestGraphSavedFollowsNeuralCost: a graph hit reports the stated 10 J until the proxy has called
// the model, then the model's running joules per completion token (from the neural calls' figures,
// here a token model of 1 J a token) × the answer's tokens, labelled as a running estimate.
func TestGraphSavedFollowsNeuralCost(t *testing.T) {
	facts := filepath.Join(t.TempDir(), "facts.tsv")
	if err := os.WriteFile(facts, []byte("Night Ferry\tdirector\tTomas Vell\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fake := fakes.NewOpenAI(t, fakes.Config{Usage: &cascade.Usage{PromptTokens: 12, CompletionTokens: 4, TotalTokens: 16}})
	s := startStack(t, oneBackend("openai", fake.BaseURL(), fmt.Sprintf(`
cascade: {stages: [graph, neural], graph: {files: [%q]}}
meter: {token_models: [{models: ["fake-*"], joules_per_prompt_token: 1, joules_per_completion_token: 1}]}
`, facts)))
	c := client(s, "")
	ctx := context.Background()
	graphHit := func() (saved float64, reason string, tokens int) {
		t.Helper()
		resp, err := c.CreateChatCompletion(ctx, chatReq("Who directed Night Ferry?"))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header().Get("X-EOC-Stage") != "graph" || resp.Choices[0].Message.Content != "Night Ferry was directed by Tomas Vell." {
			t.Fatalf("not a graph hit: %q %q", resp.Header().Get("X-EOC-Stage"), resp.Choices[0].Message.Content)
		}
		saved, err = strconv.ParseFloat(resp.Header().Get("X-EOC-Joules-Saved"), 64)
		if err != nil {
			t.Fatalf("X-EOC-Joules-Saved: %v", err)
		}
		return saved, resp.Header().Get("X-EOC-Energy-Reason"), resp.Usage.CompletionTokens
	}
	neuralCall := func(q string, wantJoules float64) {
		t.Helper()
		resp, err := c.CreateChatCompletion(ctx, chatReq(q))
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Header().Get("X-EOC-Joules"); resp.Header().Get("X-EOC-Stage") != "neural" || got != fmt.Sprint(wantJoules) {
			t.Fatalf("neural call: stage %q joules %s, want %v", resp.Header().Get("X-EOC-Stage"), got, wantJoules)
		}
	}

	saved, reason, tokens := graphHit()
	if saved != 10 || !strings.Contains(reason, "saved-stated") {
		t.Fatalf("first graph hit: saved %v (%q), want the stated 10 J", saved, reason)
	}
	neuralCall("first question", 16) // 12 + 4 J: 4 J per completion token
	saved, reason, _ = graphHit()
	if want := 4 * float64(tokens); math.Abs(saved-want) > 1e-6 || !strings.Contains(reason, "saved-running-estimated") {
		t.Fatalf("after a 16 J call of 4 tokens: saved %v (%q), want %v", saved, reason, want)
	}
	// A dearer call per token (12 + 1 J for one token) moves the running mean up by a fifth of the
	// difference.
	fake.Configure(func(c *fakes.Config) {
		c.Usage = &cascade.Usage{PromptTokens: 12, CompletionTokens: 1, TotalTokens: 13}
	})
	neuralCall("second question", 13)
	perToken := 4 + energy.DefaultTrackerWeight*(13-4)
	if saved2, _, _ := graphHit(); math.Abs(saved2-perToken*float64(tokens)) > 1e-6 || saved2 <= saved {
		t.Fatalf("after a 13 J call of 1 token: saved %v, want %v", saved2, perToken*float64(tokens))
	}
}

// TestSameBodyConcurrently sends the same bodies from many clients at once through every shipped
// stage, on each backend type: calls with the same bytes share one decoded request, and the race
// detector (.ci/run's unit tests run with -race) fails this test if any stage or backend writes
// to it. Half the calls skip the lookups (Cache-Control: no-cache), so every stage reads it.
func TestSameBodyConcurrently(t *testing.T) {
	facts := filepath.Join(t.TempDir(), "facts.tsv")
	if err := os.WriteFile(facts, []byte("Night Ferry\tdirector\tTomas Vell\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bodies := []string{
		`{"model":"fake-model","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Who directed Night Ferry?"}],"stop":["x","y"],"max_tokens":50}`,
		`{"model":"fake-model","messages":[{"role":"user","content":"Name a colour."}],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"model":"fake-model","messages":[{"role":"user","content":[{"type":"text","text":"Use the tool."}]}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"temperature":0.2}`,
	}
	for _, d := range []fakes.Dialect{fakes.Ollama, fakes.OpenAI} {
		t.Run(string(d), func(t *testing.T) {
			fake := fakes.New(t, d)
			typ := "ollama"
			if d == fakes.OpenAI {
				typ = "openai"
			}
			s := startStack(t, oneBackend(typ, fake.BaseURL(), fmt.Sprintf(`
cascade: {stages: [cache, kv, graph, neural], graph: {files: [%q]}}`, facts)))
			var wg sync.WaitGroup
			codes := make(chan int, 48)
			for i := range 48 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/chat/completions", strings.NewReader(bodies[i%len(bodies)]))
					if i%2 == 0 {
						req.Header.Set("Cache-Control", "no-cache")
					}
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					codes <- resp.StatusCode
				}()
			}
			wg.Wait()
			close(codes)
			for code := range codes {
				if code != http.StatusOK {
					t.Errorf("status %d", code)
				}
			}
		})
	}
}
