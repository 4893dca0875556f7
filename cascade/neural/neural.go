// Package neural is the cascade's last stage and the kv stage's embedder: each call goes to a
// backend inside a meter span.
package neural

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/cascade/routing"
	"github.com/eoc-proxy/eoc-proxy/energy"
	"github.com/eoc-proxy/eoc-proxy/meter"
)

var _ cascade.Stage = (*Stage)(nil)

// Stage sends a request to the backends its model routes to, in turn until one answers, and
// meters each attempt. It is safe for
// concurrent use.
type Stage struct {
	router   *routing.Router
	begin    func(backend string) meterSpan // opens a meter span (Meter.Begin)
	observer Observer
	logger   zerolog.Logger
}

// meterSpan is what the stage needs of a meter span; *meter.Span is one.
type meterSpan interface {
	Mark()
	End(w meter.Work) energy.Figure
	Settled(ctx context.Context) (energy.Figure, error)
}

// beginOn opens spans of m.
func beginOn(m *meter.Meter) func(string) meterSpan {
	return func(backend string) meterSpan { return m.Begin(backend) }
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

// WithLogger logs each failed attempt that is followed by another backend.
func WithLogger(l zerolog.Logger) Option { return func(s *Stage) { s.logger = l } }

// New returns the neural stage over router's backends, metered by m.
func New(router *routing.Router, m *meter.Meter, opts ...Option) *Stage {
	s := &Stage{router: router, begin: beginOn(m), logger: zerolog.Nop()}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Name is "neural".
func (*Stage) Name() string { return "neural" }

// HTTP statuses the stage reads in an UpstreamError (the cascade imports no HTTP package).
const (
	statusOK      = 200
	statusTooMany = 429
)

// MaxRetryAfter is the longest Retry-After the stage waits out to call the last backend of a
// group again after a 429; a longer one passes the 429 to the client.
const MaxRetryAfter = 2 * time.Second

// Serve calls the model's backends in the order the router gives (routing.Router.Candidates),
// streaming into sink when it is set, each attempt inside its own meter span. An attempt that
// fails before the first chunk reached sink (refused, reset, a timeout, 5xx, 429) is followed by
// the next backend; a 4xx other than 429 is the client's error and is returned as it is; after
// the first chunk nothing is retried. The answer's figure is the sum of every attempt's, failed
// ones included, and its Attempts list them. On error the partial answer, if any, still carries
// what was spent. When an attempt's figure is provisional, the answer's Settle sums the
// attempts' settled figures, in the same order.
func (s *Stage) Serve(ctx context.Context, req *cascade.Request, sink cascade.Sink) (*cascade.Answer, error) {
	cands, err := s.router.Candidates(req.Chat.Model)
	if err != nil {
		return nil, err
	}
	var wrote bool
	var tracked cascade.Sink
	if sink != nil {
		tracked = func(ch *cascade.Chunk) error {
			wrote = true
			return sink(ch)
		}
	}
	var spent energy.Figure
	var tries []cascade.BackendAttempt
	var spans []meterSpan
	waited := false
	for i := 0; i < len(cands); i++ {
		route := cands[i]
		req.Announce(route.Name, len(tries)+1)
		actx, tr := cascade.StartSpan(ctx, req.Tracer, cascade.SpanAttempt, route.Name)
		ans, fig, ms, err := s.attempt(actx, route, req, tracked)
		spent = spent.Plus(fig)
		spans = append(spans, ms)
		tries = append(tries, attemptOf(ctx, route.Name, fig, err))
		tr.End(attemptResult(req.Chat.Model, tries[len(tries)-1], ans, err))
		if err == nil {
			ans.Energy, ans.Attempts, ans.Settle = spent, tries, settleOf(spans, tries)
			return ans, nil
		}
		if wrote || ctx.Err() != nil || !retryable(err) {
			return failed(ans, route.Name, spent, tries, spans), err
		}
		if i == len(cands)-1 && !waited {
			// The last backend said 429 with a short Retry-After: wait it out and call it again.
			if d, ok := retryAfter(err); ok && wait(ctx, d) {
				waited = true
				i--
				continue
			}
		}
		if i == len(cands)-1 {
			return failed(ans, route.Name, spent, tries, spans), err
		}
		s.logger.Warn().Str("request_id", req.ID).Str("backend", route.Name).Err(err).Msg("backend attempt failed; trying the next")
	}
	return nil, errors.New("neural: no candidate backend") // Candidates never returns none
}

// attempt calls one backend inside a meter span and reports its verdict to the router; the span
// is returned ended, for its settled figure.
func (s *Stage) attempt(ctx context.Context, route *routing.Route, req *cascade.Request, sink cascade.Sink) (*cascade.Answer, energy.Figure, meterSpan, error) {
	done := s.router.Start(route)
	span := s.begin(route.Name)
	if sink != nil {
		inner := sink
		sink = func(ch *cascade.Chunk) error {
			span.Mark() // the first chunk ends prefill: the meter splits the figure there
			return inner(ch)
		}
	}
	ans, err := route.Backend.Chat(ctx, req, sink)
	w := meter.Work{Model: req.Chat.Model, Failed: err != nil}
	if ans != nil && ans.Usage != nil {
		w.PromptTokens, w.CompletionTokens = ans.Usage.PromptTokens, ans.Usage.CompletionTokens
	}
	fig := span.End(w)
	done(verdict(ctx, err))
	if err == nil {
		ans.Backend = route.Name
		s.router.ObserveCost(route, req.Chat.Model, fig, w.CompletionTokens)
		if s.observer != nil {
			s.observer.Observe(req.Chat.Model, fig, w.CompletionTokens)
		}
	}
	return ans, fig, span, err
}

// failed is the answer that goes with the error ending the call: the partial answer, if any,
// carrying what every attempt spent.
func failed(ans *cascade.Answer, backend string, spent energy.Figure, tries []cascade.BackendAttempt, spans []meterSpan) *cascade.Answer {
	if ans == nil {
		ans = &cascade.Answer{}
	}
	ans.Backend, ans.Energy, ans.Attempts, ans.Settle = backend, spent, tries, settleOf(spans, tries)
	return ans
}

// settleOf is how to get the settled sum of the attempts' figures (tries[i].Energy, from
// spans[i]), added in the order the call added them; nil when every figure is final. A span
// whose wait fails keeps its provisional figure, and the first error is returned.
func settleOf(spans []meterSpan, tries []cascade.BackendAttempt) cascade.SettleFunc {
	provisional := false
	for _, a := range tries {
		provisional = provisional || a.Energy.Provisional
	}
	if !provisional {
		return nil
	}
	figs := make([]energy.Figure, len(tries))
	for i, a := range tries {
		figs[i] = a.Energy
	}
	return func(ctx context.Context) (energy.Figure, error) {
		var sum energy.Figure
		var first error
		for i, f := range figs {
			if f.Provisional {
				settled, err := spans[i].Settled(ctx)
				if err != nil && first == nil {
					first = err
				}
				if !settled.IsZero() {
					f = settled
				}
			}
			sum = sum.Plus(f)
		}
		return sum, first
	}
}

// retryable reports whether another backend may answer after err (cascade.Failure.Retryable).
func retryable(err error) bool { return cascade.Classify(err).Retryable() }

// verdict is what err says about the backend's health.
func verdict(ctx context.Context, err error) routing.Verdict {
	if err == nil {
		return routing.Succeeded
	}
	if ctx.Err() != nil {
		return routing.Neutral // the call ended on this side: the client left, or its time ran out
	}
	switch cascade.Classify(err) {
	case cascade.Upstream5xx, cascade.Unreachable, cascade.BrokenTransport, cascade.Timeout:
		return routing.Failed
	case cascade.Upstream4xx, cascade.UpstreamAuth:
		return routing.Succeeded // it answered: the request was at fault
	}
	return routing.Neutral // a 429, or the sink's error: the client went away
}

// attemptResult is what an attempt's trace span ends with.
func attemptResult(model string, a cascade.BackendAttempt, ans *cascade.Answer, err error) cascade.SpanResult {
	r := cascade.SpanResult{Model: model, Backend: a.Backend, Outcome: a.Outcome, Err: err, Energy: a.Energy}
	if ans != nil {
		r.Usage = ans.Usage
	}
	return r
}

// attemptOf describes one attempt for the ledger. An attempt writes to the client's sink, so
// an error that is not a backend's is the client's (AfterWrite); one that came after the call's
// context ended, other than a deadline or an upstream's status, is the call's end on this side.
func attemptOf(ctx context.Context, backend string, fig energy.Figure, err error) cascade.BackendAttempt {
	f := cascade.Classify(err).AfterWrite()
	if err != nil && ctx.Err() != nil && !f.Upstream() && !errors.Is(err, context.DeadlineExceeded) {
		f = cascade.ClientGone
	}
	a := cascade.BackendAttempt{Backend: backend, Outcome: f.Outcome(), Energy: fig}
	if err == nil {
		a.Status = statusOK
		return a
	}
	var up *cascade.UpstreamError // declared here, it is allocated only for a failed attempt
	if errors.As(err, &up) {
		a.Status = up.Status
	}
	return a
}

// retryAfter is a 429's Retry-After when it is short enough to wait.
func retryAfter(err error) (time.Duration, bool) {
	var up *cascade.UpstreamError
	if !errors.As(err, &up) || up.Status != statusTooMany || up.RetryAfter <= 0 || up.RetryAfter > MaxRetryAfter {
		return 0, false
	}
	return up.RetryAfter, true
}

// wait sleeps for d unless ctx ends first; it reports whether the call goes on.
func wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
