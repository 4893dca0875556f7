// Package neural is the cascade's last stage: it routes the call to a backend inside a meter span.
package neural

import (
	"context"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/energy"
	"github.com/eoc-proxy/eoc-proxy/meter"
)

var _ cascade.Stage = (*Stage)(nil)

// Stage sends a request to the backend its model routes to, and meters the call. It is safe for
// concurrent use.
type Stage struct {
	router   *cascade.Router
	meter    *meter.Meter
	observer Observer
}

// Observer learns what each successful call cost (energy.Tracker is one, whose running figure the
// memoizing stages report as saved). Observe is called on the request's goroutine and must not
// block.
type Observer interface {
	Observe(model string, fig energy.Figure, completionTokens int)
}

// Option changes how New builds a Stage.
type Option func(*Stage)

// WithObserver reports every call that succeeded to o, with the model the request asked for.
func WithObserver(o Observer) Option { return func(s *Stage) { s.observer = o } }

// New returns the neural stage over router's backends, metered by m.
func New(router *cascade.Router, m *meter.Meter, opts ...Option) *Stage {
	s := &Stage{router: router, meter: m}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Name is "neural".
func (*Stage) Name() string { return "neural" }

// Serve calls the backend, streaming into sink when it is set. The span covers the upstream call
// from the request to its last byte. On error the partial answer, if any, still carries the energy
// that was spent.
func (s *Stage) Serve(ctx context.Context, req *cascade.Request, sink cascade.Sink) (*cascade.Answer, error) {
	route, err := s.router.Route(req.Chat.Model)
	if err != nil {
		return nil, err
	}
	span := s.meter.Begin(route.Name)
	ans, err := route.Backend.Chat(ctx, req, sink)
	w := meter.Work{Model: req.Chat.Model, Failed: err != nil}
	if ans != nil && ans.Usage != nil {
		w.PromptTokens, w.CompletionTokens = ans.Usage.PromptTokens, ans.Usage.CompletionTokens
	}
	fig := span.End(w)
	if ans == nil {
		ans = &cascade.Answer{Backend: route.Name}
	}
	ans.Backend = route.Name
	ans.Energy = fig
	if err == nil && s.observer != nil {
		s.observer.Observe(req.Chat.Model, fig, w.CompletionTokens)
	}
	return ans, err
}
