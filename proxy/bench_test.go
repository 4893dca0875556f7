package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/cascade/cache"
	"github.com/eoc-proxy/eoc-proxy/cascade/neural"
	"github.com/eoc-proxy/eoc-proxy/cascade/routing"
	"github.com/eoc-proxy/eoc-proxy/internal/testenv/coldbench"
	"github.com/eoc-proxy/eoc-proxy/internal/testenv/fakes"
)

// benchWriter is a ResponseWriter that keeps nothing between calls but its header map, so the
// allocations counted are the edge's own.
type benchWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *benchWriter) Header() http.Header  { return w.h }
func (w *benchWriter) WriteHeader(code int) { w.status = code }
func (w *benchWriter) Write(b []byte) (int, error) {
	w.n += len(b)
	return len(b), nil
}

// BenchmarkCacheHit runs a cache hit through the whole handler, as served (middleware, access log
// to io.Discard, metrics, request timeout, ledger callback), for profiling and counting
// allocations; scripts/bench.sh measures it from outside.
func BenchmarkCacheHit(b *testing.B) {
	router, err := routing.New([]routing.Route{{Name: "b", Patterns: []string{"known-*"}, Backend: nopBackend{}}}, routing.Options{})
	if err != nil {
		b.Fatal(err)
	}
	c := cascade.New(router, []cascade.Stage{cache.New(100, time.Hour), echoStage{}}, cascade.Options{StageWatts: 10, Logger: zerolog.Nop()})
	s := New(Options{Cascade: c, Logger: zerolog.New(io.Discard), Registry: prometheus.NewRegistry(), RequestTimeout: 300 * time.Second,
		Record: func(Call) error { return nil }})
	body := []byte(`{"model":"known-1","messages":[{"role":"user","content":"What is the capital of France?"}]}`)
	w := &benchWriter{h: http.Header{}}
	serve := func() {
		clear(w.h)
		w.status, w.n = 0, 0
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
		s.ServeHTTP(w, r)
		if w.status != http.StatusOK || w.n == 0 {
			b.Fatalf("status %d, %d bytes", w.status, w.n)
		}
	}
	serve() // the miss that fills the cache
	b.ReportAllocs()
	for b.Loop() {
		serve()
		if w.h.Get(HeaderStage) != "cache" {
			b.Fatalf("answered by %q, not the cache", w.h.Get(HeaderStage))
		}
	}
}

// BenchmarkFreshBody runs calls whose bodies the edge has not seen (the neural path's usual case:
// the decoded-body memo misses and the body is decoded) through the whole handler, answered by a
// stage in process, so the allocations counted are the edge's and the walk's, not a backend's.
func BenchmarkFreshBody(b *testing.B) {
	router, err := routing.New([]routing.Route{{Name: "b", Patterns: []string{"known-*"}, Backend: nopBackend{}}}, routing.Options{})
	if err != nil {
		b.Fatal(err)
	}
	c := cascade.New(router, []cascade.Stage{echoStage{}}, cascade.Options{StageWatts: 10, Logger: zerolog.Nop()})
	s := New(Options{Cascade: c, Logger: zerolog.New(io.Discard), Registry: prometheus.NewRegistry(), RequestTimeout: 300 * time.Second,
		Record: func(Call) error { return nil }})
	serveFresh(b, s, func(w *benchWriter) bool { return w.n > 0 })
}

// serveFresh serves s bodies it has not seen (more than the decoded-body memo holds, so every
// call misses it) until b is done; ok checks each response beside its 200.
func serveFresh(b *testing.B, s *Server, ok func(*benchWriter) bool) {
	bodies := make([][]byte, 2*decodedBodies)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, `{"model":"known-1","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Question %d?"}]}`, i)
	}
	w := &benchWriter{h: http.Header{}}
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		w.status, w.n = 0, 0
		s.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(bodies[i%len(bodies)])))
		if w.status != http.StatusOK || !ok(w) {
			b.Fatalf("status %d, %d bytes, backend %q", w.status, w.n, w.h.Get(HeaderBackend))
		}
		i++
	}
}

// BenchmarkFreshNeural runs calls of bodies the edge has not seen to a backend in process
// through the neural stage (no meter): the edge's work on a neural call, its backend headers,
// usage and per-token metrics included.
func BenchmarkFreshNeural(b *testing.B) {
	router, err := routing.New([]routing.Route{{Name: "b", Patterns: []string{"known-*"}, Backend: fakes.AnswerBackend{}}}, routing.Options{})
	if err != nil {
		b.Fatal(err)
	}
	c := cascade.New(router, []cascade.Stage{neural.New(router, nil)}, cascade.Options{StageWatts: 10, Logger: zerolog.Nop()})
	s := New(Options{Cascade: c, Logger: zerolog.New(io.Discard), Registry: prometheus.NewRegistry(), RequestTimeout: 300 * time.Second,
		Record: func(Call) error { return nil }})
	serveFresh(b, s, func(w *benchWriter) bool { return w.h.Get(HeaderBackend) == "b" })
}

// BenchmarkAccessLog writes a neural call's access-log line with a logger shaped as serve's
// (a timestamp, the component field) to io.Discard: the line's cost on the request path, which
// is all of it, since serve's writer takes the line off the path (cmd/eoc-proxy lineWriter).
func BenchmarkAccessLog(b *testing.B) {
	s := &Server{log: zerolog.New(io.Discard).With().Timestamp().Str("component", "proxy").Logger()}
	ri := &requestInfo{Context: b.Context(), id: "req_0123456789abcdef"}
	ri.sw.status, ri.sw.bytes = http.StatusOK, 812
	c := &Call{Stage: "neural", Backend: "ollama"}
	c.Energy.Joules, c.Energy.Grade, c.Energy.Method = 12.345678, "estimated", "process-cpu"
	ri.fields = logFields{tenant: "key_abc", model: "qwen3:0.6b", call: c}
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	start := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		s.accessLog(ri, r, start)
	}
}

// BenchmarkCold serves the calls of BenchmarkFreshNeural and BenchmarkCacheHit with the CPU's
// caches evicted before each (coldbench), as the server runs them between other
// processes' work: call-ns is the median of the calls' own times, which a warm loop understates
// several times.
func BenchmarkCold(b *testing.B) {
	router, err := routing.New([]routing.Route{{Name: "b", Patterns: []string{"known-*"}, Backend: fakes.AnswerBackend{}}}, routing.Options{})
	if err != nil {
		b.Fatal(err)
	}
	cold := func(b *testing.B, s *Server, body func(i int) []byte, stage string) {
		w := &benchWriter{h: http.Header{}}
		t := coldbench.New()
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body(i)))
			i++
			w.h = http.Header{} // as net/http makes one a response
			w.status, w.n = 0, 0
			t.Time(b, func() { s.ServeHTTP(w, r) })
			if w.status != http.StatusOK || w.h.Get(HeaderStage) != stage {
				b.Fatalf("status %d, stage %q", w.status, w.h.Get(HeaderStage))
			}
		}
		t.Report(b, "call-ns")
	}
	server := func(stages ...cascade.Stage) *Server {
		c := cascade.New(router, stages, cascade.Options{StageWatts: 10, Logger: zerolog.Nop()})
		return New(Options{Cascade: c, Logger: zerolog.New(io.Discard), Registry: prometheus.NewRegistry(), RequestTimeout: 300 * time.Second,
			Record: func(Call) error { return nil }})
	}
	const system = "You are a helpful assistant. Be brief."
	fresh := func(i int) []byte {
		return fmt.Appendf(nil, `{"model":"known-1","messages":[{"role":"system","content":"%s"},{"role":"user","content":"Please explain in two sentences how brato glai %d relates to stou ka fe ni stra."}],"max_tokens":64}`, system, i)
	}
	b.Run("fresh-neural", func(b *testing.B) {
		cold(b, server(neural.New(router, nil)), fresh, "neural")
	})
	b.Run("cache-hit", func(b *testing.B) {
		s := server(cache.New(100, time.Hour), neural.New(router, nil))
		serve(s, string(fresh(0))) // the miss that fills the cache
		cold(b, s, func(int) []byte { return fresh(0) }, "cache")
	})
}
