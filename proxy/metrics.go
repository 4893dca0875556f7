package proxy

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/metric"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/energy"
	"github.com/eoc-proxy/eoc-proxy/internal/cowmap"
	"github.com/eoc-proxy/eoc-proxy/telemetry/genai"
)

// metrics are the edge's Prometheus series. Model labels only carry models a backend lists
// (modelLabels); every other name is "other", so a client cannot grow the series by inventing
// names.
type metrics struct {
	labels   *modelLabels
	series   cowmap.Map[callKey, callSeries]           // a call's series, by labels: one map lookup, no lock,
	stages   cowmap.Map[stageKey, prometheus.Observer] // instead of WithLabelValues per series per call
	requests *prometheus.CounterVec
	joules   *prometheus.CounterVec
	saved    *prometheus.CounterVec
	stage    *prometheus.HistogramVec
	overhead prometheus.Histogram
	inFlight prometheus.Gauge
	calls    *genai.Metrics // tokens, time to first token, time per token, joules per token
}

func newMetrics(reg prometheus.Registerer, router cascade.Router, meters metric.MeterProvider) *metrics {
	m := &metrics{
		series: cowmap.Map[callKey, callSeries]{Max: maxChildren},
		stages: cowmap.Map[stageKey, prometheus.Observer]{Max: maxChildren},
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eoc_requests_total",
			Help: "Chat completion and embeddings requests by answering stage, model and HTTP status."}, []string{"stage", "model", "status"}),
		joules: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eoc_joules_total",
			Help: "Joules spent answering, by stage, model, grade (measured or estimated) and coverage (whole, or partial: a part such as the GPU has no figure)."},
			[]string{"stage", "model", "grade", "coverage"}),
		saved: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eoc_joules_saved_total",
			Help: "Joules that memoized answers saved: what their original answers cost."}, []string{"stage", "model"}),
		stage: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "eoc_stage_duration_seconds",
			Help: "Time each stage attempt took, by stage and outcome (hit, miss, error).", Buckets: prometheus.ExponentialBuckets(0.00001, 4, 12)},
			[]string{"stage", "outcome"}),
		overhead: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "eoc_proxy_overhead_seconds",
			Help: "Time of a request not spent in the answering stage: decoding, routing, misses, writing.", Buckets: prometheus.ExponentialBuckets(0.00001, 4, 10)}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "eoc_requests_in_flight", Help: "Chat completion and embeddings requests being served."}),
	}
	reg.MustRegister(m.requests, m.joules, m.saved, m.stage, m.overhead, m.inFlight)
	m.labels = newModelLabels(nil)
	if router != nil {
		m.labels = newModelLabels(router)
	}
	// observe hands genai the model labelled already.
	calls, err := genai.New(reg, meters, func(label string) string { return label })
	if err != nil {
		panic(err) // a series registered twice, as MustRegister
	}
	m.calls = calls
	if router != nil {
		for _, name := range router.Names() {
			reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "eoc_backend_up",
				Help:        "1 while a backend takes calls, 0 while it is ejected after failed attempts.",
				ConstLabels: prometheus.Labels{"backend": name}}, func() float64 {
				if router.Up(name) {
					return 1
				}
				return 0
			}))
		}
	}
	return m
}

// label is model's metric label (model itself without metrics).
func (m *metrics) label(model string) string {
	if m == nil {
		return model
	}
	return m.labels.label(model)
}

// observe counts one call c, with e its final figure (counted when a figure came back), under
// the metric label model (label's), total its time at the edge.
func (m *metrics) observe(c *Call, e energy.Figure, model string, total time.Duration) {
	if m == nil {
		return
	}
	stage, attempts, answered, status := c.Stage, c.stages, c.answered, c.Status
	m.calls.Observe(context.Background(), genai.Call{Operation: c.op, Model: model, Backend: c.Backend, Stage: stage, Status: status,
		Streamed: c.streamed, PromptTokens: c.promptTokens, CompletionTokens: c.tokens, FirstToken: c.firstToken, Duration: total,
		Timings: c.timings, Energy: e})
	k := callKey{stage: stage, model: model, status: status, answered: answered, saved: answered && e.Saved > 0}
	if answered {
		k.grade, k.coverage = string(e.Grade), e.Coverage
	}
	cs := m.series.Of(k, m.seriesOf)
	cs.requests.Inc()
	var answering time.Duration
	for i, a := range attempts {
		outcome := "error"
		switch {
		case a.Err == nil:
			outcome, answering = "hit", a.Duration
		case errors.Is(a.Err, cascade.ErrMiss):
			outcome = "miss"
		case i == len(attempts)-1:
			answering = a.Duration
		}
		m.stages.Of(stageKey{a.Stage, outcome}, m.stageSeries).Observe(a.Duration.Seconds())
	}
	if k.answered {
		cs.joules.Add(e.Joules)
	}
	if k.saved {
		cs.saved.Add(e.Saved)
	}
	if len(attempts) > 0 {
		m.overhead.Observe((total - answering).Seconds())
	}
}

// callKey is the labels of the series observe counts for every call: eoc_requests_total's, and
// for a call answered, eoc_joules_total's and (with a saving) eoc_joules_saved_total's.
type callKey struct {
	stage, model, grade, coverage string
	status                        int
	answered, saved               bool
}

// callSeries are a callKey's children: requests always, joules and saved when the key says the
// call counts them (nil otherwise, so that no empty series appears).
type callSeries struct {
	requests, joules, saved prometheus.Counter
}

func (m *metrics) seriesOf(k callKey) callSeries {
	cs := callSeries{requests: m.requests.WithLabelValues(k.stage, k.model, strconv.Itoa(k.status))}
	if k.answered {
		cs.joules = m.joules.WithLabelValues(k.stage, k.model, k.grade, k.coverage)
	}
	if k.saved {
		cs.saved = m.saved.WithLabelValues(k.stage, k.model)
	}
	return cs
}

type stageKey struct{ stage, outcome string }

func (m *metrics) stageSeries(k stageKey) prometheus.Observer {
	return m.stage.WithLabelValues(k.stage, k.outcome)
}

// maxChildren bounds each children cache. The labels are bounded already (models by
// modelLabels, stages and backends configured, statuses and outcomes fixed words); past the
// bound a call looks its children up in the vectors, as without the cache.
const maxChildren = 4096

// callIn and callOut count a call in eoc_requests_in_flight.
func (m *metrics) callIn() {
	if m != nil {
		m.inFlight.Inc()
	}
}

func (m *metrics) callOut() {
	if m != nil {
		m.inFlight.Dec()
	}
}

func metricsHandler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}
