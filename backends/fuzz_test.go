package backends

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

// cannedTransport answers every request with one status, content type and body, without a
// network, so a fuzzer can drive a backend's response parsing at full speed.
type cannedTransport struct {
	status int
	ctype  string
	body   []byte
	calls  *atomic.Int64 // round trips made
}

func (c cannedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.calls.Add(1)
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	h := http.Header{}
	if c.ctype != "" {
		h.Set("Content-Type", c.ctype)
	}
	return &http.Response{StatusCode: c.status, Status: http.StatusText(c.status), Header: h,
		Body: io.NopCloser(bytes.NewReader(c.body)), ContentLength: -1, Request: r, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}, nil
}

func cannedBackend(t *testing.T, typ string, tr cannedTransport) cascade.Backend {
	b, err := New(Options{Name: "fz", Type: typ, URL: "http://upstream.invalid/v1", Timeout: time.Second, Client: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// callCanned sends one call, streaming or whole, to a backend whose upstream replies with tr,
// and checks what every reply must give: an answer or an error, never a panic or a hang; an
// error in the cascade's shapes; a whole answer with its usage.
func callCanned(t *testing.T, typ string, tr cannedTransport, stream bool) {
	t.Helper()
	tr.calls = new(atomic.Int64)
	b := cannedBackend(t, typ, tr)
	body := `{"model":"m","messages":[{"role":"user","content":"a"}]}`
	if typ == "openai" { // two choices, so choice indexes are checked against n; Ollama refuses n > 1
		body = `{"model":"m","messages":[{"role":"user","content":"a"}],"n":2}`
	}
	var c cascade.ChatRequest
	if err := json.Unmarshal([]byte(body), &c); err != nil {
		t.Fatal(err)
	}
	req := &cascade.Request{Chat: c, Raw: json.RawMessage(body)}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var sink cascade.Sink
	if stream {
		sink = func(*cascade.Chunk) error { return nil }
	}
	ans, err := b.Chat(ctx, req, sink)
	if ctx.Err() != nil {
		t.Fatalf("the call hung on %q", tr.body)
	}
	if tr.calls.Load() == 0 {
		t.Fatalf("the call never reached the upstream: %v", err)
	}
	if err != nil {
		var be *cascade.BackendError
		var ue *cascade.UpstreamError
		if !errors.As(err, &be) && !errors.As(err, &ue) {
			t.Fatalf("error %T %v is neither a BackendError nor an UpstreamError", err, err)
		}
		// An upstream's HTTP error status is the client's to see: an UpstreamError with it.
		if (tr.status < 200 || tr.status > 299) && (ue == nil || ue.Status != tr.status) {
			t.Fatalf("status %d gave %T %v, want an UpstreamError with that status", tr.status, err, err)
		}
		return
	}
	if tr.status >= 300 {
		t.Fatalf("status %d gave an answer", tr.status)
	}
	if ans == nil {
		t.Fatal("no answer and no error")
	}
	if _, err := json.Marshal(ans); err != nil {
		t.Fatalf("the answer does not encode: %v", err)
	}
}

// FuzzOpenAIResponse: any reply body to an OpenAI-dialect call, streamed (SSE chunks) or whole,
// gives an answer or an error, never a panic or a hang.
func FuzzOpenAIResponse(f *testing.F) {
	for _, s := range []string{
		`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"hi"}}]}` + "\n\n" +
			`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}` + "\n\ndata: [DONE]\n\n",
		`data: {"choices":[{"index":1,"delta":{"tool_calls":[{"index":0,"id":"t","type":"function","function":{"name":"f","arguments":"{"}}]}}]}` + "\n\ndata: [DONE]\n\n",
		`data: {"choices":[{"index":-1,"delta":{"content":"x"}}]}` + "\n\n",
		`data: {"choices":[{"index":1000000,"delta":{"content":"x"}}]}` + "\n\n",
		"event: error\ndata: {\"error\":{\"message\":\"boom\"}}\n\n",
		"data: {\"id\":",
		`{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`,
		`{"choices":null}`, `null`, `[]`, `{"timings":{"prompt_n":1}}`,
	} {
		f.Add([]byte(s), true, false)
		f.Add([]byte(s), false, false)
		f.Add([]byte(s), true, true)
	}
	f.Fuzz(func(t *testing.T, body []byte, stream, jsonType bool) {
		ct := "text/event-stream"
		if jsonType || !stream {
			ct = "application/json"
		}
		callCanned(t, "openai", cannedTransport{status: http.StatusOK, ctype: ct, body: body}, stream)
	})
}

// FuzzOllamaResponse: any NDJSON reply to an Ollama call, streamed or whole, converts to an
// OpenAI answer or fails as an error, never a panic or a hang.
func FuzzOllamaResponse(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","created_at":"2024-01-01T00:00:00Z","message":{"role":"assistant","content":"hi"},"done":false}` + "\n" +
			`{"model":"m","created_at":"2024-01-01T00:00:00Z","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_count":1,"eval_count":1}` + "\n",
		`{"message":{"role":"assistant","tool_calls":[{"function":{"index":5,"name":"f","arguments":{"a":1}}}]},"done":true}` + "\n",
		`{"message":{"role":"assistant","tool_calls":[{"function":{"index":-5,"name":"f","arguments":{}}}]},"done":true}` + "\n",
		`{"error":"model not found"}` + "\n",
		`{"message":{"content":"x","thinking":"y"},"logprobs":[{"token":"x","logprob":-1,"top_logprobs":[{"token":"x","logprob":-1}]}],"done":false}` + "\n",
		`{"done":true,"done_reason":"length"}`, `{"done":`, "\n\n\n", `null`,
	} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, body []byte, stream bool) {
		callCanned(t, "ollama", cannedTransport{status: http.StatusOK, ctype: "application/x-ndjson", body: body}, stream)
	})
}

// FuzzUpstreamError: any error reply (status 300-599, any body) from either dialect is an error
// in the cascade's shapes, never an answer or a panic.
func FuzzUpstreamError(f *testing.F) {
	for _, s := range []string{
		`{"error":{"message":"bad","type":"invalid_request_error","param":"x","code":"c"}}`,
		`{"error":"model \"x\" not found"}`, `{"error":null}`, `{"error":{"message":5}}`, `<html>502</html>`, ``,
		strings.Repeat("e", 5000),
	} {
		f.Add([]byte(s), uint16(400), false)
		f.Add([]byte(s), uint16(503), true)
		f.Add([]byte(s), uint16(429), false)
	}
	f.Fuzz(func(t *testing.T, body []byte, status uint16, ollama bool) {
		st := 300 + int(status)%300
		typ := "openai"
		if ollama {
			typ = "ollama"
		}
		for _, stream := range []bool{false, true} {
			callCanned(t, typ, cannedTransport{status: st, ctype: "application/json", body: body}, stream)
		}
	})
}

// FuzzToOllama: any request the proxy's decoder would hand a backend either maps to an Ollama
// request that encodes, or is refused as an invalid request; it never panics.
func FuzzToOllama(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}]}]}`,
		`{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c","content":"r"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":"none"}`,
		`{"model":"m","messages":[{"role":"user","content":"a"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object"}}},"think":"high","top_logprobs":3,"logprobs":true,"stop":["x"],"seed":1,"temperature":0.5,"max_tokens":5}`,
		`{"model":"m","messages":[{"role":"user","content":"a"}],"response_format":{"type":"json_schema","json_schema":{"schema":7}},"think":"maybe","top_logprobs":-1}`,
		`{"model":"m","messages":[{"role":"tool","tool_call_id":"zz","content":[{"type":"text","text":"x"}]}]}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		var c cascade.ChatRequest
		if json.Unmarshal([]byte(body), &c) != nil {
			return
		}
		req := &cascade.Request{Chat: c, Raw: json.RawMessage(body)}
		out, err := toOllama(req)
		if err != nil {
			var ir *invalidRequest
			if !errors.As(err, &ir) {
				t.Fatalf("error %T %v is not an invalid request", err, err)
			}
			return
		}
		if _, err := json.Marshal(out); err != nil {
			t.Fatalf("the Ollama request does not encode: %v", err)
		}
	})
}
