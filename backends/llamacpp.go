package backends

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

var (
	_ cascade.Backend     = (*LlamaCpp)(nil)
	_ cascade.ModelLister = (*LlamaCpp)(nil)
	_ cascade.Pinger      = (*LlamaCpp)(nil)
)

func init() {
	register("llamacpp", func(o Options) (cascade.Backend, error) { return NewLlamaCpp(o) })
}

// LlamaCpp talks to llama.cpp's llama-server: the OpenAI dialect, plus the server's own timings
// (prompt_n, predicted_n, cache_n, prompt_ms, predicted_ms) kept in Answer.Timings, from the top
// level of a whole answer or from the last chunk carrying them in a stream. It is safe for
// concurrent use.
type LlamaCpp struct {
	*OpenAI
	health endpoint
}

// NewLlamaCpp returns a llama.cpp backend; o.URL is the server's base URL with /v1.
func NewLlamaCpp(o Options) (*LlamaCpp, error) {
	oa, err := NewOpenAI(o)
	if err != nil {
		return nil, err
	}
	oa.timings = true
	root := strings.TrimSuffix(oa.url, "/v1")
	return &LlamaCpp{OpenAI: oa, health: oa.endpoint(http.MethodGet, root+"/health", nil)}, nil
}

// Ping asks llama-server's /health (at the root, without /v1), which fails while the model
// loads; an upstream without /health is asked for its models instead.
func (l *LlamaCpp) Ping(ctx context.Context) error {
	err := l.getJSON(ctx, &l.health, nil)
	var up *cascade.UpstreamError
	if errors.As(err, &up) && (up.Status == http.StatusNotFound || up.Status == http.StatusMethodNotAllowed) {
		return l.OpenAI.Ping(ctx)
	}
	return err
}
