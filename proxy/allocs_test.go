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
	"github.com/eoc-proxy/eoc-proxy/cascade/routing"
)

// servedAllocs is the allocations of one call of body i through s's whole handler (as
// BenchmarkCacheHit serves it), the request built beforehand.
func servedAllocs(t *testing.T, s *Server, body func(i int) []byte, stage string) float64 {
	t.Helper()
	const runs = 200
	reqs := make([]*http.Request, runs+1)
	for i := range reqs {
		reqs[i] = httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body(i)))
	}
	w := &benchWriter{h: http.Header{}}
	i := 0
	n := testing.AllocsPerRun(runs, func() {
		clear(w.h)
		w.status, w.n = 0, 0
		s.ServeHTTP(w, reqs[i])
		i++
	})
	if w.status != http.StatusOK || w.h.Get(HeaderStage) != stage {
		t.Fatalf("status %d, stage %q; want 200 from %s", w.status, w.h.Get(HeaderStage), stage)
	}
	return n
}

func allocServer(t *testing.T, stages ...cascade.Stage) *Server {
	t.Helper()
	router, err := routing.New([]routing.Route{{Name: "b", Patterns: []string{"known-*"}, Backend: nopBackend{}}}, routing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := cascade.New(router, stages, cascade.Options{StageWatts: 10, Logger: zerolog.Nop()})
	return New(Options{Cascade: c, Logger: zerolog.New(io.Discard), Registry: prometheus.NewRegistry(), RequestTimeout: 300 * time.Second,
		Record: func(Call) error { return nil }})
}

// TestCacheHitAllocations bounds what a cache hit allocates through the whole handler (the
// request's own allocations, made by the server's connection, left out): the decoded-body memo
// keeps the request with its key, the routing context is the edge's, the answer is appended,
// the request timeout is not armed (nothing waits).
func TestCacheHitAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	s := allocServer(t, cache.New(100, time.Hour), echoStage{})
	body := []byte(`{"model":"known-1","messages":[{"role":"user","content":"What is the capital of France?"}]}`)
	if code := serve(s, string(body)); code != http.StatusOK { // the miss that fills the cache
		t.Fatalf("status %d", code)
	}
	const most = 13
	n := servedAllocs(t, s, func(int) []byte { return body }, "cache")
	t.Logf("%.0f allocations", n)
	if n > most {
		t.Errorf("a cache hit allocates %.0f objects, want at most %d", n, most)
	}
}

// TestFreshBodyAllocations bounds what a call of a body the edge has not seen allocates, answered
// by a stage in process: the body decodes in one pass into the memo's entry, its raw values in place.
func TestFreshBodyAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	s := allocServer(t, echoStage{})
	const most = 20
	n := servedAllocs(t, s, func(i int) []byte {
		return fmt.Appendf(nil, `{"model":"known-1","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Question %d?"}]}`, i)
	}, "echo")
	t.Logf("%.0f allocations", n)
	if n > most {
		t.Errorf("a fresh body allocates %.0f objects, want at most %d", n, most)
	}
}
