// Package telemetry sets up OpenTelemetry tracing for eoc-proxy: an OTLP/HTTP exporter when an
// endpoint is configured, and nothing at all otherwise.
package telemetry

import (
	"context"
	"fmt"
	"net/url"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Options configure tracing.
type Options struct {
	// Endpoint is the OTLP/HTTP traces URL (http://collector:4318/v1/traces); "" turns tracing
	// off: no exporter, no provider, no span kept.
	Endpoint string
	// Version is the service.version resource attribute.
	Version string
}

// Setup returns the tracer provider for the edge and the function that flushes and stops its
// exporter at shutdown. With no endpoint it returns a nil provider and a shutdown that does
// nothing: no exporter runs. It changes no OpenTelemetry global.
func Setup(o Options) (trace.TracerProvider, func(context.Context) error, error) {
	if o.Endpoint == "" {
		return nil, func(context.Context) error { return nil }, nil
	}
	// The exporter only logs a URL it cannot parse, and then sends nowhere: refuse it here.
	if u, err := url.Parse(o.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, nil, fmt.Errorf("telemetry: %q is not an http(s) URL", o.Endpoint)
	}
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(o.Endpoint))
	if err != nil {
		return nil, nil, fmt.Errorf("telemetry: OTLP exporter for %s: %w", o.Endpoint, err)
	}
	return newProvider(sdktrace.NewBatchSpanProcessor(exp), o.Version)
}

// newProvider builds the provider around one span processor.
func newProvider(sp sdktrace.SpanProcessor, version string) (trace.TracerProvider, func(context.Context) error, error) {
	res := resource.NewSchemaless(attribute.String("service.name", "eoc-proxy"), attribute.String("service.version", version))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp), sdktrace.WithResource(res))
	return tp, tp.Shutdown, nil
}
