//go:build linux

package main

import (
	"strings"
	"testing"
)

// The table's cache-hit row gives the median ratio, the runs' range beside it, and marks the
// target met by the median.
func TestTableShowsTheRunsRange(t *testing.T) {
	hit := func(eoc, bare float64) result {
		return result{hit: true, eocRPS: eoc, bareRPS: bare, bareCPU: 1, hitCPU: 2}
	}
	for _, tc := range []struct {
		name string
		rs   []result
		want string
	}{
		{"three runs", []result{hit(64, 100), hit(80, 100), hit(71, 100)}, "| 0.71× (runs 0.64–0.80) | ≥ 0.7× | yes |"},
		{"below", []result{hit(69, 100), hit(60, 100), hit(75, 100)}, "| 0.69× (runs 0.60–0.75) | ≥ 0.7× | **no** |"},
		{"one run", []result{hit(72, 100)}, "| 0.72× | ≥ 0.7× | yes |"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			if err := printTable(&b, &options{clients: 16}, []string{"cache"}, tc.rs, 0); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), tc.want) {
				t.Fatalf("no %q in\n%s", tc.want, b.String())
			}
		})
	}
}
