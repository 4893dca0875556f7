package backends

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/internal/testenv/fakes"
)

// wantTimings is what each dialect's fake reports with fakes.DefaultTimings, 12 prompt and 4
// completion tokens.
var wantTimings = map[string]*cascade.Timings{
	"ollama": {PromptN: 12, PredictedN: 4, Load: time.Millisecond, PromptEval: 2 * time.Millisecond, Eval: 3 * time.Millisecond, Total: 7 * time.Millisecond},
	"openai": nil,
	// llama-server reports prompt and predicted milliseconds; Total is their sum.
	"llamacpp": {PromptN: 12, PredictedN: 4, CacheN: 3, PromptEval: 2 * time.Millisecond, Eval: 3 * time.Millisecond, Total: 5 * time.Millisecond},
}

var wantUsage = cascade.Usage{PromptTokens: 12, CompletionTokens: 4, TotalTokens: 16}

func TestChatWhole(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.typ, func(t *testing.T) {
			f := d.fake(t)
			b := newBackend(t, d.typ, f)
			ans, err := b.Chat(context.Background(), chatRequest(t, helloBody), nil)
			if err != nil {
				t.Fatalf("Chat: %v", err)
			}
			if got := ans.Text(); got != fakes.DefaultReply {
				t.Errorf("text = %q, want %q", got, fakes.DefaultReply)
			}
			if len(ans.Choices) != 1 || ans.Choices[0].FinishReason != "stop" || ans.Choices[0].Message.Role != "assistant" {
				t.Errorf("choices = %+v", ans.Choices)
			}
			if !ans.Complete || ans.Streamed {
				t.Errorf("Complete=%v Streamed=%v, want true false", ans.Complete, ans.Streamed)
			}
			if ans.Backend != "up-"+d.typ {
				t.Errorf("Backend = %q", ans.Backend)
			}
			if ans.ID == "" || ans.Model != "fake-model" || ans.Created == 0 {
				t.Errorf("id/model/created = %q %q %d", ans.ID, ans.Model, ans.Created)
			}
			if ans.Usage == nil || *ans.Usage != wantUsage {
				t.Errorf("usage = %+v, want %+v", ans.Usage, wantUsage)
			}
			if !reflect.DeepEqual(ans.Timings, wantTimings[d.typ]) {
				t.Errorf("timings = %+v, want %+v", ans.Timings, wantTimings[d.typ])
			}
			if f.Requests() != 1 {
				t.Errorf("fake saw %d calls", f.Requests())
			}
		})
	}
}

func TestChatStream(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.typ, func(t *testing.T) {
			f := d.fake(t)
			b := newBackend(t, d.typ, f)
			var c collector
			ans, err := b.Chat(context.Background(), chatRequest(t, helloStreamBody), c.sink)
			if err != nil {
				t.Fatalf("Chat: %v", err)
			}
			if len(c.chunks) < 3 {
				t.Fatalf("only %d chunks", len(c.chunks))
			}
			first, last := c.chunks[0], c.chunks[len(c.chunks)-1]
			if len(first.Choices) == 0 || first.Choices[0].Delta.Role != "assistant" {
				t.Errorf("first chunk has no assistant role: %s", mustJSON(t, first))
			}
			for i, ch := range c.chunks {
				if ch.ID != first.ID || ch.ID == "" {
					t.Errorf("chunk %d id %q, first %q", i, ch.ID, first.ID)
				}
				if ch.Object != "chat.completion.chunk" {
					t.Errorf("chunk %d object %q", i, ch.Object)
				}
			}
			if got := c.text(); got != fakes.DefaultReply {
				t.Errorf("streamed text = %q", got)
			}
			if len(last.Choices) != 0 || last.Usage == nil || *last.Usage != wantUsage {
				t.Errorf("last chunk is not the usage chunk: %s", mustJSON(t, last))
			}
			fin := c.chunks[len(c.chunks)-2]
			if len(fin.Choices) != 1 || fin.Choices[0].FinishReason == nil || *fin.Choices[0].FinishReason != "stop" {
				t.Errorf("chunk before usage has no finish reason: %s", mustJSON(t, fin))
			}
			if !ans.Streamed || !ans.Complete || ans.Text() != fakes.DefaultReply || ans.Backend != "up-"+d.typ {
				t.Errorf("answer: streamed=%v complete=%v text=%q backend=%q", ans.Streamed, ans.Complete, ans.Text(), ans.Backend)
			}
			if ans.Usage == nil || *ans.Usage != wantUsage {
				t.Errorf("usage = %+v", ans.Usage)
			}
			if !reflect.DeepEqual(ans.Timings, wantTimings[d.typ]) {
				t.Errorf("timings = %+v, want %+v", ans.Timings, wantTimings[d.typ])
			}
		})
	}
}

// The usage chunk reaches the sink even when the client did not ask for it: the proxy decides.
func TestStreamUsageChunkAlwaysEmitted(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.typ, func(t *testing.T) {
			f := d.fake(t)
			b := newBackend(t, d.typ, f)
			body := `{"model":"fake-model","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":false}}`
			var c collector
			if _, err := b.Chat(context.Background(), chatRequest(t, body), c.sink); err != nil {
				t.Fatal(err)
			}
			last := c.chunks[len(c.chunks)-1]
			if len(last.Choices) != 0 || last.Usage == nil {
				t.Errorf("no usage chunk: %s", mustJSON(t, last))
			}
		})
	}
}

func TestUpstreamErrors(t *testing.T) {
	const key = "sk-secret-key-123"
	cases := []struct {
		name     string
		status   int
		body     string // custom error body; "" for the fake's default
		wantMsg  string
		wantType map[string]string // per dialect; missing means ""
		wantCode string
	}{
		{name: "400", status: 400, wantMsg: fakes.DefaultErrorMessage,
			wantType: map[string]string{"openai": "invalid_request_error", "llamacpp": "invalid_request_error"}},
		{name: "404", status: 404, wantMsg: fakes.DefaultErrorMessage,
			wantType: map[string]string{"openai": "not_found_error", "llamacpp": "not_found_error"}},
		{name: "500", status: 500, wantMsg: fakes.DefaultErrorMessage,
			wantType: map[string]string{"openai": "server_error", "llamacpp": "server_error"}},
		{name: "key in message is redacted", status: 401,
			body:    `{"error":{"message":"Incorrect API key provided: ` + key + `.","type":"invalid_request_error","param":"auth","code":"invalid_api_key"}}`,
			wantMsg: "Incorrect API key provided: [redacted].",
			wantType: map[string]string{"ollama": "invalid_request_error", "openai": "invalid_request_error",
				"llamacpp": "invalid_request_error"},
			wantCode: "invalid_api_key"},
		{name: "plain text body", status: 502, body: "upstream connect error", wantMsg: "upstream connect error"},
		{name: "empty body", status: 503, body: " ", wantMsg: "Service Unavailable"},
	}
	for _, d := range dialects {
		for _, tc := range cases {
			for _, stream := range []bool{false, true} {
				name := d.typ + "/" + tc.name
				if stream {
					name += "/stream"
				}
				t.Run(name, func(t *testing.T) {
					f := d.fake(t, fakes.Config{Status: tc.status, ErrorBody: tc.body})
					b := newBackend(t, d.typ, f, func(o *Options) { o.APIKey = key })
					var sink cascade.Sink
					var c collector
					if stream {
						sink = c.sink
					}
					ans, err := b.Chat(context.Background(), chatRequest(t, helloBody), sink)
					var up *cascade.UpstreamError
					if !errors.As(err, &up) {
						t.Fatalf("err = %v (%T), want *cascade.UpstreamError", err, err)
					}
					if ans != nil {
						t.Errorf("answer beside an upstream error: %+v", ans)
					}
					if up.Status != tc.status || up.Message != tc.wantMsg || up.Backend != "up-"+d.typ {
						t.Errorf("got status %d message %q backend %q, want %d %q", up.Status, up.Message, up.Backend, tc.status, tc.wantMsg)
					}
					if up.Type != tc.wantType[d.typ] {
						t.Errorf("type = %q, want %q", up.Type, tc.wantType[d.typ])
					}
					if tc.wantCode != "" && up.Code != tc.wantCode {
						t.Errorf("code = %q, want %q", up.Code, tc.wantCode)
					}
					if len(c.chunks) != 0 {
						t.Errorf("sink got %d chunks", len(c.chunks))
					}
				})
			}
		}
	}
}

func closedPortURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return "http://" + addr
}

func TestUnreachable(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.typ, func(t *testing.T) {
			b, err := New(Options{Name: "gone", Type: d.typ, URL: closedPortURL(t) + "/v1"})
			if err != nil {
				t.Fatal(err)
			}
			for _, sink := range []cascade.Sink{nil, (&collector{}).sink} {
				_, err := b.Chat(context.Background(), chatRequest(t, helloBody), sink)
				var be *cascade.BackendError
				if !errors.As(err, &be) || be.Backend != "gone" {
					t.Fatalf("err = %v (%T), want *cascade.BackendError", err, err)
				}
				if !errors.Is(err, syscall.ECONNREFUSED) {
					t.Errorf("errors.Is(err, ECONNREFUSED) = false: %v", err)
				}
			}
			if _, err := b.(cascade.ModelLister).Models(context.Background()); err == nil {
				t.Error("Models: no error")
			}
			if err := b.(cascade.Pinger).Ping(context.Background()); err == nil {
				t.Error("Ping: no error")
			}
		})
	}
}

func TestTimeout(t *testing.T) {
	cases := []struct {
		name   string
		cfg    fakes.Config
		stream bool
	}{
		{name: "before headers", cfg: fakes.Config{Block: true}},
		{name: "before headers/stream", cfg: fakes.Config{Block: true}, stream: true},
		{name: "slow reply", cfg: fakes.Config{Delay: 5 * time.Second}},
		{name: "mid-stream", cfg: fakes.Config{BlockAfter: 2}, stream: true},
	}
	for _, d := range dialects {
		for _, tc := range cases {
			t.Run(d.typ+"/"+tc.name, func(t *testing.T) {
				f := d.fake(t, tc.cfg)
				b := newBackend(t, d.typ, f, func(o *Options) { o.Timeout = 100 * time.Millisecond })
				var c collector
				var sink cascade.Sink
				if tc.stream {
					sink = c.sink
				}
				ans, err := b.Chat(context.Background(), chatRequest(t, helloBody), sink)
				var be *cascade.BackendError
				if !errors.As(err, &be) {
					t.Fatalf("err = %v (%T), want *cascade.BackendError", err, err)
				}
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("errors.Is(err, DeadlineExceeded) = false: %v", err)
				}
				var ne net.Error
				if !errors.As(err, &ne) || !ne.Timeout() {
					t.Errorf("no net.Error with Timeout() in the chain: %v", err)
				}
				if ans != nil && ans.Complete {
					t.Error("answer is Complete")
				}
				if !f.WaitCanceled(cancelSeen) {
					t.Error("the fake never saw the call cancelled")
				}
			})
		}
	}
}

func TestTruncated(t *testing.T) {
	cases := []struct {
		name     string
		after    int
		stream   bool
		wantText string
	}{
		{name: "stream after 2 chunks", after: 2, stream: true, wantText: "Hello from the"},
		{name: "stream after all content, before the end", after: 4, stream: true, wantText: fakes.DefaultReply},
		{name: "stream right after the headers", after: -1, stream: true},
		{name: "whole answer cut halfway", after: 1},
	}
	for _, d := range dialects {
		for _, tc := range cases {
			t.Run(d.typ+"/"+tc.name, func(t *testing.T) {
				f := d.fake(t, fakes.Config{TruncateAfter: tc.after})
				b := newBackend(t, d.typ, f)
				var c collector
				var sink cascade.Sink
				if tc.stream {
					sink = c.sink
				}
				ans, err := b.Chat(context.Background(), chatRequest(t, helloBody), sink)
				var be *cascade.BackendError
				if !errors.As(err, &be) {
					t.Fatalf("err = %v (%T), want *cascade.BackendError", err, err)
				}
				if !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Errorf("errors.Is(err, io.ErrUnexpectedEOF) = false: %v", err)
				}
				if !tc.stream {
					if ans != nil {
						t.Errorf("answer beside a cut whole reply: %+v", ans)
					}
					return
				}
				if ans == nil {
					t.Fatal("no partial answer beside the error")
				}
				if ans.Complete {
					t.Error("partial answer is Complete")
				}
				if got := c.text(); got != tc.wantText || ans.Text() != tc.wantText {
					t.Errorf("streamed %q, answer %q, want %q", got, ans.Text(), tc.wantText)
				}
			})
		}
	}
}

func TestSinkErrorStopsStream(t *testing.T) {
	errGone := errors.New("client went away")
	for _, d := range dialects {
		t.Run(d.typ, func(t *testing.T) {
			f := d.fake(t, fakes.Config{Chunks: 200, Reply: strings.Repeat("x", 200), ChunkDelay: 5 * time.Millisecond})
			b := newBackend(t, d.typ, f)
			calls := 0
			sink := func(*cascade.Chunk) error {
				calls++
				if calls == 2 {
					return errGone
				}
				return nil
			}
			ans, err := b.Chat(context.Background(), chatRequest(t, helloBody), sink)
			if !errors.Is(err, errGone) {
				t.Fatalf("err = %v, want the sink's error", err)
			}
			if calls != 2 {
				t.Errorf("sink called %d times, want 2", calls)
			}
			if ans == nil || ans.Complete {
				t.Errorf("want a partial answer, not Complete: %+v", ans)
			}
			if !f.WaitCanceled(cancelSeen) {
				t.Error("the fake never saw the upstream call cancelled")
			}
		})
	}
}

func TestClientCancelReachesUpstream(t *testing.T) {
	cases := []struct {
		name   string
		cfg    fakes.Config
		stream bool
	}{
		{name: "blocked", cfg: fakes.Config{Block: true}},
		{name: "blocked/stream", cfg: fakes.Config{Block: true}, stream: true},
		{name: "mid-stream", cfg: fakes.Config{BlockAfter: 1}, stream: true},
	}
	for _, d := range dialects {
		for _, tc := range cases {
			t.Run(d.typ+"/"+tc.name, func(t *testing.T) {
				f := d.fake(t, tc.cfg)
				b := newBackend(t, d.typ, f)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				go func() {
					for f.Requests() == 0 {
						time.Sleep(time.Millisecond)
					}
					time.Sleep(20 * time.Millisecond)
					cancel()
				}()
				var c collector
				var sink cascade.Sink
				if tc.stream {
					sink = c.sink
				}
				ans, err := b.Chat(ctx, chatRequest(t, helloBody), sink)
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("err = %v, want context.Canceled in the chain", err)
				}
				var be *cascade.BackendError
				if !errors.As(err, &be) {
					t.Errorf("err %T is not a *cascade.BackendError", err)
				}
				if ans != nil && ans.Complete {
					t.Error("answer is Complete")
				}
				if !f.WaitCanceled(cancelSeen) {
					t.Error("the fake never saw the client go away")
				}
			})
		}
	}
}

func TestAPIKey(t *testing.T) {
	for _, d := range dialects {
		for _, key := range []string{"", "sk-test"} {
			t.Run(d.typ+"/key="+key, func(t *testing.T) {
				f := d.fake(t)
				b := newBackend(t, d.typ, f, func(o *Options) { o.APIKey = key })
				if _, err := b.Chat(context.Background(), chatRequest(t, helloBody), nil); err != nil {
					t.Fatal(err)
				}
				got := f.LastRequest().Header.Get("Authorization")
				want := ""
				if key != "" {
					want = "Bearer " + key
				}
				if got != want {
					t.Errorf("Authorization = %q, want %q", got, want)
				}
			})
		}
	}
}

func TestModelsAndPing(t *testing.T) {
	models := []string{"llama3.2:1b", "qwen3:0.6b"}
	for _, d := range dialects {
		t.Run(d.typ, func(t *testing.T) {
			f := d.fake(t, fakes.Config{Models: models})
			b := newBackend(t, d.typ, f)
			got, err := b.(cascade.ModelLister).Models(context.Background())
			if err != nil || !reflect.DeepEqual(got, models) {
				t.Errorf("Models = %v, %v; want %v", got, err, models)
			}
			if err := b.(cascade.Pinger).Ping(context.Background()); err != nil {
				t.Errorf("Ping: %v", err)
			}
		})
	}
}

func TestLlamaCppPing(t *testing.T) {
	cases := []struct {
		name    string
		fake    func(testing.TB, ...fakes.Config) *fakes.Server
		health  int
		wantErr int // UpstreamError status, 0 for none
	}{
		{name: "healthy", fake: fakes.NewLlamaCpp, health: http.StatusOK},
		{name: "loading", fake: fakes.NewLlamaCpp, health: http.StatusServiceUnavailable, wantErr: http.StatusServiceUnavailable},
		{name: "no /health falls back to /models", fake: fakes.NewOpenAI},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.fake(t, fakes.Config{HealthStatus: tc.health})
			b := newBackend(t, "llamacpp", f)
			err := b.(cascade.Pinger).Ping(context.Background())
			var up *cascade.UpstreamError
			switch {
			case tc.wantErr == 0 && err != nil:
				t.Errorf("Ping: %v", err)
			case tc.wantErr != 0 && (!errors.As(err, &up) || up.Status != tc.wantErr):
				t.Errorf("Ping = %v, want status %d", err, tc.wantErr)
			}
		})
	}
}
