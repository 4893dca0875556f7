package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/backends"
	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/cascade/neural"
	"github.com/eoc-proxy/eoc-proxy/cascade/routing"
)

// A panic in a stage is a 500 in OpenAI's shape, and the call is still settled: it has a ledger
// record, and a budgeted key whose first call it was is not blocked afterwards.
func TestPanicSettlesAndRecords(t *testing.T) {
	router, err := routing.New([]routing.Route{{Name: "b", Patterns: []string{"known-*"}, Backend: nopBackend{}}}, routing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := cascade.New(router, []cascade.Stage{echoStage{}}, cascade.Options{StageWatts: 10, Logger: zerolog.Nop()})
	var mu sync.Mutex
	var calls []Call
	srv := httptest.NewServer(New(Options{Cascade: c, Logger: zerolog.Nop(), MaxBodyBytes: 1 << 20,
		Keys:   []APIKey{{ID: "team", Key: "sk-team", Budget: &Budget{Joules: 1000, Per: "day"}}},
		Record: func(c Call) error { mu.Lock(); defer mu.Unlock(); calls = append(calls, c); return nil }}))
	t.Cleanup(srv.Close)
	post := func(prompt string) (int, http.Header) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		body := `{"model":"known-1","messages":[{"role":"user","content":"` + prompt + `"}]}`
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk-team")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v (a blocked key times out here)", prompt, err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode, resp.Header
	}
	if status, h := post("panic"); status != http.StatusInternalServerError || h.Get("Content-Type") != "application/json" ||
		h.Get(HeaderReceipt) == "" {
		t.Fatalf("panic: status %d, headers %v", status, h)
	}
	mu.Lock()
	n := len(calls)
	if n != 1 || calls[0].Status != http.StatusInternalServerError || calls[0].KeyID != "team" {
		t.Fatalf("records after the panic: %+v", calls)
	}
	mu.Unlock()
	for i := range 3 {
		if status, _ := post("hello"); status != http.StatusOK {
			t.Fatalf("call %d after the panic: status %d", i, status)
		}
	}
}

// failingStage streams one chunk, then fails with err: an upstream's failure mid-stream, or a
// write to a client that left.
type failingStage struct{ err error }

func (failingStage) Name() string { return "neural" }
func (f failingStage) Serve(_ context.Context, _ *cascade.Request, sink cascade.Sink) (*cascade.Answer, error) {
	t := "partial"
	if err := sink(&cascade.Chunk{ID: "x", Model: "known-1", Choices: []cascade.ChunkChoice{{Delta: cascade.Delta{Content: &t}}}}); err != nil {
		return nil, err
	}
	return nil, f.err
}

// An upstream failing mid-stream is recorded as the upstream's failure (502), not as a client
// that went away.
func TestMidStreamUpstreamFailureIsNotADisconnect(t *testing.T) {
	if call := streamRecord(t, failingStage{&cascade.BackendError{Backend: "b", Err: io.ErrUnexpectedEOF}}); call.Disconnected || call.Status != http.StatusBadGateway {
		t.Fatalf("record: disconnected %v, status %d; want an upstream failure (502)", call.Disconnected, call.Status)
	}
}

// streamRecord streams one chat call through a proxy whose only stage is stage, reads the answer
// to its end, and returns the call's ledger record.
func streamRecord(t *testing.T, stage cascade.Stage) Call {
	t.Helper()
	router, err := routing.New([]routing.Route{{Name: "b", Patterns: []string{"known-*"}, Backend: nopBackend{}}}, routing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := cascade.New(router, []cascade.Stage{stage}, cascade.Options{StageWatts: 10, Logger: zerolog.Nop()})
	got := make(chan Call, 1)
	srv := httptest.NewServer(New(Options{Cascade: c, Logger: zerolog.Nop(), MaxBodyBytes: 1 << 20,
		Record: func(c Call) error { got <- c; return nil }}))
	t.Cleanup(srv.Close)
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"known-1","stream":true,"messages":[{"role":"user","content":"a"}]}`))
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	select {
	case call := <-got:
		return call
	case <-time.After(30 * time.Second): // bounds a hang only; generous for a loaded machine
		t.Fatal("no record")
	}
	return Call{}
}

func TestDisconnected(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		wrote bool
		want  bool
	}{
		{"none", nil, true, false},
		{"cancelled", context.Canceled, false, true},
		{"write failed after bytes", errors.New("write: broken pipe"), true, true},
		{"backend mid-stream", &cascade.BackendError{Backend: "b", Err: io.ErrUnexpectedEOF}, true, false},
		{"upstream error mid-stream", &cascade.UpstreamError{Backend: "b", Status: 500}, true, false},
		{"timeout", context.DeadlineExceeded, true, false},
		{"backend cut by the client", &cascade.BackendError{Backend: "b", Err: context.Canceled}, true, true},
	} {
		if got := disconnected(tc.err, tc.wrote); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// rawPost sends a request's head on a raw connection, then trickle (if any) one byte at a time
// every gap, and returns the status line and body of what comes back within 3s.
func rawPost(t *testing.T, srv *httptest.Server, contentLength string, trickle string, gap time.Duration) (string, string) {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	head := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " + contentLength + "\r\n\r\n"
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	go func() {
		for i := range len(trickle) {
			time.Sleep(gap)
			if _, err := conn.Write([]byte{trickle[i]}); err != nil {
				return
			}
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.Status, string(b)
}

// A client that trickles its body is cut after BodyTimeout with a 408 in OpenAI's shape, and a
// declared Content-Length beyond the limit gets 413 before any of the body is read.
func TestBodyReadIsBounded(t *testing.T) {
	router, err := routing.New([]routing.Route{{Name: "b", Patterns: []string{"known-*"}, Backend: nopBackend{}}}, routing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := cascade.New(router, []cascade.Stage{echoStage{}}, cascade.Options{StageWatts: 10, Logger: zerolog.Nop()})
	srv := httptest.NewServer(New(Options{Cascade: c, Logger: zerolog.Nop(), MaxBodyBytes: 1 << 20, BodyTimeout: 200 * time.Millisecond}))
	t.Cleanup(srv.Close)

	start := time.Now()
	status, body := rawPost(t, srv, "10737418240", "", 0)
	if !strings.HasPrefix(status, "413") || !strings.Contains(body, "request_too_large") || time.Since(start) > time.Second {
		t.Fatalf("declared 10 GB: %s %s after %v", status, body, time.Since(start))
	}

	start = time.Now()
	status, body = rawPost(t, srv, "100", strings.Repeat("x", 100), 50*time.Millisecond)
	if !strings.HasPrefix(status, "408") || !strings.Contains(body, "request_timeout") || time.Since(start) > 2*time.Second {
		t.Fatalf("trickled body: %s %s after %v", status, body, time.Since(start))
	}

	// A body that arrives in time still works, and the deadline does not outlive it.
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"known-1","messages":[{"role":"user","content":"a"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// Values OpenAI refuses are refused here too, with a 400 naming the field.
func TestValidateRefusesNullsAndNonStrings(t *testing.T) {
	srv := newEdge(t, 1<<20)
	for _, tc := range []struct{ name, body, param string }{
		{"null user content", `{"model":"known-1","messages":[{"role":"user","content":null}]}`, "messages[0].content"},
		{"null system content", `{"model":"known-1","messages":[{"role":"system","content":null},{"role":"user","content":"a"}]}`, "messages[0].content"},
		{"stop number", `{"model":"known-1","messages":[{"role":"user","content":"a"}],"stop":[1]}`, "stop"},
		{"stop with null", `{"model":"known-1","messages":[{"role":"user","content":"a"}],"stop":["a",null]}`, "stop"},
		{"stop object", `{"model":"known-1","messages":[{"role":"user","content":"a"}],"stop":{"a":1}}`, "stop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			var e struct {
				Error struct {
					Param *string `json:"param"`
				} `json:"error"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&e)
			if resp.StatusCode != http.StatusBadRequest || e.Error.Param == nil || *e.Error.Param != tc.param {
				t.Fatalf("status %d, param %v; want 400 naming %s", resp.StatusCode, e.Error.Param, tc.param)
			}
		})
	}
	for _, body := range []string{
		`{"model":"known-1","messages":[{"role":"user","content":"a"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"r"}]}`,
		`{"model":"known-1","messages":[{"role":"user","content":"a"}],"stop":["a","b"]}`,
		`{"model":"known-1","messages":[{"role":"user","content":"a"}],"stop":"a"}`,
		`{"model":"known-1","messages":[{"role":"user","content":"a"}],"stop":null}`,
	} {
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: status %d", body, resp.StatusCode)
		}
	}
}

// upstreamEdge is an edge whose neural stage calls one OpenAI backend, "up", served by h.
func upstreamEdge(t *testing.T, h http.HandlerFunc, o Options) *httptest.Server {
	t.Helper()
	up := httptest.NewServer(h)
	t.Cleanup(up.Close)
	be, err := backends.New(backends.Options{Name: "up", Type: "openai", URL: up.URL, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	router, err := routing.New([]routing.Route{{Name: "up", Type: "openai", Patterns: []string{"*"}, Backend: be}}, routing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	o.Cascade = cascade.New(router, []cascade.Stage{neural.New(router, nil)}, cascade.Options{StageWatts: 10, Logger: zerolog.Nop()})
	o.Logger = zerolog.Nop()
	srv := httptest.NewServer(New(o))
	t.Cleanup(srv.Close)
	return srv
}

func upstreamStatus(status int, retryAfter string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `{"error":{"message":"upstream says no","type":"invalid_request_error","code":"x"}}`)
	}
}

func postChat(t *testing.T, url string, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"a"}]}`))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req) // a call stuck for good fails, not hangs
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// An upstream 429 reaches the client with its Retry-After.
func TestUpstreamRetryAfterPassesThrough(t *testing.T) {
	srv := upstreamEdge(t, upstreamStatus(http.StatusTooManyRequests, "30"), Options{})
	status, h, body := postChat(t, srv.URL, nil)
	if status != http.StatusTooManyRequests || h.Get("Retry-After") != "30" {
		t.Fatalf("status %d, Retry-After %q: %s", status, h.Get("Retry-After"), body)
	}
}

// An upstream refusing the proxy's credentials is a 502 naming the backend, not a 401 that
// reads as the client's key being wrong.
func TestUpstreamAuthFailureIsBadGateway(t *testing.T) {
	for _, st := range []int{http.StatusUnauthorized, http.StatusForbidden} {
		srv := upstreamEdge(t, upstreamStatus(st, ""), Options{})
		status, _, body := postChat(t, srv.URL, nil)
		if status != http.StatusBadGateway || !strings.Contains(body, `backend \"up\"`) || !strings.Contains(body, "upstream_auth_failed") {
			t.Fatalf("upstream %d: status %d: %s", st, status, body)
		}
	}
}

// The Bearer scheme is case-insensitive; /metrics takes a key only when configured to.
func TestAuthSchemeAndMetrics(t *testing.T) {
	keys := []APIKey{{ID: "a", Key: "sk-a"}}
	ok := func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}
	srv := upstreamEdge(t, ok, Options{Keys: keys, Registry: prometheus.NewRegistry()})
	for _, auth := range []string{"Bearer sk-a", "bearer sk-a", "BEARER  sk-a"} {
		if status, _, body := postChat(t, srv.URL, map[string]string{"Authorization": auth}); status != http.StatusOK {
			t.Errorf("%q: status %d: %s", auth, status, body)
		}
	}
	for _, auth := range []string{"Basic sk-a", "Bearersk-a", "sk-a"} {
		if status, _, _ := postChat(t, srv.URL, map[string]string{"Authorization": auth}); status != http.StatusUnauthorized {
			t.Errorf("%q: status %d, want 401", auth, status)
		}
	}
	metrics := func(srv *httptest.Server, auth string) int {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/metrics", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if st := metrics(srv, ""); st != http.StatusOK {
		t.Errorf("open /metrics: %d", st)
	}
	locked := upstreamEdge(t, ok, Options{Keys: keys, Registry: prometheus.NewRegistry(), MetricsNeedKey: true})
	if st := metrics(locked, ""); st != http.StatusUnauthorized {
		t.Errorf("/metrics without a key: %d, want 401", st)
	}
	if st := metrics(locked, "bearer sk-a"); st != http.StatusOK {
		t.Errorf("/metrics with a key: %d", st)
	}
}

// An upstream stream chunk with a negative or huge choice index fails the call as the
// upstream's (502 in OpenAI's shape, recorded), not as a panic (500).
func TestHostileStreamIndexIsBadGateway(t *testing.T) {
	for name, idx := range map[string]string{"negative": "-1", "huge": "50000000"} {
		t.Run(name, func(t *testing.T) {
			got := make(chan Call, 1)
			srv := upstreamEdge(t, func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":`+idx+`,"delta":{"content":"x"}}]}`+"\n\ndata: [DONE]\n\n")
			}, Options{Record: func(c Call) error { got <- c; return nil }})
			resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json",
				strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"a"}]}`))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), `"upstream_error"`) {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if c := <-got; c.Status != http.StatusBadGateway || c.Disconnected {
				t.Fatalf("record %+v", c)
			}
		})
	}
}

// gateStage streams one chunk, then finishes once its gate opens or the call is cancelled: a
// long stream, past the request timeout (which stops at a stream's first byte).
type gateStage struct{ gate chan struct{} }

func (gateStage) Name() string { return "gate" }
func (g gateStage) Serve(ctx context.Context, req *cascade.Request, sink cascade.Sink) (*cascade.Answer, error) {
	if sink != nil {
		t := "h"
		if err := sink(&cascade.Chunk{ID: "x", Model: req.Chat.Model, Choices: []cascade.ChunkChoice{{Delta: cascade.Delta{Content: &t}}}}); err != nil {
			return nil, err
		}
	}
	select {
	case <-g.gate:
	case <-ctx.Done():
	}
	return echoStage{}.Serve(ctx, req, nil)
}

// A call waiting in admission for its key's first call to be priced waits no longer than the
// request timeout.
func TestAdmissionWaitIsBoundedByTheRequestTimeout(t *testing.T) {
	router, err := routing.New([]routing.Route{{Name: "b", Patterns: []string{"*"}, Backend: nopBackend{}}}, routing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	g := gateStage{gate: make(chan struct{})}
	c := cascade.New(router, []cascade.Stage{g}, cascade.Options{StageWatts: 10, Logger: zerolog.Nop()})
	srv := httptest.NewServer(New(Options{Cascade: c, Logger: zerolog.Nop(), MaxBodyBytes: 1 << 20, RequestTimeout: 300 * time.Millisecond,
		Keys: []APIKey{{ID: "team", Key: "sk-team", Budget: &Budget{Joules: 1000, Per: "day"}}}}))
	t.Cleanup(srv.Close)
	var open sync.Once
	release := func() { open.Do(func() { close(g.gate) }) }
	t.Cleanup(release) // runs before srv.Close, which waits for the stream
	first := make(chan int, 1)
	// inCascade is closed once the first call's headers came: the gate stage streamed its
	// first chunk, so the call is in the cascade (a fixed sleep may not be on a loaded machine).
	inCascade := make(chan struct{})
	hdr := map[string]string{"Authorization": "Bearer sk-team"}
	go func() {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions",
			strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"a"}]}`))
		req.Header.Set("Authorization", "Bearer sk-team")
		resp, err := http.DefaultClient.Do(req)
		close(inCascade)
		if err != nil {
			first <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		first <- resp.StatusCode
	}()
	<-inCascade
	start := time.Now()
	status, _, body := postChat(t, srv.URL, hdr)
	if status != http.StatusServiceUnavailable || !strings.Contains(body, "budget_wait_timeout") || time.Since(start) > 2*time.Second {
		t.Fatalf("second call: status %d after %v: %s", status, time.Since(start), body)
	}
	release()
	if st := <-first; st != http.StatusOK {
		t.Fatalf("first call: %d", st)
	}
}

// A client that left mid-stream is a 499 in its record (settle gives the metrics the same status),
// whether the proxy saw it as a cancelled context or as a failed write (the Node SDK's abort, seen in CI as a 500).
func TestMidStreamBrokenPipeIsAClientThatLeft(t *testing.T) {
	// A write to a client that left fails with a broken pipe before the request's context is cancelled.
	if call := streamRecord(t, failingStage{fmt.Errorf("write tcp 127.0.0.1:1->127.0.0.1:2: %w", syscall.EPIPE)}); !call.Disconnected || call.Status != StatusClientClosed {
		t.Fatalf("record: disconnected %v, status %d; want a client that left (499)", call.Disconnected, call.Status)
	}
}

// An upstream that resets the connection after taking the request means one thing to the client
// and to the ledger: the backend failed (502 "failed", not "unreachable"), and the attempt's
// outcome is "error".
func TestUpstreamResetAgrees(t *testing.T) {
	reset := func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // close with RST
		}
		_ = conn.Close()
	}
	got := make(chan Call, 1)
	srv := upstreamEdge(t, reset, Options{Record: func(c Call) error { got <- c; return nil }})
	status, _, body := postChat(t, srv.URL, nil)
	if status != http.StatusBadGateway || !strings.Contains(body, `backend \"up\" failed`) {
		t.Fatalf("status %d: %s", status, body)
	}
	c := <-got
	if len(c.Attempts) != 1 || c.Attempts[0].Outcome != "error" || c.Status != http.StatusBadGateway {
		t.Fatalf("record: status %d, attempts %+v", c.Status, c.Attempts)
	}
}

// slowStage answers after wait, unless the call's context ends first.
type slowStage struct{ wait time.Duration }

func (slowStage) Name() string { return "slow" }
func (s slowStage) Serve(ctx context.Context, req *cascade.Request, sink cascade.Sink) (*cascade.Answer, error) {
	select {
	case <-time.After(s.wait):
		return echoStage{}.Serve(ctx, req, sink)
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// The body's read deadline ends with the body: an answer that takes longer than BodyTimeout is
// not cut by it (on HTTP/1 the connection's watch for a client that leaves reads on after the
// body, under whatever deadline is left), whether the body's length was declared or chunked.
func TestBodyDeadlineEndsWithTheBody(t *testing.T) {
	router, err := routing.New([]routing.Route{{Name: "b", Patterns: []string{"known-*"}, Backend: nopBackend{}}}, routing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const bodyTimeout = 100 * time.Millisecond
	c := cascade.New(router, []cascade.Stage{slowStage{wait: 4 * bodyTimeout}}, cascade.Options{StageWatts: 10, Logger: zerolog.Nop()})
	srv := httptest.NewServer(New(Options{Cascade: c, Logger: zerolog.Nop(), BodyTimeout: bodyTimeout}))
	t.Cleanup(srv.Close)
	const body = `{"model":"known-1","messages":[{"role":"user","content":"a"}]}`
	for name, in := range map[string]io.Reader{
		"content-length": strings.NewReader(body),
		"chunked":        io.MultiReader(strings.NewReader(body)), // no length: sent chunked
	} {
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", in)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get(HeaderStage) != "slow" {
			t.Errorf("%s: status %d, stage %q: %s", name, resp.StatusCode, resp.Header.Get(HeaderStage), b)
		}
	}
}
