//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/backends"
	"github.com/eoc-proxy/eoc-proxy/cascade"
)

// The fake upstream speaks both dialects well enough for eoc-proxy's own backends, and each
// fault fails a call the way the matrix expects of it.
func TestUpstreamDialects(t *testing.T) {
	u := newUpstream()
	srv := httptest.NewServer(u.handler())
	t.Cleanup(srv.Close)
	for _, typ := range []string{"ollama", "openai"} {
		url := srv.URL
		if typ == "openai" {
			url += "/v1"
		}
		b, err := backends.New(backends.Options{Name: typ, Type: typ, URL: url, Timeout: 300 * time.Millisecond, MaxDuration: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		call := func(prompt string, stream bool) (*cascade.Answer, error) {
			body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":%q}]}`, prompt)
			var c cascade.ChatRequest
			if err := json.Unmarshal([]byte(body), &c); err != nil {
				t.Fatal(err)
			}
			var sink cascade.Sink
			if stream {
				sink = func(*cascade.Chunk) error { return nil }
			}
			return b.Chat(context.Background(), &cascade.Request{Chat: c, Raw: json.RawMessage(body)}, sink)
		}
		for _, stream := range []bool{false, true} {
			ans, err := call("hello", stream)
			if err != nil || !ans.Complete || ans.Choices[0].Message.Content == nil {
				t.Fatalf("%s stream %v: %+v, %v", typ, stream, ans, err)
			}
			for _, f := range faultNames {
				p := fmt.Sprintf("%s %s %v", f, typ, stream)
				u.mu.Lock()
				u.faults[p] = f
				u.mu.Unlock()
				ans, err := call(p, stream)
				var be *cascade.BackendError
				var ue *cascade.UpstreamError
				if err == nil || !errors.As(err, &be) && !errors.As(err, &ue) {
					t.Errorf("%s stream %v fault %s: %+v, %v", typ, stream, f, ans, err)
				}
			}
		}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if n := u.counts["hello"]; n != 4 {
		t.Errorf("hello counted %d times, want 4", n)
	}
}
