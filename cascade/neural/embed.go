package neural

import (
	"context"
	"fmt"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/energy"
	"github.com/eoc-proxy/eoc-proxy/meter"
)

var _ cascade.EmbedStage = (*Stage)(nil)

// ServeEmbed sends an embeddings call to its model's backends in the router's order, like Serve:
// each attempt inside its own meter span, the next backend tried when one fails in a way another
// might not (refused, reset, a timeout, 5xx, 429), and the figure the sum of every attempt's.
// Backends that cannot embed are passed over; when none can, the error is cascade.ErrNoEmbeddings.
func (s *Stage) ServeEmbed(ctx context.Context, call *cascade.EmbedCall) (*cascade.Embeddings, error) {
	cands, err := s.router.Candidates(call.Req.Model)
	if err != nil {
		return nil, err
	}
	var spent energy.Figure
	var tries []cascade.BackendAttempt
	var spans []meterSpan
	err = fmt.Errorf("backend %s (%s): %w", cands[0].Name, cands[0].Type, cascade.ErrNoEmbeddings)
	for _, route := range cands {
		be, ok := route.Backend.(cascade.Embedder)
		if !ok {
			continue
		}
		done := s.router.Start(route)
		var e cascade.Embeddings
		actx, tr := cascade.StartSpan(ctx, call.Tracer, cascade.SpanAttempt, route.Name)
		var ms meterSpan
		e, ms, err = embed(actx, s.begin, route.Name, be, call.Req)
		done(verdict(ctx, err))
		spent = spent.Plus(e.Energy)
		spans = append(spans, ms)
		tries = append(tries, attemptOf(ctx, route.Name, e.Energy, err))
		tr.End(attemptResult(call.Req.Model, tries[len(tries)-1], nil, err))
		e.Energy, e.Attempts, e.Settle = spent, tries, settleOf(spans, tries)
		if err == nil || ctx.Err() != nil || !retryable(err) {
			return &e, err
		}
		s.logger.Warn().Str("request_id", call.ID).Str("backend", route.Name).Err(err).Msg("embeddings attempt failed; trying the next")
	}
	return &cascade.Embeddings{Energy: spent, Attempts: tries, Settle: settleOf(spans, tries)}, err
}

// embed calls be inside a span opened by begin for the backend name; the returned Embeddings
// carry the figure, failed calls included, and the span is returned ended, for its settled
// figure.
func embed(ctx context.Context, begin func(string) meterSpan, name string, be cascade.Embedder, req cascade.EmbedRequest) (cascade.Embeddings, meterSpan, error) {
	span := begin(name)
	e, err := be.Embed(ctx, req)
	e.Backend = name
	e.Energy = span.End(meter.Work{Model: req.Model, PromptTokens: e.PromptTokens, Failed: err != nil})
	return e, span, err
}

// Embedder embeds texts with one model of one backend, each call metered in a span of that
// backend, as an in-process stage needs (kv): it satisfies kv's embedder. It is safe for
// concurrent use.
type Embedder struct {
	name  string
	id    string
	model string
	be    cascade.Embedder
	begin func(string) meterSpan // opens the call's meter span (tests fake it)
}

// NewEmbedder returns an Embedder over backend b, named name in the meter (a BackendInfo name,
// so the meter knows its process), for model; id names the model and its settings for the
// caller's store. b must implement cascade.Embedder.
func NewEmbedder(name, id, model string, b cascade.Backend, m *meter.Meter) (*Embedder, error) {
	be, ok := b.(cascade.Embedder)
	if !ok {
		return nil, fmt.Errorf("backend %s: %w", name, cascade.ErrNoEmbeddings)
	}
	return &Embedder{name: name, id: id, model: model, be: be, begin: beginOn(m)}, nil
}

// ID is the id NewEmbedder was given.
func (e *Embedder) ID() string { return e.id }

// Embed returns one vector per text and what the call cost, failed calls included. A provisional
// figure stays provisional: EmbedSettle also says how to settle it.
func (e *Embedder) Embed(ctx context.Context, texts []string) ([][]float32, energy.Figure, error) {
	vs, fig, _, err := e.EmbedSettle(ctx, texts)
	return vs, fig, err
}

// EmbedSettle is Embed, also returning how to get the figure's final form once the meter's
// counters settle (nil when it is final), for the answer the embedding helps to find (kv carries
// it beside Answer.Spent, and the walk composes it into the answer's settlement).
func (e *Embedder) EmbedSettle(ctx context.Context, texts []string) ([][]float32, energy.Figure, cascade.SettleFunc, error) {
	out, span, err := embed(ctx, e.begin, e.name, e.be, cascade.EmbedRequest{Model: e.model, Input: texts})
	settle := settleOf([]meterSpan{span}, []cascade.BackendAttempt{{Energy: out.Energy}})
	if err != nil {
		return nil, out.Energy, settle, err
	}
	return out.Vectors, out.Energy, settle, nil
}
