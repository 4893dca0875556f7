package neural

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/backends"
	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/cascade/routing"
	"github.com/eoc-proxy/eoc-proxy/energy"
	"github.com/eoc-proxy/eoc-proxy/internal/testenv/fakes"
	"github.com/eoc-proxy/eoc-proxy/meter"
)

type chatOnly struct{}

func (chatOnly) Chat(context.Context, *cascade.Request, cascade.Sink) (*cascade.Answer, error) {
	return nil, errors.New("unused")
}

func newMeter(t *testing.T, backend, url string) *meter.Meter {
	t.Helper()
	m, err := meter.New(meter.Options{RAPL: "off", NVML: "off", SkipProbe: true,
		Backends: []meter.BackendInfo{{Name: backend, URL: url}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func TestServeEmbed(t *testing.T) {
	f := fakes.NewOllama(t)
	be, err := backends.New(backends.Options{Name: "up", Type: "ollama", URL: f.BaseURL(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	router, err := routing.New([]routing.Route{
		{Name: "up", Type: "ollama", Patterns: []string{"emb-*"}, Backend: be},
		{Name: "chat", Type: "custom", Patterns: []string{"*"}, Backend: chatOnly{}},
	}, routing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := New(router, newMeter(t, "up", f.URL))
	e, err := s.ServeEmbed(context.Background(), &cascade.EmbedCall{Req: cascade.EmbedRequest{Model: "emb-1", Input: []string{"a", "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Vectors) != 2 || !slices.Equal(e.Vectors[1], fakes.Vector("b", 0)) || e.Backend != "up" {
		t.Errorf("embeddings %+v", e)
	}
	if e.Energy.IsZero() || e.Energy.Joules <= 0 || e.Energy.Method == "" {
		t.Errorf("not metered: %+v", e.Energy)
	}
	if _, err := s.ServeEmbed(context.Background(), &cascade.EmbedCall{Req: cascade.EmbedRequest{Model: "other", Input: []string{"a"}}}); !errors.Is(err, cascade.ErrNoEmbeddings) {
		t.Errorf("backend that cannot embed: err = %v", err)
	}
	f.Configure(func(c *fakes.Config) { c.Status = 503 })
	e, err = s.ServeEmbed(context.Background(), &cascade.EmbedCall{Req: cascade.EmbedRequest{Model: "emb-1", Input: []string{"a"}}})
	var up *cascade.UpstreamError
	if !errors.As(err, &up) || up.Status != 503 || e == nil || e.Energy.IsZero() {
		t.Errorf("failed call: err = %v, embeddings %+v: want the error and the figure", err, e)
	}
}

func TestEmbedder(t *testing.T) {
	f := fakes.NewOpenAI(t)
	be, err := backends.New(backends.Options{Name: "kv-embedder", Type: "openai", URL: f.BaseURL()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewEmbedder("x", "id", "m", chatOnly{}, nil); !errors.Is(err, cascade.ErrNoEmbeddings) {
		t.Errorf("NewEmbedder over a chat-only backend: err = %v", err)
	}
	e, err := NewEmbedder("kv-embedder", "openai:m", "m", be, newMeter(t, "kv-embedder", f.BaseURL()))
	if err != nil {
		t.Fatal(err)
	}
	if e.ID() != "openai:m" {
		t.Errorf("ID %q", e.ID())
	}
	vs, fig, err := e.Embed(context.Background(), []string{"q", "ctx"})
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 2 || !slices.Equal(vs[0], fakes.Vector("q", 0)) {
		t.Errorf("vectors %v", vs)
	}
	if fig.Grade != energy.Estimated || fig.Joules <= 0 {
		t.Errorf("figure %+v, want a metered estimate", fig)
	}
	if f.Embeds() != 1 {
		t.Errorf("upstream saw %d calls", f.Embeds())
	}
	f.Configure(func(c *fakes.Config) { c.Status = 500 })
	if _, fig, err := e.Embed(context.Background(), []string{"q"}); err == nil || fig.IsZero() {
		t.Errorf("failed call: err %v figure %+v, want both", err, fig)
	}
}
