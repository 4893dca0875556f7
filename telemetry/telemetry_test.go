package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// Without an endpoint there is no provider and no exporter: nothing is sent anywhere.
func TestOffWithoutEndpoint(t *testing.T) {
	tp, shutdown, err := Setup(Options{})
	if err != nil || tp != nil {
		t.Fatalf("no endpoint: provider %v, err %v; want none", tp, err)
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// With an endpoint, a span's end reaches the collector as an OTLP/HTTP POST by shutdown.
func TestExportsToEndpoint(t *testing.T) {
	var posts atomic.Int32
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" && r.Header.Get("Content-Type") == "application/x-protobuf" {
			posts.Add(1)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	tp, shutdown, err := Setup(Options{Endpoint: collector.URL + "/v1/traces", Version: "test"})
	if err != nil || tp == nil {
		t.Fatalf("provider %v, err %v", tp, err)
	}
	_, span := tp.Tracer("t").Start(context.Background(), "call")
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if posts.Load() == 0 {
		t.Fatal("the collector got no traces")
	}
}

// A malformed endpoint is refused at start.
func TestBadEndpoint(t *testing.T) {
	if _, _, err := Setup(Options{Endpoint: "http://[::1"}); err == nil {
		t.Fatal("a malformed endpoint was accepted")
	}
}

// Metrics go to the same collector as the traces, at its metrics path.
func TestMetricsURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://collector:4318/v1/traces":     "http://collector:4318/v1/metrics",
		"https://c.example/otlp/v1/traces/":   "https://c.example/otlp/v1/metrics",
		"http://collector:4318":               "http://collector:4318/v1/metrics",
		"http://collector:4318/v1/traces?x=1": "http://collector:4318/v1/metrics?x=1",
	} {
		if got := MetricsURL(in); got != want {
			t.Errorf("MetricsURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// Without an endpoint there is no meter provider; a malformed one is refused.
func TestMetricsOffWithoutEndpoint(t *testing.T) {
	mp, shutdown, err := SetupMetrics(Options{})
	if err != nil || mp != nil {
		t.Fatalf("no endpoint: provider %v, err %v; want none", mp, err)
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := SetupMetrics(Options{Endpoint: "http://[::1"}); err == nil {
		t.Fatal("a malformed endpoint was accepted")
	}
}
