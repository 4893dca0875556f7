package backends

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/internal/testenv/fakes"
)

// dialects pairs each backend type with its fake.
var dialects = []struct {
	typ  string
	fake func(testing.TB, ...fakes.Config) *fakes.Server
}{
	{"ollama", fakes.NewOllama},
	{"openai", fakes.NewOpenAI},
	{"llamacpp", fakes.NewLlamaCpp},
}

// cancelSeen bounds the wait for a fake to see a call go away. The wait ends on the fake's
// event (WaitCanceled returns as soon as its handler sees the connection close); the bound only
// turns a hang into a failure, so it is generous: under -race on a loaded 2-core machine the
// server's goroutines can wait seconds for a core.
const cancelSeen = 30 * time.Second

// newBackend builds a backend of typ in front of f.
func newBackend(t testing.TB, typ string, f *fakes.Server, mod ...func(*Options)) cascade.Backend {
	t.Helper()
	o := Options{Name: "up-" + typ, Type: typ, URL: f.BaseURL(), Timeout: 10 * time.Second}
	for _, m := range mod {
		m(&o)
	}
	b, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if c, ok := b.(interface{ CloseIdleConnections() }); ok {
			c.CloseIdleConnections()
		}
	})
	return b
}

// chatRequest builds a Request the way the proxy does: the parsed view and the raw body.
func chatRequest(t testing.TB, body string) *cascade.Request {
	t.Helper()
	var c cascade.ChatRequest
	if err := json.Unmarshal([]byte(body), &c); err != nil {
		t.Fatalf("bad test request %s: %v", body, err)
	}
	return &cascade.Request{Chat: c, Raw: json.RawMessage(body)}
}

const helloBody = `{"model":"fake-model","messages":[{"role":"user","content":"Say hello."}]}`
const helloStreamBody = `{"model":"fake-model","messages":[{"role":"user","content":"Say hello."}],"stream":true}`

// collector is a sink that keeps every chunk.
type collector struct {
	mu     sync.Mutex
	chunks []*cascade.Chunk
}

func (c *collector) sink(ch *cascade.Chunk) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.chunks = append(c.chunks, ch)
	return nil
}

func (c *collector) text() string {
	var b strings.Builder
	for _, ch := range c.chunks {
		for _, cc := range ch.Choices {
			if cc.Delta.Content != nil {
				b.WriteString(*cc.Delta.Content)
			}
		}
	}
	return b.String()
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// jsonEqual reports whether two JSON texts hold the same value.
func jsonEqual(t testing.TB, a, b string) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal([]byte(a), &x); err != nil {
		t.Fatalf("not JSON: %s: %v", a, err)
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		t.Fatalf("not JSON: %s: %v", b, err)
	}
	return mustJSON(t, x) == mustJSON(t, y)
}
