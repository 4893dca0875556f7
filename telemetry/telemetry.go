// Package telemetry sets up OpenTelemetry tracing and metrics for eoc-proxy: OTLP/HTTP exporters
// when an endpoint is configured, and nothing at all otherwise.
package telemetry

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Options configure tracing.
type Options struct {
	// Endpoint is the OTLP/HTTP traces URL (http://collector:4318/v1/traces); "" turns tracing
	// and metrics off: no exporter, no provider, no span kept. Metrics go to the same collector's
	// metrics URL (MetricsURL).
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
	if err := checkURL(o.Endpoint); err != nil {
		return nil, nil, err
	}
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(o.Endpoint))
	if err != nil {
		return nil, nil, fmt.Errorf("telemetry: OTLP exporter for %s: %w", o.Endpoint, err)
	}
	return newProvider(sdktrace.NewBatchSpanProcessor(exp), o.Version)
}

// newProvider builds the provider around one span processor.
func newProvider(sp sdktrace.SpanProcessor, version string) (trace.TracerProvider, func(context.Context) error, error) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp), sdktrace.WithResource(serviceResource(version)))
	return tp, tp.Shutdown, nil
}

// checkURL refuses what is not an http(s) URL: the exporters only log a URL they cannot parse,
// and then send nowhere.
func checkURL(endpoint string) error {
	if u, err := url.Parse(endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("telemetry: %q is not an http(s) URL", endpoint)
	}
	return nil
}

// MetricsURL is the OTLP/HTTP metrics URL beside a traces URL: its path's /v1/traces becomes
// /v1/metrics (a path without it gets /v1/metrics added), on the same collector.
func MetricsURL(traces string) string {
	u, err := url.Parse(traces)
	if err != nil {
		return traces
	}
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/v1/traces") + "/v1/metrics"
	u.RawPath = ""
	return u.String()
}

// SetupMetrics returns the meter provider for the edge, exporting to MetricsURL(o.Endpoint) every
// minute (OTEL_METRIC_EXPORT_INTERVAL changes that), and the function that exports what it holds
// and stops it at shutdown. With no endpoint it returns a nil provider and a shutdown that does
// nothing. It changes no OpenTelemetry global.
func SetupMetrics(o Options) (metric.MeterProvider, func(context.Context) error, error) {
	if o.Endpoint == "" {
		return nil, func(context.Context) error { return nil }, nil
	}
	if err := checkURL(o.Endpoint); err != nil {
		return nil, nil, err
	}
	endpoint := MetricsURL(o.Endpoint)
	exp, err := otlpmetrichttp.New(context.Background(), otlpmetrichttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, nil, fmt.Errorf("telemetry: OTLP metric exporter for %s: %w", endpoint, err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)), sdkmetric.WithResource(serviceResource(o.Version)))
	return mp, mp.Shutdown, nil
}

// serviceResource names the service the traces and metrics come from.
func serviceResource(version string) *resource.Resource {
	return resource.NewSchemaless(attribute.String("service.name", "eoc-proxy"), attribute.String("service.version", version))
}
