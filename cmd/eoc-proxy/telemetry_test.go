package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/eoc-proxy/eoc-proxy/internal/testenv/fakes"
)

// With telemetry.otlp_endpoint set, the wired stack exports one trace per call over OTLP/HTTP:
// the call's span, its stage spans and its backend attempt, with the energy figure on them.
func TestTracesReachTheCollector(t *testing.T) {
	var mu sync.Mutex
	var got []*coltrace.ExportTraceServiceRequest
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/v1/traces" {
			return // the metrics, which TestGenAIMetricsReachTheCollector reads
		}
		var req coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			t.Errorf("the collector got no OTLP protobuf: %v", err)
		}
		mu.Lock()
		got = append(got, &req)
		mu.Unlock()
	}))
	defer collector.Close()
	fake := fakes.NewOpenAI(t, fakes.Config{})
	s := startStack(t, oneBackend("openai", fake.BaseURL(), fmt.Sprintf("telemetry: {otlp_endpoint: %q}\n", collector.URL+"/v1/traces")))
	if _, err := client(s, "").CreateChatCompletion(context.Background(), chatReq("hello there")); err != nil {
		t.Fatal(err)
	}
	s.settled(t)                             // the call span and metrics follow the response
	if err := s.app.shutdown(); err != nil { // flushes the exporter
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	names := map[string]map[string]bool{} // span name → its attribute keys
	traces := map[string]bool{}
	for _, req := range got {
		for _, rs := range req.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					traces[fmt.Sprintf("%x", sp.GetTraceId())] = true
					keys := map[string]bool{}
					for _, kv := range sp.GetAttributes() {
						keys[kv.GetKey()] = true
					}
					names[sp.GetName()] = keys
				}
			}
		}
	}
	if len(traces) != 1 {
		t.Errorf("%d traces for one call", len(traces))
	}
	for _, name := range []string{"POST /v1/chat/completions", "stage cache", "stage neural", "attempt up"} {
		if _, ok := names[name]; !ok {
			t.Errorf("no span %q among %v", name, names)
		}
	}
	// The billed figure is on the call's span; a stage's and an attempt's own figures have names
	// of their own, so a trace's sum of eoc.energy.joules counts the call once.
	for name, prefix := range map[string]string{"POST /v1/chat/completions": "eoc.energy.", "stage neural": "eoc.stage.", "attempt up": "eoc.attempt."} {
		for _, k := range []string{prefix + "joules", prefix + "grade", prefix + "coverage", prefix + "method", "gen_ai.request.model"} {
			if !names[name][k] {
				t.Errorf("span %q lacks %s", name, k)
			}
		}
		if prefix != "eoc.energy." && names[name]["eoc.energy.joules"] {
			t.Errorf("span %q carries the billed eoc.energy.joules as well", name)
		}
	}
}

// With telemetry.otlp_endpoint set, the wired stack exports the GenAI metrics of its calls to the
// collector's metrics URL: token usage by type, time to first token of a stream, time per output
// token (the fake llama.cpp's timings), and the energy under eoc.energy.*.
func TestGenAIMetricsReachTheCollector(t *testing.T) {
	collector := fakes.NewOTLPCollector(t)
	fake := fakes.NewOpenAI(t, fakes.Config{})
	s := startStack(t, oneBackend("llamacpp", fake.BaseURL(), fmt.Sprintf("telemetry: {otlp_endpoint: %q}\n", collector.URL+"/v1/traces")))
	c := client(s, "")
	if _, err := c.CreateChatCompletion(context.Background(), chatReq("hello there")); err != nil {
		t.Fatal(err)
	}
	streamChat(t, c, "stream this")
	s.settled(t)                             // the call span and metrics follow the response
	if err := s.app.shutdown(); err != nil { // flushes the exporters
		t.Fatal(err)
	}
	got := collector.Points()
	for _, name := range []string{"gen_ai.client.token.usage", "gen_ai.server.time_to_first_token",
		"gen_ai.server.time_per_output_token", "eoc.energy.joules", "eoc.energy.joules_per_token"} {
		points := got[name]
		if len(points) == 0 {
			t.Errorf("the collector got no %s; it got %v", name, got)
			continue
		}
		for _, p := range points {
			if p["gen_ai.request.model"] != fakes.DefaultModel {
				t.Errorf("%s: gen_ai.request.model %q, want %q", name, p["gen_ai.request.model"], fakes.DefaultModel)
			}
		}
	}
	types := map[string]bool{}
	for _, p := range got["gen_ai.client.token.usage"] {
		types[p["gen_ai.token.type"]] = true
		if p["gen_ai.operation.name"] != "chat" || p["gen_ai.provider.name"] != "eoc-proxy" {
			t.Errorf("gen_ai.client.token.usage point %v", p)
		}
	}
	if !types["input"] || !types["output"] {
		t.Errorf("gen_ai.token.type values %v, want input and output", types)
	}
}
