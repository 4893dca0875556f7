package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestMeasureRedisCacheHit measures, in one run, what a cache hit costs from the shared tier
// (Redis, another process) against one from the in-process LRU: wall time per call over
// loopback HTTP and the hit's X-EOC-Joules. It is a measurement, not a check: run it with
//
//	EOC_MEASURE=1 go test ./cmd/eoc-proxy -run TestMeasureRedisCacheHit -v -count=1
func TestMeasureRedisCacheHit(t *testing.T) {
	if os.Getenv("EOC_MEASURE") == "" {
		t.Skip("a measurement: set EOC_MEASURE=1")
	}
	const n = 500
	a, b, _, _, _, _ := twoReplicas(t, replicaKeys)
	q := func(i int) string { return fmt.Sprint("measure ", i) }
	for i := range n { // answered on A: in Redis, not in B's LRU
		if st, _, _ := replicaCall(t, a, "key-a", q(i)); st != 200 {
			t.Fatal(st)
		}
	}
	run := func(want string) (p50, p90 time.Duration, joules float64) {
		ds := make([]time.Duration, n)
		for i := range n {
			start := time.Now()
			_, h, _ := replicaCall(t, b, "key-a", q(i))
			ds[i] = time.Since(start)
			if h.Get("X-EOC-Stage") != "cache" {
				t.Fatalf("%s: stage %q", want, h.Get("X-EOC-Stage"))
			}
			j, _ := strconv.ParseFloat(h.Get("X-EOC-Joules"), 64)
			joules += j
		}
		slices.Sort(ds)
		return ds[n/2], ds[n*9/10], joules / n
	}
	r50, r90, rj := run("redis") // first time on B: from Redis, then kept in B's LRU
	l50, l90, lj := run("lru")   // again: from B's LRU
	t.Logf("cache hit from Redis: p50 %v p90 %v, %.3g J per hit", r50, r90, rj)
	t.Logf("cache hit in-process: p50 %v p90 %v, %.3g J per hit", l50, l90, lj)
	t.Logf("a Redis hit costs %v more at the median", r50-l50)
}
