package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// An upstream answer with choices[0].index -1 gets the same verdict whole and streamed: a 502,
// and nothing cached, so the same request goes upstream again.
func TestMalformedAnswerSameVerdictWholeOrStreamed(t *testing.T) {
	var calls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/chat/completions") {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"fake-m","object":"model"}]}`)
			return
		}
		calls.Add(1)
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"fake-m","choices":[{"index":-1,"delta":{"content":"x"},"finish_reason":"stop"}]}`+"\n\ndata: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","created":1,"model":"fake-m","choices":[{"index":-1,"message":{"role":"assistant","content":"x"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}))
	t.Cleanup(up.Close)
	s := startStack(t, oneBackend("openai", up.URL+"/v1", "cascade: {stages: [cache, kv, neural]}"))
	for _, stream := range []string{"false", "true"} {
		t.Run("stream="+stream, func(t *testing.T) {
			body := `{"model":"fake-m","stream":` + stream + `,"messages":[{"role":"user","content":"index minus one"}]}`
			for i := range 2 {
				before := calls.Load()
				resp, err := http.Post(s.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusBadGateway {
					t.Fatalf("call %d: status %d, want 502", i+1, resp.StatusCode)
				}
				if calls.Load() != before+1 {
					t.Fatalf("call %d did not reach the upstream: the malformed answer was cached", i+1)
				}
			}
		})
	}
}
