package backends

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
)

// injectTrace passes ctx's W3C trace context upstream as traceparent (and tracestate): the
// attempt's span when the proxy traces, else the client's own traceparent; nothing when ctx
// has neither. It allocates nothing without a trace context.
func injectTrace(ctx context.Context, h http.Header) {
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))
}
