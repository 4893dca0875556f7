package cowmap

import (
	"sync"
	"testing"
)

// A key's value is made once and then returned as kept; past Max values are made on each use.
func TestMapMakesOnceWithinBound(t *testing.T) {
	m := Map[int, int]{Max: 3}
	made := map[int]int{}
	with := func(k int) int { made[k]++; return k * 10 }
	for range 2 {
		for k := range 5 {
			if v := m.Of(k, with); v != k*10 {
				t.Fatalf("Of(%d) = %d, want %d", k, v, k*10)
			}
		}
	}
	for k := range 3 {
		if made[k] != 1 {
			t.Errorf("key %d made %d times, want once", k, made[k])
		}
	}
	for k := 3; k < 5; k++ {
		if made[k] != 2 {
			t.Errorf("key %d past the bound made %d times, want on each use (2)", k, made[k])
		}
	}
	if m.Len() != 3 {
		t.Errorf("Len %d, want the bound 3", m.Len())
	}
}

// Concurrent first uses of one key agree on one value (run with -race).
func TestMapConcurrent(t *testing.T) {
	m := Map[string, *int]{Max: 10}
	var wg sync.WaitGroup
	got := make([]*int, 8)
	for i := range got {
		wg.Go(func() { got[i] = m.Of("k", func(string) *int { return new(int) }) })
	}
	wg.Wait()
	for _, p := range got[1:] {
		if p != got[0] {
			t.Fatal("two callers got different values for one key")
		}
	}
}
