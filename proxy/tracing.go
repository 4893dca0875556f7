package proxy

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

// tracerName names the edge's OpenTelemetry instrumentation scope.
const tracerName = "github.com/eoc-proxy/eoc-proxy/proxy"

// The energy attributes every span carries once its work is priced. Tokens use OpenTelemetry's
// gen_ai names; the rest are eoc-proxy's own.
const (
	attrStage      = attribute.Key("eoc.stage")
	attrModel      = attribute.Key("gen_ai.request.model")
	attrBackend    = attribute.Key("eoc.backend")
	attrOutcome    = attribute.Key("eoc.outcome")
	attrJoules     = attribute.Key("eoc.energy.joules")
	attrSaved      = attribute.Key("eoc.energy.joules_saved")
	attrGrade      = attribute.Key("eoc.energy.grade")
	attrCoverage   = attribute.Key("eoc.energy.coverage")
	attrMethod     = attribute.Key("eoc.energy.method")
	attrReason     = attribute.Key("eoc.energy.reason")
	attrReceipt    = attribute.Key("eoc.receipt")
	attrInTokens   = attribute.Key("gen_ai.usage.input_tokens")
	attrOutTokens  = attribute.Key("gen_ai.usage.output_tokens")
	attrStatusCode = attribute.Key("http.response.status_code")
)

var traceContext propagation.TraceContext

// traced takes the client's W3C traceparent, so backends pass it upstream, and, when the edge
// has a tracer, opens the call's server span under it and puts the cascade's tracer in the
// context, so each stage and backend attempt gets a child span. Without a tracer and without a
// traceparent it costs one header lookup.
func (s *Server) traced(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.tracer == nil {
			if r.Header.Get("Traceparent") != "" {
				r = r.WithContext(traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
			}
			next.ServeHTTP(w, r)
			return
		}
		ctx := traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := s.tracer.Start(ctx, r.Method+" "+r.URL.Path, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path)))
		defer span.End()
		next.ServeHTTP(w, r.WithContext(cascade.WithTracer(ctx, stageTracer{s.tracer})))
	})
}

// endCall puts the settled call's figures on its span (a no-op span when untraced).
func endCall(span trace.Span, st *settlement, o outcome, status int) {
	if span == nil || !span.IsRecording() {
		return
	}
	span.SetAttributes(attrStage.String(o.stage), attrModel.String(st.model), attrBackend.String(st.backend),
		attrStatusCode.Int(status), attrReceipt.String(o.receipt), attrInTokens.Int(st.promptTokens), attrOutTokens.Int(st.tokens),
		attribute.Int("eoc.attempts", len(st.backendAttempts)))
	if st.answered {
		span.SetAttributes(attrJoules.Float64(o.fig.Joules), attrSaved.Float64(o.fig.Saved), attrGrade.String(string(o.fig.Grade)),
			attrCoverage.String(o.fig.Coverage), attrMethod.String(o.fig.Method), attrReason.String(o.fig.Reason))
	}
	if o.apiErr != nil {
		span.SetStatus(codes.Error, o.apiErr.Message)
	}
}

// stageTracer opens the cascade's stage and attempt spans with OpenTelemetry.
type stageTracer struct{ t trace.Tracer }

func (t stageTracer) StartSpan(ctx context.Context, kind cascade.SpanKind, name string) (context.Context, cascade.Span) {
	var sp trace.Span
	if kind == cascade.SpanAttempt {
		ctx, sp = t.t.Start(ctx, "attempt "+name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrBackend.String(name)))
	} else {
		ctx, sp = t.t.Start(ctx, "stage "+name, trace.WithAttributes(attrStage.String(name)))
	}
	return ctx, otelSpan{sp}
}

type otelSpan struct{ s trace.Span }

func (o otelSpan) End(r cascade.SpanResult) {
	attrs := []attribute.KeyValue{attrModel.String(r.Model), attrOutcome.String(r.Outcome)}
	if r.Backend != "" {
		attrs = append(attrs, attrBackend.String(r.Backend))
	}
	if r.Usage != nil {
		attrs = append(attrs, attrInTokens.Int(r.Usage.PromptTokens), attrOutTokens.Int(r.Usage.CompletionTokens))
	}
	if !r.Energy.IsZero() {
		f := r.Energy.Rounded()
		attrs = append(attrs, attrJoules.Float64(f.Joules), attrSaved.Float64(f.Saved), attrGrade.String(string(f.Grade)),
			attrCoverage.String(f.Coverage), attrMethod.String(f.Method), attrReason.String(f.Reason))
	}
	o.s.SetAttributes(attrs...)
	if r.Err != nil {
		// The error's class only: its text may quote an upstream's reply.
		o.s.SetStatus(codes.Error, r.Outcome)
	}
	o.s.End()
}
