package main

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestGCPercent(t *testing.T) {
	for _, tc := range []struct {
		live uint64
		want int
	}{
		{0, 100},                // nothing measured yet: the default
		{1 << 10, maxGCPercent}, // nearly empty: bounded
		{4 << 20, 800},          // 4 MiB live: 32 MiB to grow into
		{16 << 20, 200},         // 16 MiB: 32 MiB
		{gcHeadroom - 1, 100},   // just under: the default is already as much
		{gcHeadroom, 100},       // at and above: the default
		{1 << 30, 100},
	} {
		if got := gcPercent(tc.live); got != tc.want {
			t.Errorf("gcPercent(%d) = %d, want %d", tc.live, got, tc.want)
		}
	}
}

// TestTuneGCFollowsCollections: the tuner runs again after each collection and sets GOGC from
// the live heap; with GOGC in the environment it does not start.
func TestTuneGCFollowsCollections(t *testing.T) {
	t.Setenv("GOGC", "100")
	if tuneGC() != nil {
		t.Fatal("tuner started although GOGC is set")
	}
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	tn := &gcTuner{}
	tn.sample = tuneSample()
	tn.tune()
	defer tn.stop()
	deadline := time.Now().Add(30 * time.Second)
	for start := tn.tuned.Load(); tn.tuned.Load() < start+3; {
		if time.Now().After(deadline) {
			t.Fatalf("tuned %d times after 30 s of collections: the tuner does not follow them", tn.tuned.Load()-start)
		}
		runtime.GC()
		time.Sleep(time.Millisecond) // cleanups run on their own goroutine
	}
	if got := debug.SetGCPercent(100); got <= 100 {
		t.Fatalf("GOGC %d after tuning; a test binary's live heap is far under %d MiB", got, gcHeadroom>>20)
	}
}
