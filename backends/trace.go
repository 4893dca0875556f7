package backends

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// withTrace returns h with ctx's W3C trace context to pass upstream as traceparent (and
// tracestate): the attempt's span when the proxy traces, else the client's own traceparent. It
// is h itself when ctx has neither, else a copy: h is shared by calls and never written.
func withTrace(ctx context.Context, h http.Header) http.Header {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return h
	}
	h = h.Clone()
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))
	return h
}
