package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/config"
)

// fastUpstreamBody is what the fast fake upstream answers: a small OpenAI chat completion.
const fastUpstreamBody = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`

const benchRequest = `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"say hello"}],"max_tokens":16}`

// fastUpstream is the same fast fake for every hop measured: it drains the body and writes a
// fixed completion.
func fastUpstream(tb testing.TB) *httptest.Server {
	body := []byte(fastUpstreamBody)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	tb.Cleanup(srv.Close)
	return srv
}

// benchProxy serves eoc-proxy's handler, built from a config like the shipped one, over loopback.
func benchProxy(tb testing.TB, yaml string) *httptest.Server {
	tb.Helper()
	cfg, err := config.Parse([]byte(yaml), registry())
	if err != nil {
		tb.Fatal(err)
	}
	a, err := build(cfg, configFiles{}, zerolog.Nop())
	if err != nil {
		tb.Fatal(err)
	}
	srv := httptest.NewServer(a.handler)
	tb.Cleanup(func() { srv.Close(); a.close() })
	return srv
}

func benchClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}}
}

func post(tb testing.TB, c *http.Client, u string, body []byte, hdr http.Header) {
	req, _ := http.NewRequest(http.MethodPost, u, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		tb.Fatalf("status %d", resp.StatusCode)
	}
}

// BenchmarkNeuralOverhead measures one call three ways against the same fast fake upstream, in
// the same run: direct, through one bare httputil.ReverseProxy hop, and through eoc-proxy's neural
// path (cache off). scripts/bench.sh turns them into the ratio
// (eoc - direct) / (reverseproxy - direct); the target is at most 1.25.
func BenchmarkNeuralOverhead(b *testing.B) {
	up := fastUpstream(b)
	upURL, _ := url.Parse(up.URL)
	rp := httptest.NewServer(httputil.NewSingleHostReverseProxy(upURL))
	b.Cleanup(rp.Close)
	eoc := benchProxy(b, fmt.Sprintf(`
log_level: error
cascade: {stages: [neural]}
backends: [{name: fake, type: openai, url: %s/v1}]
`, up.URL))
	body := []byte(benchRequest)
	for _, tc := range []struct{ name, url string }{
		{"direct", up.URL + "/v1/chat/completions"},
		{"reverseproxy", rp.URL + "/v1/chat/completions"},
		{"eoc", eoc.URL + "/v1/chat/completions"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c := benchClient()
			post(b, c, tc.url, body, nil)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				post(b, c, tc.url, body, nil)
			}
		})
	}
}

// BenchmarkCacheHit compares a cache hit's throughput with a bare handler writing the same bytes
// and headers, both under parallel load. The target: bare ns/op ÷ cache ns/op ≥ 0.7.
func BenchmarkCacheHit(b *testing.B) {
	up := fastUpstream(b)
	eoc := benchProxy(b, fmt.Sprintf(`
log_level: error
cascade: {stages: [cache, neural]}
backends: [{name: fake, type: openai, url: %s/v1}]
`, up.URL))
	body := []byte(benchRequest)
	c := benchClient()
	post(b, c, eoc.URL+"/v1/chat/completions", body, nil) // fill the cache
	req, _ := http.NewRequest(http.MethodPost, eoc.URL+"/v1/chat/completions", bytes.NewReader(body))
	resp, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	hitBody, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.Header.Get("X-EOC-Stage") != "cache" {
		b.Fatalf("second call was not a cache hit: %v", resp.Header)
	}
	hitHeader := resp.Header.Clone()
	bare := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		h := w.Header()
		for k, v := range hitHeader {
			if k != "Date" {
				h[k] = v
			}
		}
		_, _ = w.Write(hitBody)
	}))
	b.Cleanup(bare.Close)
	for _, tc := range []struct{ name, url string }{{"bare", bare.URL}, {"cache", eoc.URL + "/v1/chat/completions"}} {
		b.Run(tc.name, func(b *testing.B) {
			c := benchClient()
			b.ReportAllocs()
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					post(b, c, tc.url, body, nil)
				}
			})
		})
	}
}

// BenchmarkCacheHitEntries shows that a hit does not grow with the number of cached entries.
func BenchmarkCacheHitEntries(b *testing.B) {
	up := fastUpstream(b)
	for _, n := range []int{10, 10000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			eoc := benchProxy(b, fmt.Sprintf(`
log_level: error
cascade: {stages: [cache, neural], cache: {max_entries: 20000}}
backends: [{name: fake, type: openai, url: %s/v1}]
`, up.URL))
			c := benchClient()
			for i := range n {
				post(b, c, eoc.URL+"/v1/chat/completions", []byte(strings.Replace(benchRequest, "say hello", fmt.Sprint("say ", i), 1)), nil)
			}
			body := []byte(strings.Replace(benchRequest, "say hello", "say 0", 1))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				post(b, c, eoc.URL+"/v1/chat/completions", body, nil)
			}
		})
	}
}

// BenchmarkSoak runs sustained mixed load (neural, cache hits, streams, errors) and reports the
// growth of goroutines and of the live heap between two points after warm-up: both should stay
// near zero however long it runs.
func BenchmarkSoak(b *testing.B) {
	up := fastUpstream(b)
	eoc := benchProxy(b, fmt.Sprintf(`
log_level: error
cascade: {stages: [cache, neural], cache: {max_entries: 1000}}
backends: [{name: fake, type: openai, url: %s/v1}]
`, up.URL))
	c := benchClient()
	round := func(i int) {
		body := []byte(strings.Replace(benchRequest, "say hello", fmt.Sprint("say ", i%2000), 1))
		post(b, c, eoc.URL+"/v1/chat/completions", body, nil)
		req, _ := http.NewRequest(http.MethodPost, eoc.URL+"/v1/chat/completions", strings.NewReader(`{"model":`))
		if resp, err := c.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
	}
	measure := func() (int, uint64) {
		runtime.GC()
		time.Sleep(50 * time.Millisecond)
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return runtime.NumGoroutine(), ms.HeapAlloc
	}
	for i := range 3000 { // warm-up: fill the cache to its bound
		round(i)
	}
	g0, h0 := measure()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		round(i)
	}
	b.StopTimer()
	g1, h1 := measure()
	b.ReportMetric(float64(g1-g0), "goroutines-growth")
	b.ReportMetric(float64(int64(h1)-int64(h0))/1024, "heap-growth-KiB")
}
