package cascade

import (
	"context"
	"errors"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

// Tracer opens a span for each stage a walk tries and each backend attempt a stage makes. The
// edge implements it (with OpenTelemetry) and hands it over as Request.Tracer (EmbedCall.Tracer);
// the cascade knows no tracing library. StartSpan returns the context the traced work runs in, so a
// backend called with it passes the span on upstream. It must be safe for concurrent use.
type Tracer interface {
	StartSpan(ctx context.Context, kind SpanKind, name string) (context.Context, Span)
}

// Span is an open span; End closes it once with what the work came to.
type Span interface {
	End(SpanResult)
}

// SpanKind says what a span covers.
type SpanKind uint8

// Span kinds.
const (
	SpanStage   SpanKind = iota + 1 // one stage's try at a request; the name is the stage's
	SpanAttempt                     // one backend call; the name is the backend's
)

// SpanResult is what a traced piece of work came to. Energy is zero when none was computed.
type SpanResult struct {
	Model   string
	Backend string
	Outcome string // hit, miss or error for a stage; ok or the failure's class for an attempt
	Err     error
	Usage   *Usage
	Energy  energy.Figure
}

// TraceSpan is a span opened by StartSpan. Its zero value, what StartSpan returns without a
// tracer, does nothing, so untraced calls pay no allocation.
type TraceSpan struct{ s Span }

// StartSpan opens a span of kind named name with t, under ctx's span; with a nil t it opens
// nothing and returns ctx.
func StartSpan(ctx context.Context, t Tracer, kind SpanKind, name string) (context.Context, TraceSpan) {
	if t == nil {
		return ctx, TraceSpan{}
	}
	ctx, s := t.StartSpan(ctx, kind, name)
	return ctx, TraceSpan{s: s}
}

// End closes the span with r; it does nothing on the zero TraceSpan.
func (t TraceSpan) End(r SpanResult) {
	if t.s != nil {
		t.s.End(r)
	}
}

// endStage closes a stage span with stageResult's account of ans and err; on the zero TraceSpan
// it computes nothing (stageResult's errors.As allocates).
func (t TraceSpan) endStage(model string, ans *Answer, err error) {
	if t.s != nil {
		t.s.End(stageResult(model, ans, err))
	}
}

// stageOutcome is a stage span's outcome word for err, as eoc_stage_duration_seconds names it.
func stageOutcome(err error) string {
	switch {
	case err == nil:
		return "hit"
	case errors.Is(err, ErrMiss):
		return "miss"
	}
	return "error"
}

// stageResult is what a stage span ends with: the answer's figure (the walk's estimate for an
// in-process stage), or what a miss spent outside this process.
func stageResult(model string, ans *Answer, err error) SpanResult {
	r := SpanResult{Model: model, Outcome: stageOutcome(err), Err: err}
	if ans != nil {
		r.Backend, r.Usage, r.Energy = ans.Backend, ans.Usage, ans.Energy
	}
	if err != nil && err != ErrMiss { //nolint:errorlint // a plain miss spent nothing: its target is not allocated
		if se := (*SpentError)(nil); errors.As(err, &se) {
			r.Energy = se.Energy
		}
	}
	if errors.Is(err, ErrMiss) {
		r.Err = nil // a miss is no error
	}
	return r
}
