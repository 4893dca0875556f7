//go:build linux

package main

import (
	"strings"
	"testing"
	"time"
)

func table(t *testing.T, o *options, rs []result) string {
	t.Helper()
	var b strings.Builder
	if err := printTable(&b, o, []string{"cache"}, rs, 0); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// The table's cache-hit row gives the median ratio, the runs' range beside it, and marks the
// target met by the median, which is the host's: 0.8× on a small one, 0.95× on 16 CPUs.
func TestTableShowsTheRunsRange(t *testing.T) {
	hit := func(eoc, bare float64) result {
		return result{hit: true, eocRPS: eoc, bareRPS: bare, bareCPU: 1, hitCPU: 2}
	}
	for _, tc := range []struct {
		name string
		cpus int
		rs   []result
		want []string
	}{
		{"three runs", 2, []result{hit(74, 100), hit(90, 100), hit(81, 100)},
			[]string{"| 0.81× (runs 0.74–0.90) | ≥ 0.8× | yes |", "PASS cache-hit throughput"}},
		{"below", 2, []result{hit(79, 100), hit(60, 100), hit(85, 100)},
			[]string{"| 0.79× (runs 0.60–0.85) | ≥ 0.8× | **no** |", "FAIL cache-hit throughput"}},
		{"one run", 2, []result{hit(82, 100)}, []string{"| 0.82× | ≥ 0.8× | yes |"}},
		{"16 CPUs", 16, []result{hit(90, 100)}, []string{"| 0.90× | ≥ 0.95× | **no** |"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := table(t, &options{clients: 16, cpus: tc.cpus}, tc.rs)
			for _, want := range tc.want {
				if !strings.Contains(out, want) {
					t.Errorf("no %q in\n%s", want, out)
				}
			}
		})
	}
}

// The dialects rows compare each dialect's time added with chat's from the same rounds, the
// Responses row against its target; a dialect a run did not measure (a build without it) has
// no row. The stream rows give the first token beyond the floor against its target.
func TestTableDialectAndStreamRows(t *testing.T) {
	us := func(n int) time.Duration { return time.Duration(n) * time.Microsecond }
	q := func(p50 int) [2]time.Duration { return [2]time.Duration{us(p50), us(2 * p50)} }
	r := result{
		dial: map[string][2]time.Duration{"direct": q(1000), "hop": q(1200), "chat": q(1500), "responses": q(1540), "messages": q(1700)},
		first: map[string][2]time.Duration{"direct": q(500), "hop": q(700), "floor": q(750), "chat": q(900),
			"responses": q(950)},
		last: map[string][2]time.Duration{"direct": q(2000), "hop": q(2400), "floor": q(2600), "chat": q(3000),
			"responses": q(3100)},
	}
	out := table(t, &options{cpus: 2}, []result{r})
	for _, want := range []string{
		"| dialects, fresh prompts, shuffled rounds: chat, time added, median | 200 µs (hop) | 500 µs | 2.50× |",
		"| Responses (store: false) (/v1/responses), time added, median (p99 1080 µs) | 500 µs (chat, same rounds) | 540 µs | 1.08× | ≤ 1.10× chat | yes |",
		"| Anthropic Messages (/v1/messages), time added, median (p99 1400 µs) | 500 µs (chat, same rounds) | 700 µs | 1.40× | (for reading) | |",
		"PASS Responses time added vs chat's: 1.08×",
		"first token, time added beyond the translator floor's, median | 250 µs (the floor adds) | 400 µs | +150 µs | ≤ floor + 100 µs | **no** |",
		"FAIL stream first token beyond the floor: +150 µs",
		"last chunk, time added beyond the translator floor's, median | 600 µs (the floor adds) | 1000 µs | +400 µs |",
		"Responses (store: false) (/v1/responses), first token / last chunk, time added, median | 400 / 1000 µs (chat stream) | 450 / 1100 µs | 1.12× / 1.10× |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	for _, absent := range []string{"/v1/completions", "store default"} {
		if strings.Contains(out, absent) {
			t.Errorf("a row for %s, which the run did not measure:\n%s", absent, out)
		}
	}
}

// With the hit floors measured, the table gives them against the bare handler and eoc-proxy
// against them, for reading; without them (the table test's other results), no such row.
func TestTableHitFloorRows(t *testing.T) {
	r := result{hit: true, bareRPS: 1000, floorRPS: 800, bytesRPS: 960, eocRPS: 600, bareCPU: 20 * time.Microsecond,
		floorHitCPU: 25 * time.Microsecond, bytesHitCPU: 24 * time.Microsecond, hitCPU: 30 * time.Microsecond}
	out := table(t, &options{clients: 16, cpus: 2}, []result{r})
	for _, want := range []string{
		"nothing else): cache hits, 16 keep-alive clients | 1000 req/s (bare handler) | 960 req/s (the floor) | 0.96× | (for reading) | |",
		"nothing else): cache hits | 1000 req/s (bare handler) | 800 req/s (the floor) | 0.80× | (for reading) | |",
		"| cache hits against the hit floors (bytes / decoding) | 960 / 800 req/s | 600 req/s | 0.62× / 0.75× | (for reading) | |",
		"| cache hit, server CPU per call against the hit floors' (bytes / decoding) | 24.0 / 25.0 µs | 30.0 µs | 1.25× / 1.20× | (for reading) | |",
		"| 0.60× | ≥ 0.8× | **no** |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	r.floorRPS, r.bytesRPS = 0, 0
	if out := table(t, &options{clients: 16, cpus: 2}, []result{r}); strings.Contains(out, "hit floor") {
		t.Errorf("a hit floor row without the floors measured:\n%s", out)
	}
}
