// Package coldbench times calls with the CPU's caches evicted before each, as a server runs a
// call between other processes' work, and reports the median: warm benchmark loops understate
// what code costs there several times over.
package coldbench

import (
	"slices"
	"testing"
	"time"
)

// Timer evicts the caches and keeps each timed call's duration.
type Timer struct {
	buf   []byte // a few times the size of the CPU's caches
	times []time.Duration
}

// New returns a Timer whose eviction writes over 16 MiB.
func New() *Timer { return &Timer{buf: make([]byte, 16<<20)} }

// evict writes over the buffer, so that the code and data touched next come from memory.
func (t *Timer) evict() {
	for i := 0; i < len(t.buf); i += 64 {
		t.buf[i]++
	}
}

// Time evicts the caches, with b's timer stopped so that ns/op is the calls' own time too, then
// runs f and keeps how long it took.
func (t *Timer) Time(b *testing.B, f func()) {
	b.StopTimer()
	t.evict()
	b.StartTimer()
	t0 := time.Now()
	f()
	t.times = append(t.times, time.Since(t0))
}

// Report reports the median of the timed calls as metric unit (ns).
func (t *Timer) Report(b *testing.B, unit string) {
	if len(t.times) == 0 {
		return
	}
	slices.Sort(t.times)
	b.ReportMetric(float64(t.times[len(t.times)/2]), unit)
}
