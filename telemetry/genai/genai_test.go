package genai

import (
	"context"
	"math"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/energy"
)

// known is the tests' label function: the models a backend lists keep their names.
func known(model string) string {
	if model == "llama3" || model == "tiny" {
		return model
	}
	return Other
}

type rig struct {
	reg    *prometheus.Registry
	reader *sdkmetric.ManualReader
	m      *Metrics
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{reg: prometheus.NewRegistry(), reader: sdkmetric.NewManualReader()}
	var err error
	r.m, err = New(r.reg, sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader)), known)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// series is one Prometheus series or OpenTelemetry point: a counter's (sum's) value, or a
// histogram's count and sum.
type series struct {
	value, sum float64
	count      uint64
}

// prom returns every series of name, keyed by its labels as "k=v,k=v" in name order.
func (r *rig) prom(t *testing.T, name string) map[string]series {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]series{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[labelKey(m.GetLabel())] = series{value: m.GetCounter().GetValue(),
				sum: m.GetHistogram().GetSampleSum(), count: m.GetHistogram().GetSampleCount()}
		}
	}
	return out
}

func labelKey(ls []*dto.LabelPair) string {
	var parts []string
	for _, l := range ls {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// otel returns every point of the instrument name, keyed by its attributes as labelKey keys them.
func (r *rig) otel(t *testing.T, name string) map[string]series {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]series{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					out[attrKey(p.Attributes)] = series{sum: float64(p.Sum), count: p.Count}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[attrKey(p.Attributes)] = series{sum: p.Sum, count: p.Count}
				}
			case metricdata.Sum[float64]:
				for _, p := range d.DataPoints {
					out[attrKey(p.Attributes)] = series{value: p.Value}
				}
			default:
				t.Fatalf("%s: unexpected data %T", name, m.Data)
			}
		}
	}
	return out
}

func attrKey(s attribute.Set) string {
	var parts []string
	for _, kv := range s.ToSlice() {
		parts = append(parts, string(kv.Key)+"="+kv.Value.String())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(1, math.Abs(b)) }

// wantSeries checks that got holds exactly the keys of want, with their values (Prometheus
// series and OpenTelemetry points alike).
func wantSeries(t *testing.T, name string, got map[string]series, want map[string]series) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d series %v, want %d %v", name, len(got), got, len(want), want)
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s{%s} missing; have %v", name, k, got)
			continue
		}
		if !near(g.value, w.value) || !near(g.sum, w.sum) || g.count != w.count {
			t.Errorf("%s{%s} = %+v, want %+v", name, k, g, w)
		}
	}
}

// measured is a measured, whole figure split between 20 prompt and 40 completion tokens.
var measured = energy.Figure{Joules: 3, Grade: energy.Measured, Coverage: energy.CoverageWhole, Method: "rapl+nvml",
	PromptJoules: 1, CompletionJoules: 2, PromptTokens: 20, CompletionTokens: 40, Split: "token-weight"}

// A whole (not streamed) neural call: its tokens are its usage, it has no time to first token,
// its decode time per token is Ollama's eval_duration over eval_count, and its joules per token
// are the figure's prompt part over its prompt tokens and completion part over its completion
// tokens.
func TestWholeCall(t *testing.T) {
	r := newRig(t)
	r.m.Observe(context.Background(), Call{Model: "llama3", Backend: "gpu0", Stage: "neural", Status: 200,
		PromptTokens: 20, CompletionTokens: 40, Duration: 2 * time.Second,
		Timings: &cascade.Timings{PromptN: 20, PredictedN: 40, Eval: 800 * time.Millisecond}, Energy: measured})

	wantSeries(t, "eoc_tokens_total", r.prom(t, "eoc_tokens_total"), map[string]series{
		"backend=gpu0,kind=prompt,model=llama3,stage=neural":     {value: 20},
		"backend=gpu0,kind=completion,model=llama3,stage=neural": {value: 40},
	})
	wantSeries(t, "ttft", r.prom(t, "eoc_time_to_first_token_seconds"), nil)
	wantSeries(t, "tpot", r.prom(t, "eoc_time_per_output_token_seconds"), map[string]series{
		"backend=gpu0,model=llama3": {count: 1, sum: 0.02},
	})
	wantSeries(t, "jpt", r.prom(t, "eoc_joules_per_token"), map[string]series{
		"backend=gpu0,grade=measured,model=llama3,phase=prompt":     {count: 1, sum: 1.0 / 20},
		"backend=gpu0,grade=measured,model=llama3,phase=completion": {count: 1, sum: 2.0 / 40},
	})

	base := "eoc.backend=gpu0,eoc.stage=neural,gen_ai.operation.name=chat,gen_ai.provider.name=eoc-proxy,gen_ai.request.model=llama3,"
	wantSeries(t, "usage", r.otel(t, "gen_ai.client.token.usage"), map[string]series{
		base + "gen_ai.token.type=input":  {count: 1, sum: 20},
		base + "gen_ai.token.type=output": {count: 1, sum: 40},
	})
	wantSeries(t, "ttft", r.otel(t, "gen_ai.server.time_to_first_token"), nil)
	wantSeries(t, "tpot", r.otel(t, "gen_ai.server.time_per_output_token"), map[string]series{
		"eoc.backend=gpu0,gen_ai.operation.name=chat,gen_ai.provider.name=eoc-proxy,gen_ai.request.model=llama3": {count: 1, sum: 0.02},
	})
	wantSeries(t, "joules", r.otel(t, "eoc.energy.joules"), map[string]series{
		"eoc.energy.coverage=whole,eoc.energy.grade=measured,eoc.stage=neural,gen_ai.request.model=llama3": {value: 3},
	})
	wantSeries(t, "joules per token", r.otel(t, "eoc.energy.joules_per_token"), map[string]series{
		"eoc.backend=gpu0,eoc.energy.grade=measured,gen_ai.request.model=llama3,gen_ai.token.type=input":  {count: 1, sum: 0.05},
		"eoc.backend=gpu0,eoc.energy.grade=measured,gen_ai.request.model=llama3,gen_ai.token.type=output": {count: 1, sum: 0.05},
	})
}

// A streamed neural call from a backend that reports no timings: its time to first token is the
// edge's, its decode time per token is the time after the first chunk over the tokens after the
// first, and an estimated figure's joules per token go under grade "estimated".
func TestStreamedCall(t *testing.T) {
	r := newRig(t)
	est := energy.Figure{Joules: 0.9, Grade: energy.Estimated, Coverage: energy.CoverageWhole, Method: "token-model",
		PromptJoules: 0.1, CompletionJoules: 0.8, PromptTokens: 10, CompletionTokens: 11}
	r.m.Observe(context.Background(), Call{Operation: TextCompletion, Model: "tiny", Backend: "api", Stage: "neural", Status: 200,
		Streamed: true, PromptTokens: 10, CompletionTokens: 11, FirstToken: 300 * time.Millisecond, Duration: 1300 * time.Millisecond,
		Energy: est})

	wantSeries(t, "eoc_tokens_total", r.prom(t, "eoc_tokens_total"), map[string]series{
		"backend=api,kind=prompt,model=tiny,stage=neural":     {value: 10},
		"backend=api,kind=completion,model=tiny,stage=neural": {value: 11},
	})
	wantSeries(t, "ttft", r.prom(t, "eoc_time_to_first_token_seconds"), map[string]series{
		"backend=api,model=tiny": {count: 1, sum: 0.3},
	})
	wantSeries(t, "tpot", r.prom(t, "eoc_time_per_output_token_seconds"), map[string]series{
		"backend=api,model=tiny": {count: 1, sum: 0.1},
	})
	wantSeries(t, "jpt", r.prom(t, "eoc_joules_per_token"), map[string]series{
		"backend=api,grade=estimated,model=tiny,phase=prompt":     {count: 1, sum: 0.01},
		"backend=api,grade=estimated,model=tiny,phase=completion": {count: 1, sum: 0.8 / 11},
	})
	wantSeries(t, "ttft", r.otel(t, "gen_ai.server.time_to_first_token"), map[string]series{
		"eoc.backend=api,gen_ai.operation.name=text_completion,gen_ai.provider.name=eoc-proxy,gen_ai.request.model=tiny": {count: 1, sum: 0.3},
	})
}

// A cache hit: its tokens count under its stage with no backend; no model ran, so it has no time
// to first token, no decode time and no joules per token, though it was streamed.
func TestCacheHit(t *testing.T) {
	r := newRig(t)
	r.m.Observe(context.Background(), Call{Model: "llama3", Stage: "cache", Status: 200, Streamed: true,
		PromptTokens: 20, CompletionTokens: 40, FirstToken: time.Millisecond, Duration: 2 * time.Millisecond,
		Energy: energy.Figure{Joules: 1e-6, Saved: 3, Grade: energy.Estimated, Coverage: energy.CoverageWhole, Method: "stage-model",
			PromptTokens: 20, CompletionTokens: 40, PromptJoules: 1e-7, CompletionJoules: 9e-7}})

	wantSeries(t, "eoc_tokens_total", r.prom(t, "eoc_tokens_total"), map[string]series{
		"backend=,kind=prompt,model=llama3,stage=cache":     {value: 20},
		"backend=,kind=completion,model=llama3,stage=cache": {value: 40},
	})
	wantSeries(t, "ttft", r.prom(t, "eoc_time_to_first_token_seconds"), nil)
	wantSeries(t, "tpot", r.prom(t, "eoc_time_per_output_token_seconds"), nil)
	wantSeries(t, "jpt", r.prom(t, "eoc_joules_per_token"), nil)
	wantSeries(t, "joules", r.otel(t, "eoc.energy.joules"), map[string]series{
		"eoc.energy.coverage=whole,eoc.energy.grade=estimated,eoc.stage=cache,gen_ai.request.model=llama3": {value: 1e-6},
	})
}

// A provisional figure gives no joules per token (its settled figure will, when the edge observes
// the call with it); a model no backend lists is "other"; a failed call has no timings.
func TestProvisionalOtherAndFailed(t *testing.T) {
	r := newRig(t)
	prov := measured
	prov.Provisional = true
	r.m.Observe(context.Background(), Call{Model: "made-up-by-a-client", Backend: "gpu0", Stage: "neural", Status: 200,
		Streamed: true, PromptTokens: 20, CompletionTokens: 40, FirstToken: time.Second, Duration: 2 * time.Second, Energy: prov})
	r.m.Observe(context.Background(), Call{Model: "llama3", Backend: "gpu0", Stage: "neural", Status: 502,
		Streamed: true, FirstToken: time.Second, Duration: 2 * time.Second,
		Timings: &cascade.Timings{PredictedN: 3, Eval: time.Second}})

	wantSeries(t, "eoc_tokens_total", r.prom(t, "eoc_tokens_total"), map[string]series{
		"backend=gpu0,kind=prompt,model=other,stage=neural":     {value: 20},
		"backend=gpu0,kind=completion,model=other,stage=neural": {value: 40},
	})
	wantSeries(t, "ttft", r.prom(t, "eoc_time_to_first_token_seconds"), map[string]series{
		"backend=gpu0,model=other": {count: 1, sum: 1},
	})
	wantSeries(t, "jpt", r.prom(t, "eoc_joules_per_token"), nil)
	wantSeries(t, "joules per token", r.otel(t, "eoc.energy.joules_per_token"), nil)
}

// An embeddings call counts its input tokens only, and its joules per input token.
func TestEmbeddings(t *testing.T) {
	r := newRig(t)
	r.m.Observe(context.Background(), Call{Operation: Embeddings, Model: "tiny", Backend: "gpu0", Stage: "neural", Status: 200,
		PromptTokens: 8, Duration: time.Second, Energy: energy.Figure{Joules: 0.4, Grade: energy.Measured, Coverage: energy.CoverageWhole,
			PromptJoules: 0.4, PromptTokens: 8}})
	wantSeries(t, "eoc_tokens_total", r.prom(t, "eoc_tokens_total"), map[string]series{
		"backend=gpu0,kind=prompt,model=tiny,stage=neural": {value: 8},
	})
	wantSeries(t, "jpt", r.prom(t, "eoc_joules_per_token"), map[string]series{
		"backend=gpu0,grade=measured,model=tiny,phase=prompt": {count: 1, sum: 0.05},
	})
	wantSeries(t, "usage", r.otel(t, "gen_ai.client.token.usage"), map[string]series{
		"eoc.backend=gpu0,eoc.stage=neural,gen_ai.operation.name=embeddings,gen_ai.provider.name=eoc-proxy,gen_ai.request.model=tiny,gen_ai.token.type=input": {count: 1, sum: 8},
	})
}

// Without a label function every model is "other"; a nil *Metrics ignores calls; the series
// cannot be registered twice on one registry.
func TestBounds(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.Observe(context.Background(), Call{Model: "llama3", Stage: "kv", PromptTokens: 1, CompletionTokens: 2})
	if got := testCount(t, reg, "eoc_tokens_total", Other); got != 2 {
		t.Errorf("%d series labelled other, want 2", got)
	}
	var none *Metrics
	none.Observe(context.Background(), Call{Model: "x", PromptTokens: 1})
	if _, err := New(reg, nil, nil); err == nil {
		t.Error("the series registered twice on one registry")
	}
}

func testCount(t *testing.T, reg *prometheus.Registry, name, model string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "model" && l.GetValue() == model {
					n++
				}
			}
		}
	}
	return n
}

// BenchmarkObserve is the cost a settled call pays for the per-token metrics, with an OpenTelemetry
// meter provider.
func BenchmarkObserve(b *testing.B) {
	m, err := New(prometheus.NewRegistry(), sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())), known)
	if err != nil {
		b.Fatal(err)
	}
	c := Call{Model: "llama3", Backend: "gpu0", Stage: "neural", Status: 200, Streamed: true, PromptTokens: 20, CompletionTokens: 40,
		FirstToken: 100 * time.Millisecond, Duration: time.Second, Timings: &cascade.Timings{PredictedN: 40, Eval: 800 * time.Millisecond}, Energy: measured}
	b.ReportAllocs()
	for b.Loop() {
		m.Observe(context.Background(), c)
	}
}

// BenchmarkObservePrometheus is the same without OpenTelemetry.
func BenchmarkObservePrometheus(b *testing.B) {
	m, err := New(prometheus.NewRegistry(), nil, known)
	if err != nil {
		b.Fatal(err)
	}
	c := Call{Model: "llama3", Backend: "gpu0", Stage: "neural", Status: 200, Streamed: true, PromptTokens: 20, CompletionTokens: 40,
		FirstToken: 100 * time.Millisecond, Duration: time.Second, Timings: &cascade.Timings{PredictedN: 40, Eval: 800 * time.Millisecond}, Energy: measured}
	b.ReportAllocs()
	for b.Loop() {
		m.Observe(context.Background(), c)
	}
}

// TestAttrSets checks the cache of attribute sets: a tuple seen before gets the set its values
// make, and the cache stops growing at its bound while each tuple still gets its own set.
func TestAttrSets(t *testing.T) {
	a := attrSets{keys: []attribute.Key{"a", "b"}}
	want := attribute.NewSet(attribute.String("a", "x"), attribute.String("b", "y"))
	for range 2 {
		if got := a.of([6]string{"x", "y"}); !got.Equals(&want) {
			t.Fatalf("set %v, want %v", got.Encoded(attribute.DefaultEncoder()), want.Encoded(attribute.DefaultEncoder()))
		}
	}
	for i := range maxAttrSets + 10 {
		v := strings.Repeat("v", i%7) + string(rune('a'+i%26)) + strconv.Itoa(i)
		s := a.of([6]string{v, "y"})
		if got, _ := s.Value("a"); got.AsString() != v {
			t.Fatalf("tuple %d: a=%q, want %q", i, got.AsString(), v)
		}
	}
	if len(a.sets) != maxAttrSets {
		t.Fatalf("%d sets kept, want the bound %d", len(a.sets), maxAttrSets)
	}
}
