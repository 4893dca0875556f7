// Package proxy is eoc-proxy's HTTP edge: one path of admission, cascade walk and settlement that every wire dialect (OpenAI chat first) and embeddings share, with their streams, X-EOC headers and errors.
package proxy

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/proxy/dialect"
)

// DefaultMaxBodyBytes is Options.MaxBodyBytes when it is not positive.
const DefaultMaxBodyBytes = 10 << 20

// Options configure the HTTP edge.
type Options struct {
	Cascade        *cascade.Cascade
	Logger         zerolog.Logger
	MaxBodyBytes   int64
	RequestTimeout time.Duration
	// BodyTimeout bounds reading a request's body, so a client that trickles it cannot hold a
	// connection for ever (0: 30s). It is a per-request read deadline, not http.Server's
	// ReadTimeout, which would also cut long streams.
	BodyTimeout time.Duration
	// StreamIdle bounds each chunk's write to a client that stopped reading (0: 60s).
	StreamIdle time.Duration
	// Keys are the proxy's own API keys; none means auth is off.
	Keys []APIKey
	// Registry, when set, gets the edge's metrics and is served on GET /metrics.
	Registry *prometheus.Registry
	// MetricsNeedKey makes GET /metrics take a key like the API when Keys are set; by default it
	// is open, for a scraper on a private network (config: auth.metrics_need_key).
	MetricsNeedKey bool
	// Record, when set, is called once for every call that reached the cascade (streams and
	// client disconnects included) before its response or trailers are written: the ledger.
	// A call whose figure was provisional is recorded so, and once it settles, Record is called
	// again with its settlement (Call.Settles set), after the response. An error is logged; the
	// call goes on.
	Record func(Call) error
	// SharedBudgets, when set, holds the budgets' figures for every replica (Redis); the
	// edge falls back to its own while it cannot answer.
	SharedBudgets SharedBudgets
	// SharedLimits, likewise, counts the keys' rate limits for every replica.
	SharedLimits SharedLimits
	// AdminKeyIDs are the ids of the Keys that may open GET /ui and its data (config:
	// auth.admin_keys). With Keys set and none of them an admin's, the page is closed to all.
	AdminKeyIDs []string
	// Counters, when set, reports the energy counters' liveness for the page (cmd hands it the
	// meter's own report; the edge does not import the meter).
	Counters func() []Counter
	// Tracing, when set, gets a span per call with a child per stage tried and per backend
	// attempt, carrying the energy figure (config: telemetry). Nil traces nothing; a client's
	// traceparent is still passed upstream.
	Tracing trace.TracerProvider
	// Meters, when set, gets each call's OpenTelemetry GenAI metrics (token usage, time to first
	// token, time per output token) and its energy, beside the Prometheus series in Registry
	// (config: telemetry). Nil exports none.
	Meters metric.MeterProvider
	// Dialects are more chat-like wire formats, each served at its POST path (the key) through
	// the same admission, walk and settlement as OpenAI's chat, which is always served at
	// /v1/chat/completions.
	Dialects map[string]dialect.Dialect
}

// Server serves the OpenAI-compatible API. It is safe for concurrent use.
type Server struct {
	opts    Options
	cascade *cascade.Cascade
	log     zerolog.Logger
	// handler is the edge middleware around router, whose requests take their routing context
	// from routes.
	handler http.Handler
	router  chi.Router
	routes  sync.Pool
	keys    *keyring
	budgets *budgetBook
	limits  *limiter
	metrics *metrics
	ui      *uiStats
	tracer  trace.Tracer // nil: no spans
	// stages opens the cascade's spans of each call (cascade.Request.Tracer); nil without tracer.
	stages  cascade.Tracer
	decoded *decodedChats
	calls   *callsTable
	// dialects are the chat-like routes' wire formats by path, paths their order; fixed once New
	// returns, so the handlers and middleware read them without a lock.
	dialects map[string]dialect.Dialect
	paths    []string
	// settling counts the calls whose figures are settling after their responses (Close).
	settling sync.WaitGroup
	// handling counts the requests whose handlers have not returned (WaitReported).
	handling sync.WaitGroup
	// settleMu guards settleClosed, set by Close, and every settling.Add, made only before it.
	settleMu     sync.Mutex
	settleClosed bool
}

// New builds the handler tree.
func New(o Options) *Server {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.StreamIdle <= 0 {
		o.StreamIdle = 60 * time.Second
	}
	if o.BodyTimeout <= 0 {
		o.BodyTimeout = 30 * time.Second
	}
	s := &Server{opts: o, cascade: o.Cascade, log: o.Logger, keys: newKeyring(o.Keys), ui: newUIStats(time.Now()),
		decoded: newDecodedChats(), calls: newCallsTable(), dialects: map[string]dialect.Dialect{}}
	s.route("/v1/chat/completions", chatDialect{decoded: s.decoded})
	for _, path := range slices.Sorted(maps.Keys(o.Dialects)) {
		s.route(path, o.Dialects[path])
	}
	budgets := map[string]Budget{}
	for _, k := range o.Keys {
		if k.Budget != nil {
			budgets[k.ID] = *k.Budget
		}
	}
	s.budgets = newBudgetBook(budgets, time.Now)
	s.budgets.setShared(o.SharedBudgets)
	s.limits = newLimiter(o.Keys, o.SharedLimits, time.Now)
	if o.Tracing != nil {
		s.tracer = o.Tracing.Tracer(tracerName)
		s.stages = stageTracer{s.tracer}
	}
	r := chi.NewRouter()
	r.Group(func(r chi.Router) {
		r.Use(s.traced, s.authenticate)
		for _, path := range s.paths {
			r.Post(path, s.serve(s.dialects[path]))
		}
		for _, path := range s.paths {
			if sr, ok := s.dialects[path].(storedResponses); ok {
				r.Get(path+"/{id}", s.storedResponse(sr.Retrieve))
				r.Delete(path+"/{id}", s.storedResponse(sr.Delete))
			}
			if tc, ok := s.dialects[path].(tokenCounter); ok {
				r.Post(path+"/count_tokens", s.countTokens(tc))
			}
		}
		r.Post("/v1/embeddings", s.embeddings)
		r.Get("/v1/models", s.models)
		r.Get("/v1/eoc/calls/{request_id}", s.callFigure)
	})
	s.uiRoutes(r)
	r.Get("/healthz", s.healthz)
	r.Get("/readyz", s.readyz)
	if o.Registry != nil {
		var router cascade.Router
		if o.Cascade != nil {
			router = o.Cascade.Router()
		}
		s.metrics = newMetrics(o.Registry, router, o.Meters)
		if o.MetricsNeedKey {
			r.With(s.authenticate).Handle("/metrics", metricsHandler(o.Registry))
		} else {
			r.Handle("/metrics", metricsHandler(o.Registry))
		}
	}
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		s.writeRouteError(w, r, &APIError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "not_found", Message: "no route for " + r.Method + " " + r.URL.Path})
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		s.writeRouteError(w, r, &APIError{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error", Code: "method_not_allowed", Message: r.Method + " is not allowed on " + r.URL.Path})
	})
	s.router = r
	s.routes.New = func() any { return chi.NewRouteContext() }
	s.handler = s.edge(r)
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	if err := s.cascade.Router().Ready(ctx); err != nil {
		s.log.Warn().Err(err).Msg("not ready")
		writeError(w, &APIError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "not_ready", Message: "a model has no live backend"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

type modelEntry struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	models, errs := s.cascade.Router().Models(ctx)
	for _, err := range errs {
		s.log.Warn().Err(err).Msg("listing models")
	}
	if s.metrics != nil {
		s.metrics.labels.set(models, len(errs) > 0)
	}
	data := make([]modelEntry, 0, len(models))
	for _, m := range models {
		data = append(data, modelEntry{ID: m.ID, Object: "model", OwnedBy: m.Backend})
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, &APIError{Status: 500, Type: "server_error", Message: "internal error", Err: err})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// storedResponses is a dialect that keeps its answers (the Responses API's store): GET and
// DELETE {path}/{id}.
type storedResponses interface {
	Retrieve(ctx context.Context, tenant, id string) ([]byte, *dialect.Error)
	Delete(ctx context.Context, tenant, id string) ([]byte, *dialect.Error)
}

// storedResponse serves one of storedResponses' operations for the caller's tenant, errors in
// the route's dialect.
func (s *Server) storedResponse(op func(ctx context.Context, tenant, id string) ([]byte, *dialect.Error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		lf := fields(r.Context())
		b, e := op(r.Context(), lf.tenant, chi.URLParam(r, "id"))
		if e != nil {
			apiErr := fromWire(e)
			lf.err = apiErr
			s.writeRouteError(w, r, apiErr)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(b)
	}
}

// tokenCounter is a dialect that counts a request's input tokens without walking the cascade
// (Anthropic's count_tokens): POST {path}/count_tokens. estimated says the count is an estimate,
// which the answer's X-EOC-Token-Count header then says.
type tokenCounter interface {
	CountTokens(body []byte) (out []byte, estimated bool, e *dialect.Error)
}

// HeaderTokenCount says how a count_tokens answer counted: "estimate" when it is one.
const HeaderTokenCount = "X-Eoc-Token-Count"

// countTokens serves tc's count: no budget, no cascade, the body read as a call's.
func (s *Server) countTokens(tc tokenCounter) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		lf := fields(r.Context())
		body, apiErr := s.readJSON(w, r)
		if apiErr == nil {
			out, estimated, e := tc.CountTokens(body)
			if e == nil {
				if estimated {
					w.Header().Set(HeaderTokenCount, "estimate")
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusOK)
				_, _ = w.Write(out)
				return
			}
			apiErr = fromWire(e)
		}
		lf.err = apiErr
		s.writeRouteError(w, r, apiErr)
	}
}
