package backends

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/internal/testenv/fakes"
)

func base64Std(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// serve answers every request with body as contentType, for replies the fakes do not produce.
func serve(t *testing.T, contentType, body string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", contentType)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// The client's own body goes upstream: unknown fields survive, only stream and
// stream_options.include_usage are set.
func TestOpenAIForwardsRawBody(t *testing.T) {
	cases := []struct {
		name   string
		body   string
		stream bool
		want   string // the JSON the upstream must get; "" means byte-identical to body
	}{
		{
			name: "whole, untouched",
			body: `{"model":"fake-model", "messages":[{"role":"user","content":"hi <b>&</b>"}],"logit_bias":{"50256":-100},"x_vendor":{"a":[1,2.50,"é"]}}`,
		},
		{
			name: "whole, stream false kept",
			body: `{"model":"fake-model","messages":[],"stream":false,"service_tier":"flex"}`,
		},
		{
			name:   "stream, include_usage forced",
			body:   `{"model":"fake-model","messages":[{"role":"user","content":"hi"}],"stream":true,"parallel_tool_calls":false,"metadata":{"k":"v"}}`,
			stream: true,
			want:   `{"model":"fake-model","messages":[{"role":"user","content":"hi"}],"stream":true,"parallel_tool_calls":false,"metadata":{"k":"v"},"stream_options":{"include_usage":true}}`,
		},
		{
			name:   "stream, other stream_options kept",
			body:   `{"model":"fake-model","messages":[],"stream_options":{"include_obfuscation":false,"include_usage":false},"stream":true,"verbosity":"low"}`,
			stream: true,
			want:   `{"model":"fake-model","messages":[],"verbosity":"low","stream":true,"stream_options":{"include_obfuscation":false,"include_usage":true}}`,
		},
		{
			name:   "stream, already as wanted",
			body:   `{"model":"fake-model","messages":[],"stream":true,"stream_options":{"include_usage":true},"top_k":40}`,
			stream: true,
		},
		{
			name: "whole, client asked to stream",
			body: `{"model":"fake-model","messages":[],"stream":true,"stream_options":{"include_usage":true},"top_k":40}`,
			want: `{"model":"fake-model","messages":[],"top_k":40,"stream":false}`,
		},
	}
	for _, typ := range []string{"openai", "llamacpp"} {
		for _, tc := range cases {
			t.Run(typ+"/"+tc.name, func(t *testing.T) {
				f := fakes.New(t, fakes.Dialect(typ))
				b := newBackend(t, typ, f)
				var sink cascade.Sink
				if tc.stream {
					sink = (&collector{}).sink
				}
				if _, err := b.Chat(context.Background(), chatRequest(t, tc.body), sink); err != nil {
					t.Fatal(err)
				}
				got := string(f.LastBody())
				if tc.want == "" {
					if got != tc.body {
						t.Errorf("upstream got\n%s\nwant the body unchanged\n%s", got, tc.body)
					}
					return
				}
				if !jsonEqual(t, got, tc.want) {
					t.Errorf("upstream got\n%s\nwant\n%s", got, tc.want)
				}
				if p := f.LastRequest().Path; p != "/v1/chat/completions" {
					t.Errorf("path = %s", p)
				}
			})
		}
	}
}

// Without a raw body (a request built in code) the parsed view is sent.
func TestOpenAIWithoutRaw(t *testing.T) {
	f := fakes.NewOpenAI(t)
	b := newBackend(t, "openai", f)
	req := chatRequest(t, helloBody)
	req.Raw = nil
	if _, err := b.Chat(context.Background(), req, (&collector{}).sink); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(f.LastBody(), &got); err != nil {
		t.Fatal(err)
	}
	if got["model"] != "fake-model" || got["stream"] != true || !reflect.DeepEqual(got["stream_options"], map[string]any{"include_usage": true}) {
		t.Errorf("sent %s", f.LastBody())
	}
}

// Replies from OpenAI-compatible servers that the fakes do not produce.
func TestOpenAIStreamQuirks(t *testing.T) {
	chunk := func(extra string) string {
		return `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[` + extra
	}
	cases := []struct {
		name        string
		contentType string
		body        string
		wantText    string
		wantChunks  int // including the split-off usage chunk
		wantUsage   *cascade.Usage
		wantErr     func(error) bool
		complete    bool
	}{
		{
			name:        "usage on the finish chunk is split off",
			contentType: "text/event-stream",
			body: "data: " + chunk(`{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}`) + "\n\n" +
				"data: " + chunk(`{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`) + "\n\n" +
				"data: [DONE]\n\n",
			wantText: "Hi", wantChunks: 3, wantUsage: &cascade.Usage{PromptTokens: 1, CompletionTokens: 2, TotalTokens: 3}, complete: true,
		},
		{
			name:        "comments, event names, CRLF, multi-line data",
			contentType: "text/event-stream; charset=utf-8",
			body: ": keep-alive\r\n\r\nevent: message\r\nid: 7\r\ndata: " + chunk(`{"index":0,"delta":{"content":"A"},`) + "\r\n" +
				`data: "finish_reason":null}]}` + "\r\n\r\n" +
				": ping\n\n" +
				"data:" + chunk(`{"index":0,"delta":{"content":"B"},"finish_reason":"length"}]}`) + "\n\n" +
				"data: [DONE]\n", // no blank line before EOF
			wantText: "AB", wantChunks: 2, complete: true,
		},
		{
			name:        "no usage from the upstream",
			contentType: "text/event-stream",
			body: "data: " + chunk(`{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}`) + "\n\n" +
				"data: [DONE]\n\n",
			wantText: "x", wantChunks: 1, wantUsage: &cascade.Usage{}, complete: true,
		},
		{
			name:        "error event mid-stream",
			contentType: "text/event-stream",
			body: "data: " + chunk(`{"index":0,"delta":{"content":"x"},"finish_reason":null}]}`) + "\n\n" +
				`data: {"error":{"message":"context overflow","type":"server_error","code":500}}` + "\n\n",
			wantText: "x", wantChunks: 1,
			wantErr: func(err error) bool {
				var up *cascade.UpstreamError
				return errors.As(err, &up) && up.Message == "context overflow" && up.Code == "500"
			},
		},
		{
			name:        "llama.cpp's older error line",
			contentType: "text/event-stream",
			body:        `error: {"error":{"code":400,"message":"the request exceeds the available context size","type":"exceed_context_size_error"}}` + "\n\n",
			wantErr: func(err error) bool {
				var up *cascade.UpstreamError
				return errors.As(err, &up) && up.Type == "exceed_context_size_error"
			},
		},
		{
			name:        "garbage event",
			contentType: "text/event-stream",
			body:        "data: {not json\n\n",
			wantErr: func(err error) bool {
				var be *cascade.BackendError
				return errors.As(err, &be)
			},
		},
		{
			name:        "whole JSON although asked to stream",
			contentType: "application/json",
			body:        `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"whole"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`,
			wantText:    "whole", wantChunks: 4, wantUsage: &cascade.Usage{PromptTokens: 1, CompletionTokens: 1, TotalTokens: 2}, complete: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := serve(t, tc.contentType, tc.body)
			b, err := New(Options{Name: "o", Type: "openai", URL: srv.URL + "/v1"})
			if err != nil {
				t.Fatal(err)
			}
			var c collector
			ans, err := b.Chat(context.Background(), chatRequest(t, helloStreamBody), c.sink)
			if tc.wantErr != nil {
				if !tc.wantErr(err) {
					t.Fatalf("unexpected error %v (%T)", err, err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if len(c.chunks) != tc.wantChunks || c.text() != tc.wantText {
				t.Errorf("chunks %d text %q, want %d %q: %s", len(c.chunks), c.text(), tc.wantChunks, tc.wantText, mustJSON(t, c.chunks))
			}
			if ans == nil {
				t.Fatal("no answer")
			}
			if ans.Complete != tc.complete || ans.Text() != tc.wantText || !ans.Streamed {
				t.Errorf("answer complete=%v text=%q streamed=%v", ans.Complete, ans.Text(), ans.Streamed)
			}
			if tc.wantUsage != nil {
				if ans.Usage == nil || *ans.Usage != *tc.wantUsage {
					t.Errorf("usage = %+v, want %+v", ans.Usage, tc.wantUsage)
				}
				last := c.chunks[len(c.chunks)-1]
				if tc.wantUsage.TotalTokens > 0 && (len(last.Choices) != 0 || last.Usage == nil) {
					t.Errorf("last chunk is not a usage chunk: %s", mustJSON(t, last))
				}
				for _, ch := range c.chunks[:len(c.chunks)-1] {
					if ch.Usage != nil {
						t.Errorf("usage left on a choice chunk: %s", mustJSON(t, ch))
					}
				}
			}
		})
	}
}

func TestLlamaCppTimingsPerToken(t *testing.T) {
	// With timings_per_token every chunk carries timings; the last one counts.
	tm := func(n int) string {
		return `,"timings":{"cache_n":5,"prompt_n":10,"prompt_ms":12.5,"predicted_n":` + string(rune('0'+n)) + `,"predicted_ms":` + string(rune('0'+n)) + `0}`
	}
	body := "data: " + `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]` + tm(1) + "}\n\n" +
		"data: " + `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"b"},"finish_reason":"stop"}]` + tm(2) + "}\n\n" +
		"data: [DONE]\n\n"
	srv := serve(t, "text/event-stream", body)
	for _, typ := range []string{"llamacpp", "openai"} {
		t.Run(typ, func(t *testing.T) {
			b, _ := New(Options{Name: "l", Type: typ, URL: srv.URL + "/v1"})
			ans, err := b.Chat(context.Background(), chatRequest(t, helloStreamBody), (&collector{}).sink)
			if err != nil {
				t.Fatal(err)
			}
			var want *cascade.Timings
			if typ == "llamacpp" {
				want = &cascade.Timings{PromptN: 10, PredictedN: 2, CacheN: 5, PromptEval: 12500 * time.Microsecond, Eval: 20 * time.Millisecond, Total: 32500 * time.Microsecond}
			}
			if !reflect.DeepEqual(ans.Timings, want) {
				t.Errorf("timings = %+v, want %+v", ans.Timings, want)
			}
		})
	}
}

func TestNew(t *testing.T) {
	cases := []struct {
		name    string
		o       Options
		wantT   any
		wantErr string
	}{
		{name: "ollama", o: Options{Name: "a", Type: "ollama", URL: "http://127.0.0.1:11434"}, wantT: &Ollama{}},
		{name: "openai", o: Options{Name: "a", Type: "openai", URL: "https://api.openai.com/v1/"}, wantT: &OpenAI{}},
		{name: "llamacpp", o: Options{Name: "a", Type: "llamacpp", URL: "http://127.0.0.1:8080/v1"}, wantT: &LlamaCpp{}},
		{name: "unknown type", o: Options{Name: "a", Type: "vllm", URL: "http://x"}, wantErr: `unknown type "vllm" (want one of llamacpp, ollama, openai)`},
		{name: "no name", o: Options{Type: "openai", URL: "http://x"}, wantErr: "name is required"},
		{name: "no scheme", o: Options{Name: "a", Type: "openai", URL: "localhost:8080"}, wantErr: "want http(s)://"},
		{name: "no host", o: Options{Name: "a", Type: "ollama", URL: "http:///v1"}, wantErr: "want http(s)://"},
		{name: "password hidden", o: Options{Name: "a", Type: "ollama", URL: "ftp://u:hunter2@h"}, wantErr: "ftp://u:xxxxx@h"},
		{name: "negative timeout", o: Options{Name: "a", Type: "ollama", URL: "http://h", Timeout: -time.Second}, wantErr: "negative timeout"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := New(tc.o)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if reflect.TypeOf(b) != reflect.TypeOf(tc.wantT) {
				t.Errorf("New returned %T, want %T", b, tc.wantT)
			}
		})
	}
	if got := Types(); !reflect.DeepEqual(got, []string{"llamacpp", "ollama", "openai"}) {
		t.Errorf("Types = %v", got)
	}
}

func TestParseErrorBody(t *testing.T) {
	cases := []struct {
		name string
		body string
		want cascade.UpstreamError
	}{
		{name: "openai", body: `{"error":{"message":"Invalid model","type":"invalid_request_error","param":"model","code":"model_not_found"}}`,
			want: cascade.UpstreamError{Message: "Invalid model", Type: "invalid_request_error", Param: "model", Code: "model_not_found"}},
		{name: "openai message list", body: `{"error":{"message":["a","b"],"type":"t"}}`,
			want: cascade.UpstreamError{Message: "a, b", Type: "t"}},
		{name: "llama.cpp numeric code", body: `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`,
			want: cascade.UpstreamError{Message: "Loading model", Type: "unavailable_error", Code: "503"}},
		{name: "ollama", body: `{"error":"model \"x\" not found, try pulling it first"}`,
			want: cascade.UpstreamError{Message: `model "x" not found, try pulling it first`}},
		{name: "vllm top level", body: `{"object":"error","message":"max_tokens too large","type":"BadRequestError","param":null,"code":400}`,
			want: cascade.UpstreamError{Message: "max_tokens too large", Type: "BadRequestError", Code: "400"}},
		{name: "fastapi detail", body: `{"detail":"Not Found"}`, want: cascade.UpstreamError{Message: "Not Found"}},
		{name: "fastapi detail list", body: `{"detail":[{"loc":["body"],"msg":"field required"}]}`,
			want: cascade.UpstreamError{Message: `[{"loc":["body"],"msg":"field required"}]`}},
		{name: "text", body: "  Bad Gateway\n", want: cascade.UpstreamError{Message: "Bad Gateway"}},
		{name: "long text cut", body: strings.Repeat("é", 400), want: cascade.UpstreamError{Message: strings.Repeat("é", 256)}},
		{name: "binary dropped", body: "\xff\xfe\x00", want: cascade.UpstreamError{}},
		{name: "error is null", body: `{"error":null,"message":"m"}`, want: cascade.UpstreamError{Message: "m"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got cascade.UpstreamError
			parseErrorBody([]byte(tc.body), &got)
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// A reply larger than the limit, or a connection cut, is an error, never a silent short answer.
func TestOpenAIWholeBodyErrors(t *testing.T) {
	srv := serve(t, "application/json", `{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":null}]}`)
	b, _ := New(Options{Name: "o", Type: "openai", URL: srv.URL + "/v1"})
	ans, err := b.Chat(context.Background(), chatRequest(t, helloBody), nil)
	if err != nil {
		t.Fatal(err)
	}
	if ans.Complete || ans.Usage == nil {
		t.Errorf("answer without a finish reason: complete=%v usage=%v", ans.Complete, ans.Usage)
	}
	bad := serve(t, "application/json", `{"id":`)
	b, _ = New(Options{Name: "o", Type: "openai", URL: bad.URL + "/v1"})
	var be *cascade.BackendError
	if _, err := b.Chat(context.Background(), chatRequest(t, helloBody), nil); !errors.As(err, &be) {
		t.Errorf("err = %v, want a BackendError", err)
	}
}

// After [DONE] or done the connection goes back to the pool: one connection serves many calls.
func TestConnectionReuse(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.typ, func(t *testing.T) {
			f := d.fake(t)
			b := newBackend(t, d.typ, f)
			for i := range 6 {
				var sink cascade.Sink
				if i%2 == 0 {
					sink = (&collector{}).sink
				}
				if _, err := b.Chat(context.Background(), chatRequest(t, helloBody), sink); err != nil {
					t.Fatal(err)
				}
			}
			if n := f.Conns(); n != 1 {
				t.Errorf("6 calls opened %d connections, want 1", n)
			}
		})
	}
}

// An upstream that keeps the reply open after [DONE] or done does not hold the answer back.
func TestStreamEndsAtDoneThoughUpstreamLingers(t *testing.T) {
	cases := []struct {
		typ, contentType, body string
	}{
		{"openai", "text/event-stream", "data: " + `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n"},
		{"ollama", "application/x-ndjson", `{"model":"m","message":{"role":"assistant","content":"x"},"done":true,"done_reason":"stop"}` + "\n"},
	}
	for _, tc := range cases {
		t.Run(tc.typ, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.contentType)
				_, _ = io.WriteString(w, tc.body)
				w.(http.Flusher).Flush()
				<-r.Context().Done()
			}))
			t.Cleanup(srv.Close)
			t.Cleanup(srv.CloseClientConnections)
			b, _ := New(Options{Name: "l", Type: tc.typ, URL: srv.URL + "/v1"})
			if tc.typ == "ollama" {
				b, _ = New(Options{Name: "l", Type: tc.typ, URL: srv.URL})
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ans, err := b.Chat(ctx, chatRequest(t, helloBody), (&collector{}).sink)
			if err != nil || !ans.Complete || ans.Text() != "x" {
				t.Fatalf("answer %+v, err %v", ans, err)
			}
		})
	}
}

// A stream chunk whose choice or tool-call index breaks the request's bounds fails the call as
// a backend error (502 at the edge), forwards nothing of it, and never panics.
func TestOpenAIStreamIndexOutOfBounds(t *testing.T) {
	chunk := func(choice string) string {
		return "data: " + `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[` + choice + `]}` + "\n\n"
	}
	for name, body := range map[string]string{
		"huge choice":     chunk(`{"index":0,"delta":{"content":"A"}}`) + chunk(`{"index":1000000,"delta":{"content":"B"}}`) + "data: [DONE]\n\n",
		"negative choice": chunk(`{"index":-1,"delta":{"content":"B"}}`) + "data: [DONE]\n\n",
		"negative tool":   chunk(`{"index":0,"delta":{"tool_calls":[{"index":-5,"function":{"name":"f"}}]}}`) + "data: [DONE]\n\n",
		"huge tool":       chunk(`{"index":0,"delta":{"tool_calls":[{"index":50000000,"function":{"name":"f"}}]}}`) + "data: [DONE]\n\n",
	} {
		t.Run(name, func(t *testing.T) {
			srv := serve(t, "text/event-stream", body)
			b, err := New(Options{Name: "up", Type: "openai", URL: srv.URL, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			var c collector
			ans, err := b.Chat(context.Background(), chatRequest(t, helloStreamBody), c.sink)
			var be *cascade.BackendError
			if !errors.As(err, &be) || be.Backend != "up" || !strings.Contains(err.Error(), "index") {
				t.Fatalf("err = %v, want a BackendError naming the index", err)
			}
			if ans == nil || ans.Complete || len(ans.Choices) > 1 {
				t.Fatalf("answer %+v", ans)
			}
			if c.text() == "B" || strings.Contains(c.text(), "B") {
				t.Fatalf("the out-of-bounds chunk reached the client: %q", c.text())
			}
		})
	}
}

// A whole answer is held to the bounds a stream's chunks are: a choice index outside the
// request's n fails the call as a backend error (502 at the edge, nothing learned), asked whole
// or answered whole to a stream, as the streamed answer with the same index does.
func TestOpenAIWholeIndexOutOfBounds(t *testing.T) {
	whole := func(choices string) string {
		return `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[` + choices + `],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`
	}
	msg := `"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"`
	calls := strings.Repeat(`{"id":"x","type":"function","function":{"name":"f","arguments":"{}"}},`, cascade.MaxToolCalls+1)
	for name, body := range map[string]string{
		"negative choice": whole(`{"index":-1,` + msg + `}`),
		"huge choice":     whole(`{"index":1000000,` + msg + `}`),
		"second choice":   whole(`{"index":0,` + msg + `},{"index":1,` + msg + `}`),
		"too many tools":  whole(`{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[` + strings.TrimSuffix(calls, ",") + `]},"finish_reason":"tool_calls"}`),
	} {
		t.Run(name, func(t *testing.T) {
			srv := serve(t, "application/json", body)
			b, err := New(Options{Name: "up", Type: "openai", URL: srv.URL, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			for _, streamed := range []bool{false, true} {
				var c collector
				var sink cascade.Sink
				req := helloBody
				if streamed {
					sink, req = c.sink, helloStreamBody
				}
				ans, err := b.Chat(context.Background(), chatRequest(t, req), sink)
				var be *cascade.BackendError
				if !errors.As(err, &be) || be.Backend != "up" {
					t.Fatalf("streamed=%v: err = %v, want a BackendError", streamed, err)
				}
				if ans != nil && ans.Complete {
					t.Fatalf("streamed=%v: a complete answer came back beside the error: %+v", streamed, ans)
				}
				if c.text() != "" {
					t.Fatalf("the malformed answer reached the client: %q", c.text())
				}
			}
		})
	}
}
