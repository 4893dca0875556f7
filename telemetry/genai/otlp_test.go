package genai

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/internal/testenv/fakes"
	"github.com/eoc-proxy/eoc-proxy/telemetry"
)

// With an OTLP endpoint, the GenAI metrics and the energy ones reach the collector's metrics URL
// as OTLP/HTTP protobuf by shutdown, with the conventions' attributes.
func TestGenAIMetricsReachTheCollector(t *testing.T) {
	collector := fakes.NewOTLPCollector(t)
	mp, shutdown, err := telemetry.SetupMetrics(telemetry.Options{Endpoint: collector.URL + "/v1/traces", Version: "test"})
	if err != nil || mp == nil {
		t.Fatalf("provider %v, err %v", mp, err)
	}
	m, err := New(prometheus.NewRegistry(), mp, known)
	if err != nil {
		t.Fatal(err)
	}
	m.Observe(context.Background(), Call{Model: "llama3", Backend: "gpu0", Stage: "neural", Status: 200, Streamed: true,
		PromptTokens: 20, CompletionTokens: 40, FirstToken: 100 * time.Millisecond, Duration: time.Second,
		Timings: &cascade.Timings{PredictedN: 40, Eval: 800 * time.Millisecond}, Energy: measured})
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if other := collector.OtherPaths(); len(other) > 0 {
		t.Errorf("metrics posted to %v", other)
	}
	got := collector.Points()
	for name, want := range map[string]map[string]string{
		"gen_ai.client.token.usage":           {"gen_ai.request.model": "llama3", "gen_ai.operation.name": "chat", "gen_ai.provider.name": "eoc-proxy"},
		"gen_ai.server.time_to_first_token":   {"gen_ai.request.model": "llama3", "eoc.backend": "gpu0"},
		"gen_ai.server.time_per_output_token": {"gen_ai.request.model": "llama3", "eoc.backend": "gpu0"},
		"eoc.energy.joules":                   {"gen_ai.request.model": "llama3", "eoc.energy.grade": "measured"},
		"eoc.energy.joules_per_token":         {"gen_ai.request.model": "llama3", "eoc.energy.grade": "measured"},
	} {
		points := got[name]
		if len(points) == 0 {
			t.Errorf("the collector got no %s; it got %v", name, got)
			continue
		}
		for k, v := range want {
			if points[0][k] != v {
				t.Errorf("%s: %s = %q, want %q", name, k, points[0][k], v)
			}
		}
	}
	types := map[string]bool{}
	for _, p := range got["gen_ai.client.token.usage"] {
		types[p["gen_ai.token.type"]] = true
	}
	if !types["input"] || !types["output"] || len(types) != 2 {
		t.Errorf("gen_ai.token.type values %v, want input and output", types)
	}
}
