package proxy

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/energy"
)

// tracerName names the edge's OpenTelemetry instrumentation scope.
const tracerName = "github.com/eoc-proxy/eoc-proxy/proxy"

// The attributes the spans carry once their work is priced. Tokens use OpenTelemetry's gen_ai
// names; the rest are eoc-proxy's own.
const (
	attrStage      = attribute.Key("eoc.stage")
	attrModel      = attribute.Key("gen_ai.request.model")
	attrBackend    = attribute.Key("eoc.backend")
	attrOutcome    = attribute.Key("eoc.outcome")
	attrReceipt    = attribute.Key("eoc.receipt")
	attrInTokens   = attribute.Key("gen_ai.usage.input_tokens")
	attrOutTokens  = attribute.Key("gen_ai.usage.output_tokens")
	attrStatusCode = attribute.Key("http.response.status_code")
	// attrJoulesState is the call's X-EOC-Joules-State.
	attrJoulesState = attribute.Key("eoc.energy.state")
)

// figureKeys name an energy figure's attributes under one prefix. The billed figure is on the
// call's span alone (eoc.energy.*); a stage's or an attempt's own figure, a part of it, has
// names of its own (eoc.stage.*, eoc.attempt.*), so that a trace backend summing
// eoc.energy.joules over a trace counts each call's energy once.
type figureKeys struct{ joules, saved, grade, coverage, method, reason attribute.Key }

func keysUnder(prefix string) figureKeys {
	return figureKeys{attribute.Key(prefix + "joules"), attribute.Key(prefix + "joules_saved"), attribute.Key(prefix + "grade"),
		attribute.Key(prefix + "coverage"), attribute.Key(prefix + "method"), attribute.Key(prefix + "reason")}
}

var (
	callFigure    = keysUnder("eoc.energy.")
	stageFigure   = keysUnder("eoc.stage.")
	attemptFigure = keysUnder("eoc.attempt.")
)

// attrs returns f's attributes under k.
func (k figureKeys) attrs(f energy.Figure) []attribute.KeyValue {
	return []attribute.KeyValue{k.joules.Float64(f.Joules), k.saved.Float64(f.Saved), k.grade.String(string(f.Grade)),
		k.coverage.String(f.Coverage), k.method.String(f.Method), k.reason.String(f.Reason)}
}

var traceContext propagation.TraceContext

// traced takes the client's W3C traceparent, so backends pass it upstream, and, when the edge
// has a tracer, opens the call's server span under it (each call hands the cascade its tracer,
// Server.stages, so each stage and backend attempt gets a child span). Without a tracer and
// without a traceparent it costs one header lookup.
func (s *Server) traced(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.tracer == nil {
			if tp := r.Header["Traceparent"]; len(tp) > 0 && tp[0] != "" { // Header.Get's answer, the name canonical
				r = r.WithContext(traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
			}
			next.ServeHTTP(w, r)
			return
		}
		ctx := traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := s.tracer.Start(ctx, r.Method+" "+r.URL.Path, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path)))
		defer span.End()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// span is the call's server span in ctx; nil without a tracer, which leaves nothing to record
// and the context's values unread.
func (s *Server) span(ctx context.Context) trace.Span {
	if s.tracer == nil {
		return nil
	}
	return trace.SpanFromContext(ctx)
}

// endCall puts the settled call's figures on its span (nil or a no-op span when untraced).
func endCall(c *Call) {
	span := c.span
	if span == nil || !span.IsRecording() {
		return
	}
	span.SetAttributes(attrStage.String(c.Stage), attrModel.String(c.Model), attrBackend.String(c.Backend),
		attrStatusCode.Int(c.Status), attrReceipt.String(c.Receipt), attrInTokens.Int(c.promptTokens), attrOutTokens.Int(c.tokens),
		attribute.Int("eoc.attempts", len(c.Attempts)))
	if c.answered {
		// The span ends with the response: a provisional figure is marked so (its settled
		// figure goes to the ledger, the metrics and the page, not to the trace).
		span.SetAttributes(callFigure.attrs(c.Energy)...)
		span.SetAttributes(attrJoulesState.String(stateOf(c.Energy)))
	}
	if c.err != nil {
		span.SetStatus(codes.Error, c.err.Message)
	}
}

// stageTracer opens the cascade's stage and attempt spans with OpenTelemetry.
type stageTracer struct{ t trace.Tracer }

func (t stageTracer) StartSpan(ctx context.Context, kind cascade.SpanKind, name string) (context.Context, cascade.Span) {
	var sp trace.Span
	if kind == cascade.SpanAttempt {
		ctx, sp = t.t.Start(ctx, "attempt "+name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrBackend.String(name)))
		return ctx, otelSpan{sp, attemptFigure}
	}
	ctx, sp = t.t.Start(ctx, "stage "+name, trace.WithAttributes(attrStage.String(name)))
	return ctx, otelSpan{sp, stageFigure}
}

type otelSpan struct {
	s   trace.Span
	fig figureKeys // the names of the span's own figure
}

func (o otelSpan) End(r cascade.SpanResult) {
	attrs := []attribute.KeyValue{attrModel.String(r.Model), attrOutcome.String(r.Outcome)}
	if r.Backend != "" {
		attrs = append(attrs, attrBackend.String(r.Backend))
	}
	if r.Usage != nil {
		attrs = append(attrs, attrInTokens.Int(r.Usage.PromptTokens), attrOutTokens.Int(r.Usage.CompletionTokens))
	}
	if !r.Energy.IsZero() {
		attrs = append(attrs, o.fig.attrs(r.Energy.Rounded())...)
	}
	o.s.SetAttributes(attrs...)
	if r.Err != nil {
		// The error's class only: its text may quote an upstream's reply.
		o.s.SetStatus(codes.Error, r.Outcome)
	}
	o.s.End()
}
