package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/cascade/routing"
	"github.com/eoc-proxy/eoc-proxy/proxy/dialect"
)

// plainDialect is a made-up wire format for the edge's shared path: {"model","prompt","stream"}
// in, {"text"} out, named events on a stream, and errors as {"kind","what"}.
type plainDialect struct{ done *atomic.Int32 }

func (d plainDialect) Decode(_ context.Context, _ string, body []byte) (dialect.Exchange, *dialect.Error) {
	var in struct {
		Model  string `json:"model"`
		Prompt string `json:"prompt"`
		Stream bool   `json:"stream"`
	}
	if err := json.Unmarshal(body, &in); err != nil || in.Prompt == "" {
		return nil, &dialect.Error{Status: 400, Type: "invalid_request_error", Param: "prompt", Message: "prompt: required"}
	}
	content, _ := json.Marshal(in.Prompt)
	x := &plainExchange{d: d, prompt: in.Prompt, chat: cascade.ChatRequest{Model: in.Model, Stream: in.Stream,
		Messages: []cascade.Message{{Role: "user", Content: content}}}}
	x.raw, _ = json.Marshal(x.chat)
	return x, nil
}

func (plainDialect) Error(e *dialect.Error) []byte {
	b, _ := json.Marshal(map[string]string{"kind": e.Type, "what": e.Message, "code": e.Code})
	return b
}

type plainExchange struct {
	d      plainDialect
	prompt string
	chat   cascade.ChatRequest
	raw    []byte
}

func (x *plainExchange) Chat() *cascade.ChatRequest { return &x.chat }
func (x *plainExchange) RawChat() []byte            { return x.raw }
func (x *plainExchange) Stream() bool               { return x.chat.Stream }
func (x *plainExchange) Whole(ans *cascade.Answer) ([]byte, error) {
	if x.prompt == "render-panic" {
		panic("a dialect's bug")
	}
	return json.Marshal(map[string]string{"text": ans.Text()})
}
func (x *plainExchange) Encoder() dialect.Encoder { return plainEncoder{} }
func (x *plainExchange) Done(context.Context, *cascade.Answer) error {
	x.d.done.Add(1)
	return nil
}

type plainEncoder struct{}

func (plainEncoder) Chunk(ch *cascade.Chunk, emit dialect.Emit) error {
	for _, c := range ch.Choices {
		if c.Delta.Content != nil {
			if err := emit(dialect.Event{Name: "delta", Data: []byte(*c.Delta.Content)}); err != nil {
				return err
			}
		}
	}
	return nil
}

func (plainEncoder) End(_ *cascade.Answer, fig dialect.Figures, emit dialect.Emit) error {
	b, _ := json.Marshal(fig)
	return emit(dialect.Event{Name: "done", Data: b})
}

func newPlainEdge(t *testing.T, keys ...APIKey) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	return newPlainEdgeRecording(t, nil, keys...)
}

func newPlainEdgeRecording(t *testing.T, record func(Call) error, keys ...APIKey) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	router, err := routing.New([]routing.Route{{Name: "b", Patterns: []string{"known-*"}, Backend: nopBackend{}}}, routing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := cascade.New(router, []cascade.Stage{echoStage{}}, cascade.Options{StageWatts: 10, Logger: zerolog.Nop()})
	done := &atomic.Int32{}
	srv := httptest.NewServer(New(Options{Cascade: c, Logger: zerolog.Nop(), MaxBodyBytes: 256, Keys: keys, Record: record,
		Dialects: map[string]dialect.Dialect{"/v1/plain": plainDialect{done: done}}}))
	t.Cleanup(srv.Close)
	return srv, done
}

func plainPost(t *testing.T, method, url, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// A dialect's whole answer and stream go through the shared path: its body and events, the
// X-EOC headers and trailers, and Done once the answer went out.
func TestDialectAnswers(t *testing.T) {
	srv, done := newPlainEdge(t)
	resp, body := plainPost(t, "POST", srv.URL+"/v1/plain", `{"model":"known-1","prompt":"a"}`, nil) //nolint:bodyclose // plainPost closed it
	if resp.StatusCode != 200 || body != `{"text":"hi"}` {
		t.Fatalf("whole: %d %s", resp.StatusCode, body)
	}
	if resp.Header.Get(HeaderStage) != "echo" || len(resp.Header.Get(HeaderReceipt)) != 64 || resp.Header.Get(HeaderJoules) == "" {
		t.Fatalf("whole: X-EOC headers %v", resp.Header)
	}
	resp, body = plainPost(t, "POST", srv.URL+"/v1/plain", `{"model":"known-1","prompt":"a","stream":true}`, nil) //nolint:bodyclose // plainPost closed it
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %v", resp.StatusCode, resp.Header)
	}
	if !strings.HasPrefix(body, "event: delta\ndata: hi\n\nevent: done\ndata: {") || !strings.HasSuffix(body, "}\n\n") {
		t.Fatalf("stream body %q", body)
	}
	var fig dialect.Figures
	if err := json.Unmarshal([]byte(strings.TrimSuffix(strings.TrimPrefix(body, "event: delta\ndata: hi\n\nevent: done\ndata: "), "\n\n")), &fig); err != nil {
		t.Fatal(err)
	}
	if fig.Stage != "echo" || fig.Receipt != resp.Trailer.Get(HeaderReceipt) || fig.Receipt == "" || fig.State != StateSettled {
		t.Fatalf("final event %+v, trailer receipt %q", fig, resp.Trailer.Get(HeaderReceipt))
	}
	if n := done.Load(); n != 2 {
		t.Fatalf("Done called %d times, want 2", n)
	}
}

// Every refusal on a dialect's route is in its shape, those made before the body is decoded
// (auth, size, method) included; the other routes keep OpenAI's.
func TestDialectErrorsInItsShape(t *testing.T) {
	srv, done := newPlainEdge(t, APIKey{ID: "k", Key: "sk-1", Limits: &Rate{RPM: 1}}, APIKey{ID: "k2", Key: "sk-2"})
	bearer := map[string]string{"Authorization": "Bearer sk-1"}
	tests := []struct {
		name   string
		method string
		body   string
		hdr    map[string]string
		status int
		kind   string
	}{
		{"no key", "POST", `{"model":"known-1","prompt":"a"}`, nil, 401, "invalid_request_error"},
		{"wrong key", "POST", `{"model":"known-1","prompt":"a"}`, map[string]string{"X-Api-Key": "sk-3"}, 401, "invalid_request_error"},
		{"too large", "POST", `{"prompt":"` + strings.Repeat("x", 300) + `"}`, bearer, 413, "invalid_request_error"},
		{"not decoded", "POST", `{"model":"known-1"}`, bearer, 400, "invalid_request_error"},
		{"method", "GET", "", bearer, 405, "invalid_request_error"},
		{"unknown model", "POST", `{"model":"other","prompt":"a"}`, map[string]string{"X-Api-Key": "sk-1"}, 404, "invalid_request_error"},
		{"rate limited", "POST", `{"model":"known-1","prompt":"a"}`, map[string]string{"X-Api-Key": "sk-1"}, 429, "requests"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := plainPost(t, tc.method, srv.URL+"/v1/plain", tc.body, tc.hdr) //nolint:bodyclose // plainPost closed it
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			var e map[string]string
			if err := json.Unmarshal([]byte(body), &e); err != nil || e["kind"] != tc.kind || e["what"] == "" {
				t.Fatalf("body %s is not the dialect's error (kind %q): %v", body, tc.kind, err)
			}
			if tc.status == 429 && resp.Header.Get("Retry-After") == "" {
				t.Fatalf("429 without Retry-After: %v", resp.Header)
			}
		})
	}
	if n := done.Load(); n != 0 {
		t.Fatalf("Done called %d times on refusals", n)
	}
	// The chat route keeps OpenAI's shape, and takes the key as x-api-key too.
	resp, body := plainPost(t, "POST", srv.URL+"/v1/chat/completions", `{}`, nil) //nolint:bodyclose // plainPost closed it
	if resp.StatusCode != 401 || !strings.Contains(body, `"error":{`) {
		t.Fatalf("chat 401: %d %s", resp.StatusCode, body)
	}
	resp, body = plainPost(t, "POST", srv.URL+"/v1/chat/completions", `{"model":"other","messages":[{"role":"user","content":"a"}]}`, //nolint:bodyclose // plainPost closed it
		map[string]string{"X-Api-Key": "sk-2"})
	if resp.StatusCode != 404 || !strings.Contains(body, `"code":"model_not_found"`) {
		t.Fatalf("chat with x-api-key: %d %s", resp.StatusCode, body)
	}
}

// The SSE writer writes each line of an event's data as a "data:" line.
func TestSSEMultilineData(t *testing.T) {
	rec := httptest.NewRecorder()
	sw := newSSEWriter(rec, plainEncoder{}, 0, nil)
	if err := sw.event(dialect.Event{Name: "x", Data: []byte("a\nb")}); err != nil {
		t.Fatal(err)
	}
	if err := sw.flushEvents(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(rec.Body.String()))
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if got := strings.Join(lines, "|"); got != "event: x|data: a|data: b|" {
		t.Fatalf("event lines %q", got)
	}
}

// A dialect that cannot render a whole answer (here it panics) gets a 500 in its own shape, and
// the call is recorded with the status the client got.
func TestDialectRenderFailureIsRecorded(t *testing.T) {
	got := make(chan Call, 1)
	srv, done := newPlainEdgeRecording(t, func(c Call) error { got <- c; return nil })
	resp, body := plainPost(t, "POST", srv.URL+"/v1/plain", `{"model":"known-1","prompt":"render-panic"}`, nil) //nolint:bodyclose // plainPost closed it
	var e map[string]string
	if resp.StatusCode != 500 || json.Unmarshal([]byte(body), &e) != nil || e["kind"] != "server_error" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if c := <-got; c.Status != 500 || c.Stage != "echo" || c.Receipt == "" {
		t.Fatalf("record %+v", c)
	}
	if done.Load() != 0 {
		t.Fatal("Done after a failed render")
	}
}

// A key past its joule budget is refused in the dialect's shape, with the budget headers.
func TestDialectBudgetRefusal(t *testing.T) {
	srv, _ := newPlainEdge(t, APIKey{ID: "k", Key: "sk-1", Budget: &Budget{Joules: 1e-12, Per: "day"}})
	hdr := map[string]string{"X-Api-Key": "sk-1"}
	if resp, body := plainPost(t, "POST", srv.URL+"/v1/plain", `{"model":"known-1","prompt":"a"}`, hdr); resp.StatusCode != 200 { //nolint:bodyclose // plainPost closed it
		t.Fatalf("first call: %d %s", resp.StatusCode, body)
	}
	resp, body := plainPost(t, "POST", srv.URL+"/v1/plain", `{"model":"known-1","prompt":"a"}`, hdr) //nolint:bodyclose // plainPost closed it
	var e map[string]string
	if resp.StatusCode != 429 || json.Unmarshal([]byte(body), &e) != nil || e["kind"] != "insufficient_quota" ||
		resp.Header.Get(HeaderBudgetRemaining) == "" {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, body)
	}
}

// settled waits until the requests srv served so far have ended: what follows a response (the
// call's metrics, /ui, its trace span, its access log line, the cache's learning) is there.
func settled(t *testing.T, srv *httptest.Server) {
	t.Helper()
	s, ok := srv.Config.Handler.(*Server)
	if !ok {
		t.Fatalf("the test server's handler is a %T, not the edge", srv.Config.Handler)
	}
	s.WaitReported()
}

// threeEvents makes three events of every chunk, as a dialect that opens with several does.
type threeEvents struct{}

func (threeEvents) Chunk(_ *cascade.Chunk, emit dialect.Emit) error {
	for _, name := range []string{"a", "b", "c"} {
		if err := emit(dialect.Event{Name: name, Data: []byte("{}")}); err != nil {
			return err
		}
	}
	return nil
}

func (threeEvents) End(*cascade.Answer, dialect.Figures, dialect.Emit) error { return nil }

// countingFlusher counts the flushes a stream makes.
type countingFlusher struct {
	*httptest.ResponseRecorder
	flushes int
}

func (c *countingFlusher) Flush() { c.flushes++; c.ResponseRecorder.Flush() }

// The events a dialect makes of one chunk go out in one flush, all of them.
func TestSSEOneFlushPerChunk(t *testing.T) {
	w := &countingFlusher{ResponseRecorder: httptest.NewRecorder()}
	sw := newSSEWriter(w, threeEvents{}, time.Minute, nil)
	for range 2 {
		if err := sw.Chunk(&cascade.Chunk{}); err != nil {
			t.Fatal(err)
		}
	}
	if w.flushes != 2 || strings.Count(w.Body.String(), "event: ") != 6 {
		t.Fatalf("%d flushes for 2 chunks, body %q", w.flushes, w.Body.String())
	}
}
