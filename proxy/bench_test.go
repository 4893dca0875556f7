package proxy

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/cascade/cache"
	"github.com/eoc-proxy/eoc-proxy/cascade/routing"
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
