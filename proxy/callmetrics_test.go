package proxy

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/cascade/routing"
	"github.com/eoc-proxy/eoc-proxy/energy"
	"github.com/eoc-proxy/eoc-proxy/proxy/dialect"
	"github.com/eoc-proxy/eoc-proxy/proxy/dialect/completions"
	"github.com/eoc-proxy/eoc-proxy/proxy/dialect/messages"
	"github.com/eoc-proxy/eoc-proxy/proxy/dialect/responses"
)

// modelStage answers like the neural stage: from backend "gpu", with usage, Ollama's timings and
// a final figure split between prompt and completion; embeddings likewise.
type modelStage struct{}

var modelFig = energy.Figure{Joules: 1, Grade: energy.Measured, Coverage: energy.CoverageWhole, Method: "rapl",
	PromptJoules: 0.35, CompletionJoules: 0.65, PromptTokens: 7, CompletionTokens: 5}

func (modelStage) Name() string { return "neural" }
func (modelStage) Serve(ctx context.Context, req *cascade.Request, _ cascade.Sink) (*cascade.Answer, error) {
	ans, _ := echoStage{}.Serve(ctx, req, nil)
	ans.Backend, ans.Energy = "gpu", modelFig
	ans.Usage = &cascade.Usage{PromptTokens: 7, CompletionTokens: 5, TotalTokens: 12}
	ans.Timings = &cascade.Timings{PromptN: 7, PredictedN: 5, Eval: 50 * time.Millisecond}
	ans.Attempts = []cascade.BackendAttempt{{Backend: "gpu", Outcome: "ok", Status: 200, Energy: modelFig}}
	return ans, nil
}
func (modelStage) ServeEmbed(context.Context, *cascade.EmbedCall) (*cascade.Embeddings, error) {
	return &cascade.Embeddings{Vectors: [][]float32{{1, 2}}, PromptTokens: 4, Backend: "gpu",
		Energy: energy.Figure{Joules: 0.2, Grade: energy.Measured, Coverage: energy.CoverageWhole, PromptJoules: 0.2, PromptTokens: 4}}, nil
}

// Every call of every dialect on the shared path (OpenAI chat, Responses, Messages, legacy
// completions and a made-up one), whole or streamed, and an embeddings call feed the per-token
// metrics once, where each is settled: tokens are its usage, a stream has a
// time to first token, the decode time per token is the backend's, the joules per token the
// figure's split; the OpenTelemetry instruments name each call's operation.
func TestCallMetricsEveryDialect(t *testing.T) {
	router, err := routing.New([]routing.Route{{Name: "gpu", Patterns: []string{"m1"}, Backend: nopBackend{}}}, routing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg, reader := prometheus.NewRegistry(), sdkmetric.NewManualReader()
	s := New(Options{Cascade: cascade.New(router, []cascade.Stage{modelStage{}}, cascade.Options{StageWatts: 10, Logger: zerolog.Nop()}),
		Logger: zerolog.Nop(), Registry: reg, Meters: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		Dialects: map[string]dialect.Dialect{"/v1/responses": responses.New(responses.Options{}), "/v1/messages": messages.New(),
			"/v1/completions": completions.New(), "/v1/plain": plainDialect{done: &atomic.Int32{}}}})
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	chatLike := []struct{ path, body string }{ // each whole, then streamed
		{"/v1/chat/completions", `{"model":"m1","messages":[{"role":"user","content":"a"}]`},
		{"/v1/responses", `{"model":"m1","input":"a"`},
		{"/v1/messages", `{"model":"m1","max_tokens":16,"messages":[{"role":"user","content":"a"}]`},
		{"/v1/completions", `{"model":"m1","prompt":"a"`},
		{"/v1/plain", `{"model":"m1","prompt":"a"`},
	}
	var calls []struct{ path, body string }
	for _, c := range chatLike {
		calls = append(calls, struct{ path, body string }{c.path, c.body + "}"}, struct{ path, body string }{c.path, c.body + `,"stream":true}`})
	}
	calls = append(calls, struct{ path, body string }{"/v1/embeddings", `{"model":"m1","input":"a"}`})
	const n = 5 // chat-like dialects
	start := time.Now()
	for _, c := range calls {
		resp, body := plainPost(t, http.MethodPost, srv.URL+c.path, c.body, nil) //nolint:bodyclose // plainPost closed it
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %d %s", c.path, c.body, resp.StatusCode, body)
		}
	}
	s.WaitReported() // the metrics follow each response
	type series struct {
		count uint64
		sum   float64 // a counter's value
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]series{} // name{labels}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			k := mf.GetName() + "{" + strings.Join(ls, ",") + "}"
			if h := m.GetHistogram(); h != nil {
				got[k] = series{h.GetSampleCount(), h.GetSampleSum()}
			} else {
				got[k] = series{0, m.GetCounter().GetValue()}
			}
		}
	}
	for k, want := range map[string]series{
		// 2n chat-like calls of 7+5 tokens and an embedding of 4
		"eoc_tokens_total{backend=gpu,kind=prompt,model=m1,stage=neural}":            {0, 2*n*7 + 4},
		"eoc_tokens_total{backend=gpu,kind=completion,model=m1,stage=neural}":        {0, 2 * n * 5},
		"eoc_time_per_output_token_seconds{backend=gpu,model=m1}":                    {2 * n, 2 * n * 0.01},
		"eoc_joules_per_token{backend=gpu,grade=measured,model=m1,phase=prompt}":     {2*n + 1, (2*n + 1) * 0.05},
		"eoc_joules_per_token{backend=gpu,grade=measured,model=m1,phase=completion}": {2 * n, 2 * n * 0.13},
	} {
		if g, ok := got[k]; !ok || g.count != want.count || math.Abs(g.sum-want.sum) > 1e-9 {
			t.Errorf("%s = %+v, want %+v", k, g, want)
		}
	}
	// The streams' times to their first chunk: together no longer than the whole test so far.
	if g := got["eoc_time_to_first_token_seconds{backend=gpu,model=m1}"]; g.count != n || g.sum <= 0 || g.sum > time.Since(start).Seconds() {
		t.Errorf("eoc_time_to_first_token_seconds = %+v, want the %d streams' samples", g, n)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	ops := map[string]uint64{} // gen_ai.operation.name → calls of input tokens
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[int64]); ok && m.Name == "gen_ai.client.token.usage" {
				for _, p := range h.DataPoints {
					op, _ := p.Attributes.Value("gen_ai.operation.name")
					typ, _ := p.Attributes.Value("gen_ai.token.type")
					if typ.AsString() == "input" {
						ops[op.AsString()] += p.Count
					}
				}
			}
		}
	}
	if ops["chat"] != 2*(n-1) || ops["text_completion"] != 2 || ops["embeddings"] != 1 || len(ops) != 3 {
		t.Errorf("gen_ai.client.token.usage calls by operation %v, want chat %d, text_completion 2, embeddings 1", ops, 2*(n-1))
	}
}
