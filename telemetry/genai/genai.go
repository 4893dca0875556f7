// Package genai counts what each finished call produced and cost per token (tokens, time to the
// first token, decode time per token and joules per token) as Prometheus series and as
// OpenTelemetry's GenAI metrics.
//
// The edge builds one Metrics at start and hands it the facts of every call once, where the call
// is settled (Observe); the package knows no HTTP. Every Prometheus label is bounded: models go
// through the label function the edge gives (its known models, else "other"), backends and
// stages are the configured ones, kinds, phases and grades are fixed words.
package genai

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/semconv/v1.40.0/genaiconv"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/energy"
	"github.com/eoc-proxy/eoc-proxy/internal/cowmap"
)

// Operation is the GenAI operation a call performed (gen_ai.operation.name).
type Operation = genaiconv.OperationNameAttr

// The operations the proxy's dialects serve: chat (OpenAI chat, Responses, Messages), legacy
// completions and embeddings.
const (
	Chat           Operation = "chat"
	TextCompletion Operation = "text_completion"
	Embeddings     Operation = "embeddings"
)

// Provider is the gen_ai.provider.name the proxy reports: the proxy itself, since the metrics
// describe what it served, whatever backend answered (eoc.backend names that).
const Provider genaiconv.ProviderNameAttr = "eoc-proxy"

// Other is the model label of a model the label function does not know, and of every model when
// there is no label function.
const Other = "other"

// Call is what one finished call produced, as the edge settled it.
type Call struct {
	Operation Operation // "" is Chat
	Model     string    // as asked; labelled through the Metrics' label function
	Backend   string    // the backend that answered; "" when a cheap stage did (no model ran)
	Stage     string    // the stage that answered
	Status    int       // the HTTP status the client got
	Streamed  bool
	// PromptTokens and CompletionTokens are the usage the client got.
	PromptTokens, CompletionTokens int
	// FirstToken is the time from the call's start to its first chunk written; 0 when none was
	// written or the call was not streamed.
	FirstToken time.Duration
	// Duration is the call's wall time, from its start to its settlement.
	Duration time.Duration
	// Timings are the backend's own counters (Ollama's eval_duration and eval_count, llama.cpp's
	// timings); nil when the backend reports none.
	Timings *cascade.Timings
	// Energy is the call's figure as settled (the final one when it settled after the response).
	Energy energy.Figure
}

// Metrics are the series and instruments. A nil *Metrics ignores calls. It is safe for
// concurrent use.
type Metrics struct {
	label func(string) string

	tokens *prometheus.CounterVec
	ttft   *prometheus.HistogramVec
	tpot   *prometheus.HistogramVec
	jpt    *prometheus.HistogramVec

	usage       genaiconv.ClientTokenUsage
	firstToken  genaiconv.ServerTimeToFirstToken
	perToken    genaiconv.ServerTimePerOutputToken
	joules      metric.Float64Counter
	joulesToken metric.Float64Histogram

	// The attribute sets of each instrument, by label values (attrSets).
	usageSets, timeSets, joulesSets, joulesTokenSets attrSets
	// The Prometheus children, by label values.
	tokenSeries      cowmap.Map[tokenKey, tokenCounters]
	ttftSeries       cowmap.Map[pairKey, prometheus.Observer]
	tpotSeries       cowmap.Map[pairKey, prometheus.Observer]
	joulesPerTokenOf cowmap.Map[jptKey, prometheus.Observer]
}

// tokenKey labels eoc_tokens_total's pair of series; output says the completion series counts
// (not for embeddings).
type tokenKey struct {
	model, backend, stage string
	output                bool
}

// tokenCounters are a tokenKey's children; completion is nil without output.
type tokenCounters struct{ prompt, completion prometheus.Counter }

type pairKey struct{ model, backend string }

type jptKey struct{ model, backend, phase, grade string }

// Buckets. The time ones are the GenAI conventions' advice, widened for small models on fast
// GPUs (a few ms a token) and for model loads (tens of seconds to the first token); joules per
// token span a small model on a GPU (~1e-4 J) to a large one on CPUs (~10 J).
var (
	tokenBuckets      = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
	firstTokenBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30, 60}
	perTokenBuckets   = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5}
	joulesBuckets     = prometheus.ExponentialBucketsRange(1e-5, 100, 15)
)

// New registers the Prometheus series on reg and makes the OpenTelemetry instruments from mp
// (nil: no OpenTelemetry metrics). label bounds the model label (nil: every model is Other).
func New(reg prometheus.Registerer, mp metric.MeterProvider, label func(model string) string) (*Metrics, error) {
	if label == nil {
		label = func(string) string { return Other }
	}
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := &Metrics{
		label:            label,
		tokenSeries:      cowmap.Map[tokenKey, tokenCounters]{Max: maxAttrSets},
		ttftSeries:       cowmap.Map[pairKey, prometheus.Observer]{Max: maxAttrSets},
		tpotSeries:       cowmap.Map[pairKey, prometheus.Observer]{Max: maxAttrSets},
		joulesPerTokenOf: cowmap.Map[jptKey, prometheus.Observer]{Max: maxAttrSets},
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eoc_tokens_total",
			Help: "Tokens of the calls answered, by model, backend (empty for a cheap stage), kind (prompt or completion) and the stage that answered: the usage the clients got."},
			[]string{"model", "backend", "kind", "stage"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "eoc_time_to_first_token_seconds",
			Help:    "Time from a streamed neural call's start to its first chunk written, by model and backend.",
			Buckets: firstTokenBuckets}, []string{"model", "backend"}),
		tpot: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "eoc_time_per_output_token_seconds",
			Help:    "Decode time per completion token of a neural call, by model and backend: the backend's own decode time over its tokens where it reports them, else a stream's time after its first chunk over the tokens after the first.",
			Buckets: perTokenBuckets}, []string{"model", "backend"}),
		jpt: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "eoc_joules_per_token",
			Help:    "A neural call's joules per token, by model, backend, phase (the figure's prompt part over its prompt tokens, or its completion part over its completion tokens) and grade (measured or estimated); from final figures only.",
			Buckets: joulesBuckets}, []string{"model", "backend", "phase", "grade"}),
	}
	for _, c := range []prometheus.Collector{m.tokens, m.ttft, m.tpot, m.jpt} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	meter := mp.Meter("github.com/eoc-proxy/eoc-proxy/telemetry/genai")
	var errs [5]error
	m.usage, errs[0] = genaiconv.NewClientTokenUsage(meter, metric.WithExplicitBucketBoundaries(tokenBuckets...))
	m.firstToken, errs[1] = genaiconv.NewServerTimeToFirstToken(meter, metric.WithExplicitBucketBoundaries(firstTokenBuckets...))
	m.perToken, errs[2] = genaiconv.NewServerTimePerOutputToken(meter, metric.WithExplicitBucketBoundaries(perTokenBuckets...))
	m.joules, errs[3] = meter.Float64Counter("eoc.energy.joules", metric.WithUnit("J"),
		metric.WithDescription("Joules spent answering, by stage, model, grade and coverage."))
	m.joulesToken, errs[4] = meter.Float64Histogram("eoc.energy.joules_per_token", metric.WithUnit("J/{token}"),
		metric.WithDescription("A neural call's joules per token, by model, backend, token type (the figure's input or output part over its tokens) and grade; from final figures only."),
		metric.WithExplicitBucketBoundaries(joulesBuckets...))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	m.usageSets.keys = []attribute.Key{"gen_ai.operation.name", "gen_ai.token.type", "gen_ai.request.model", "eoc.backend", "eoc.stage",
		"gen_ai.provider.name"}
	m.timeSets.keys = []attribute.Key{"gen_ai.operation.name", "gen_ai.request.model", "eoc.backend", "gen_ai.provider.name"}
	m.joulesSets.keys = []attribute.Key{"eoc.stage", "gen_ai.request.model", "eoc.energy.grade", "eoc.energy.coverage"}
	m.joulesTokenSets.keys = []attribute.Key{"gen_ai.request.model", "eoc.backend", "gen_ai.token.type", "eoc.energy.grade"}
	return m, nil
}

// maxAttrSets bounds each instrument's attrSets. The label values are bounded already (models
// through the label function, the rest configured names or fixed words); past the bound a set
// is built per call, as it would be without the cache.
const maxAttrSets = 4096

// attrSets keeps the attribute set of each tuple of label values an instrument recorded, so
// that a call does not copy, sort and hash the same attributes again. The values are in the
// order of keys; a value past len(keys) is unused. It is safe for concurrent use.
type attrSets struct {
	keys []attribute.Key
	mu   sync.RWMutex
	sets map[[6]string]attribute.Set
}

func (a *attrSets) of(vals [6]string) attribute.Set {
	a.mu.RLock()
	s, ok := a.sets[vals]
	a.mu.RUnlock()
	if ok {
		return s
	}
	kvs := make([]attribute.KeyValue, len(a.keys))
	for i, k := range a.keys {
		kvs[i] = k.String(vals[i])
	}
	s = attribute.NewSet(kvs...)
	a.mu.Lock()
	if a.sets == nil {
		a.sets = make(map[[6]string]attribute.Set)
	}
	if len(a.sets) < maxAttrSets {
		a.sets[vals] = s
	}
	a.mu.Unlock()
	return s
}

// Observe counts one finished call: its tokens; for a neural call that succeeded, its time to
// the first token (streamed only) and its decode time per token; for a neural call whose figure
// is final (not provisional) and split between prompt and completion, its joules per token in
// each phase; and its joules. Call it once per call, with the settled figure when the call's
// figure settled after its response.
func (m *Metrics) Observe(ctx context.Context, c Call) {
	if m == nil {
		return
	}
	model := c.Model
	if model != "" {
		model = m.label(model)
	}
	op := c.Operation
	if op == "" {
		op = Chat
	}
	neural, succeeded := c.Backend != "", c.Status < 400
	// The OpenTelemetry instruments are asked whether they record before their attributes are
	// looked up: without a meter provider (noop) none does.
	if c.PromptTokens > 0 || c.CompletionTokens > 0 {
		tc := m.tokenSeries.Of(tokenKey{model, c.Backend, c.Stage, op != Embeddings}, m.tokenCounters) // an embedding has no output tokens
		tc.prompt.Add(float64(max(c.PromptTokens, 0)))
		if tc.completion != nil {
			tc.completion.Add(float64(max(c.CompletionTokens, 0)))
		}
		if m.usage.Enabled(ctx) {
			in := [6]string{string(op), string(genaiconv.TokenTypeInput), model, c.Backend, c.Stage, string(Provider)}
			m.usage.RecordSet(ctx, int64(max(c.PromptTokens, 0)), m.usageSets.of(in))
			if op != Embeddings {
				out := in
				out[1] = string(genaiconv.TokenTypeOutput)
				m.usage.RecordSet(ctx, int64(max(c.CompletionTokens, 0)), m.usageSets.of(out))
			}
		}
	}
	times := [6]string{string(op), model, c.Backend, string(Provider)}
	if neural && succeeded && c.Streamed && c.FirstToken > 0 {
		m.ttftSeries.Of(pairKey{model, c.Backend}, m.ttftOf).Observe(c.FirstToken.Seconds())
		if m.firstToken.Enabled(ctx) {
			m.firstToken.RecordSet(ctx, c.FirstToken.Seconds(), m.timeSets.of(times))
		}
	}
	if d, ok := decodePerToken(c); neural && succeeded && ok {
		m.tpotSeries.Of(pairKey{model, c.Backend}, m.tpotOf).Observe(d.Seconds())
		if m.perToken.Enabled(ctx) {
			m.perToken.RecordSet(ctx, d.Seconds(), m.timeSets.of(times))
		}
	}
	f := c.Energy
	if f.IsZero() {
		return
	}
	grade := string(f.Grade)
	if m.joules.Enabled(ctx) {
		set := m.joulesSets.of([6]string{c.Stage, model, grade, f.Coverage})
		m.joules.Add(ctx, f.Joules, metric.WithAttributeSet(set))
	}
	if !neural || f.Provisional {
		return
	}
	prompt, completion := f.PerToken()
	otel := m.joulesToken.Enabled(ctx)
	if f.PromptTokens > 0 {
		m.joulesPerTokenOf.Of(jptKey{model, c.Backend, "prompt", grade}, m.jptOf).Observe(prompt)
		if otel {
			set := m.joulesTokenSets.of([6]string{model, c.Backend, string(genaiconv.TokenTypeInput), grade})
			m.joulesToken.Record(ctx, prompt, metric.WithAttributeSet(set))
		}
	}
	if f.CompletionTokens > 0 {
		m.joulesPerTokenOf.Of(jptKey{model, c.Backend, "completion", grade}, m.jptOf).Observe(completion)
		if otel {
			set := m.joulesTokenSets.of([6]string{model, c.Backend, string(genaiconv.TokenTypeOutput), grade})
			m.joulesToken.Record(ctx, completion, metric.WithAttributeSet(set))
		}
	}
}

// The children of the vectors, for children.of.

func (m *Metrics) tokenCounters(k tokenKey) tokenCounters {
	tc := tokenCounters{prompt: m.tokens.WithLabelValues(k.model, k.backend, "prompt", k.stage)}
	if k.output {
		tc.completion = m.tokens.WithLabelValues(k.model, k.backend, "completion", k.stage)
	}
	return tc
}

func (m *Metrics) ttftOf(k pairKey) prometheus.Observer {
	return m.ttft.WithLabelValues(k.model, k.backend)
}

func (m *Metrics) tpotOf(k pairKey) prometheus.Observer {
	return m.tpot.WithLabelValues(k.model, k.backend)
}

func (m *Metrics) jptOf(k jptKey) prometheus.Observer {
	return m.jpt.WithLabelValues(k.model, k.backend, k.phase, k.grade)
}

// decodePerToken is a call's decode time per completion token: the backend's own decode time
// over the tokens it generated where it reports them (Ollama's eval_duration / eval_count), else,
// for a stream, the time after its first chunk over the tokens after the first.
func decodePerToken(c Call) (time.Duration, bool) {
	if t := c.Timings; t != nil && t.Eval > 0 && t.PredictedN > 0 {
		return t.Eval / time.Duration(t.PredictedN), true
	}
	if c.Streamed && c.FirstToken > 0 && c.Duration > c.FirstToken && c.CompletionTokens > 1 {
		return (c.Duration - c.FirstToken) / time.Duration(c.CompletionTokens-1), true
	}
	return 0, false
}
