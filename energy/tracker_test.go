package energy

import (
	"math"
	"strconv"
	"sync"
	"testing"
)

func TestTracker(t *testing.T) {
	tr := NewTracker(0.5)
	if _, _, ok := tr.Estimate("m", 10); ok {
		t.Fatal("a figure before any call")
	}
	est := Figure{Joules: 40, Grade: Estimated}
	tr.Observe("m", est, 20) // 2 J/token, 40 J/call
	check := func(name string, tokens int, want float64, reason string) {
		t.Helper()
		j, r, ok := tr.Estimate("m", tokens)
		if !ok || math.Abs(j-want) > 1e-9 || r != reason {
			t.Errorf("%s: Estimate = %v %q %v, want %v %q", name, j, r, ok, want, reason)
		}
	}
	check("per token", 5, 10, SavedRunningEstimated)
	check("per call without tokens", 0, 40, SavedRunningEstimated)
	tr.Observe("m", Figure{Joules: 80, Grade: Estimated}, 20) // 4 J/token: mean 3
	check("running mean", 5, 15, SavedRunningEstimated)
	// A measured figure wins over the estimated means.
	tr.Observe("m", Figure{Joules: 10, Grade: Measured}, 10)
	check("measured preferred", 5, 5, SavedRunningMeasured)
	check("measured per call", 0, 10, SavedRunningMeasured)
	// Another model, zero figures and failures-without-joules leave "m" alone.
	tr.Observe("other", Figure{Joules: 1000, Grade: Measured}, 1)
	tr.Observe("m", Figure{}, 10)
	tr.Observe("m", Figure{Grade: Measured}, 10)
	check("unchanged", 5, 5, SavedRunningMeasured)
	// A call without completion tokens moves only the per-call mean.
	tr.Observe("m", Figure{Joules: 30, Grade: Measured}, 0)
	check("per call moved", 0, 20, SavedRunningMeasured)
	check("per token kept", 5, 5, SavedRunningMeasured)
}

func TestTrackerConcurrent(t *testing.T) {
	tr := NewTracker(0)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 100 {
				tr.Observe("m", Figure{Joules: float64(i + 1), Grade: Measured}, 3)
				tr.Estimate("m", 3)
			}
		})
	}
	wg.Wait()
	if j, _, ok := tr.Estimate("m", 0); !ok || j < 1 || j > 8 {
		t.Errorf("mean %v outside the observed range", j)
	}
}

func TestTrackerBounded(t *testing.T) {
	tr := NewTracker(1)
	for i := range maxTrackedModels + 10 {
		tr.Observe(string(rune('a'+i%26))+strconv.Itoa(i), Figure{Joules: 1, Grade: Measured}, 1)
	}
	if len(tr.models) != maxTrackedModels {
		t.Fatalf("%d models tracked, want at most %d", len(tr.models), maxTrackedModels)
	}
	if _, _, ok := tr.Estimate("a0", 1); !ok {
		t.Error("a model inside the bound lost its figure")
	}
}

func TestTrackerPerToken(t *testing.T) {
	tr := NewTracker(1)
	if _, _, ok := tr.PerToken("k"); ok {
		t.Fatal("a figure for an unseen key")
	}
	tr.Observe("k", Figure{Joules: 6, Grade: Estimated}, 0) // no tokens: no per-token figure
	if _, _, ok := tr.PerToken("k"); ok {
		t.Fatal("a per-token figure from a call without tokens")
	}
	tr.Observe("k", Figure{Joules: 6, Grade: Estimated}, 3)
	if j, measured, ok := tr.PerToken("k"); !ok || measured || j != 2 {
		t.Fatalf("PerToken = %v, %v, %v; want 2 estimated", j, measured, ok)
	}
	tr.Observe("k", Figure{Joules: 5, Grade: Measured}, 10)
	if j, measured, ok := tr.PerToken("k"); !ok || !measured || j != 0.5 {
		t.Fatalf("PerToken = %v, %v, %v; want 0.5 measured", j, measured, ok)
	}
}
