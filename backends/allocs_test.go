package backends

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"
)

// TestOllamaAllocs holds the allocations of a whole Ollama call's own parts: the request mapped
// and encoded, the call's bounds, its HTTP request, and the reply read, decoded and converted.
func TestOllamaAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	o, err := NewOllama(Options{Name: "o", URL: "http://127.0.0.1:1", Timeout: 10 * time.Second, MaxDuration: 30 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	req := chatRequest(t, benchBody)
	ctx := context.Background()
	rd := bytes.NewReader(nil)
	resp := &http.Response{Body: io.NopCloser(rd), ContentLength: int64(len(benchOllamaAnswer))}
	conv := &ollamaConv{backend: o.name, id: "chatcmpl-x", model: "m"}
	body := []byte(benchBody)
	_, c := o.attempt(ctx)
	defer c.stop()
	for _, tc := range []struct {
		name string
		max  float64
		run  func()
	}{
		{"encode", 5, func() {
			oreq, err := toOllama(req)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := json.Marshal(oreq); err != nil {
				t.Fatal(err)
			}
		}},
		{"bounds", 5, func() {
			_, c := o.attempt(ctx)
			c.stop()
		}},
		{"request", 3, func() { // the copy of the template, the body's NopCloser, GetBody
			if req := o.request(ctx, c, &o.chat, body, false); req.ContentLength != int64(len(body)) {
				t.Fatal(req.ContentLength)
			}
		}},
		{"answer", 2, func() {
			rd.Reset([]byte(benchOllamaAnswer))
			if ans, err := o.whole(ctx, resp, conv); err != nil || !ans.Complete {
				t.Fatal(err)
			}
		}},
	} {
		if n := testing.AllocsPerRun(100, tc.run); n > tc.max {
			t.Errorf("%s: %v allocations, want at most %v", tc.name, n, tc.max)
		}
	}
}
