package kv

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"
)

// tilt returns a unit vector at cosine c from unit vector v.
func tilt(r *rand.Rand, v []float32, c float64) []float32 {
	u := make([]float32, len(v))
	for i := range u {
		u[i] = float32(r.NormFloat64())
	}
	// Remove u's component along v, normalise, and mix.
	d := dot(u, v)
	for i := range u {
		u[i] -= d * v[i]
	}
	normalize(u)
	s := math.Sqrt(1 - c*c)
	out := make([]float32, len(v))
	for i := range out {
		out[i] = float32(c)*v[i] + float32(s)*u[i]
	}
	return out
}

func hamming(a, b sketch) int {
	d := 0
	for i := range a {
		d += bits.OnesCount64(a[i] ^ b[i])
	}
	return d
}

// TestSketchRecall: vectors at or above the threshold survive the sketch filter; unrelated ones
// do not.
func TestSketchRecall(t *testing.T) {
	const dim, trials = 256, 400
	r := rand.New(rand.NewPCG(7, 7))
	l := newLSH(dim)
	cut := hammingCutoff(DefaultThreshold)
	for _, tc := range []struct {
		cos      float64
		maxShare float64 // the share of pairs allowed on the wrong side of the cutoff
		wantNear bool
	}{
		{1, 0, true},
		{0.99, 0.001, true},
		{0.95, 0.005, true},
		{0.6, 0.005, false},
		{0, 0, false},
	} {
		wrong := 0
		for range trials {
			v := make([]float32, dim)
			for i := range v {
				v[i] = float32(r.NormFloat64())
			}
			normalize(v)
			near := hamming(l.sketch(v), l.sketch(tilt(r, v, tc.cos))) <= cut
			if near != tc.wantNear {
				wrong++
			}
		}
		if share := float64(wrong) / trials; share > tc.maxShare {
			t.Errorf("cosine %.2f: %.2f%% on the wrong side of the cutoff %d", tc.cos, 100*share, cut)
		}
	}
}

func TestCollectionInsertRemove(t *testing.T) {
	c := newCollection("", "m")
	l := newLSH(4)
	mk := func(id string, v ...float32) *entry {
		normalize(v)
		return &entry{id: id, vec: v, sketch: l.sketch(v)}
	}
	a, b, c2 := mk("a", 1, 0, 1, 0), mk("b", 0, 1, 0, 1), mk("c", 1, 1, 0, 0)
	for _, e := range []*entry{a, b} {
		c.insert(e, 2)
	}
	if ev, added := c.insert(c2, 2); len(ev) != 1 || ev[0] != a || !added {
		t.Fatalf("evicted %v, want a", ev)
	}
	// Replacing an id keeps one entry in a freed slot; slots are reused, never shrunk.
	b2 := mk("b", 0, 1, 0, 1)
	c.insert(b2, 2)
	if got := c.entries(); len(got) != 2 || got[0] != c2 || got[1] != b2 || len(c.slots) != 3 || len(c.free) != 1 {
		t.Fatalf("entries %v slots %d", got, len(c.slots))
	}
	if res := c.search(b2.vec, b2.sketch, 0.9); len(res) != 1 || res[0].e != b2 {
		t.Fatalf("search: %v", res)
	}
}

// sketchOneRow is the projection one nonzero row at a time, the reference for lsh.sketch.
func sketchOneRow(l *lsh, v []float32) sketch {
	var acc [sketchBits]float32
	for i, x := range v {
		if x == 0 {
			continue
		}
		for k := range acc {
			acc[k] += x * l.t[i*sketchBits+k]
		}
	}
	var s sketch
	for k, a := range acc {
		if a >= 0 {
			s[k/64] |= 1 << (k % 64)
		}
	}
	return s
}

// TestSketchMatchesOneRow: the sketch is the same bits as projecting one row at a time, for
// dense vectors and for sparse ones with any number of nonzero rows.
func TestSketchMatchesOneRow(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	l := newLSH(2 * BuiltinDim)
	for trial := range 300 {
		v := make([]float32, l.dim)
		nonzero := trial % 13
		if trial%5 == 0 {
			nonzero = l.dim
		}
		for range nonzero {
			v[r.IntN(l.dim)] = float32(r.NormFloat64())
		}
		if got, want := l.sketch(v), sketchOneRow(l, v); got != want {
			t.Fatalf("trial %d (%d nonzero): %x, want %x", trial, nonzero, got, want)
		}
	}
	q := "Can you explain how the payment gateway handles the rotate token?"
	v, ok := join(embedBuiltin(q), embedBuiltin(contextOf(q)))
	if !ok || l.sketch(v) != sketchOneRow(l, v) {
		t.Fatal("a built-in embedding sketches differently")
	}
}

// TestScanIsExact: the scan finds exactly the slots a full Hamming distance finds, with
// distances on both sides of the cutoff, near ones concentrated in either half, and collections
// of several sizes.
func TestScanIsExact(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	cut := hammingCutoff(DefaultThreshold)
	q := sketch{r.Uint64(), r.Uint64(), r.Uint64(), r.Uint64()}
	flip := func(s sketch, n int, lo, hi int) sketch { // n distinct bits in [lo, hi)
		for _, b := range r.Perm(hi - lo)[:n] {
			b += lo
			s[b/64] ^= 1 << (b % 64)
		}
		return s
	}
	for _, tc := range []struct{ n, kind int }{{0, -1}, {1, -1}, {3, -1}, {4, -1}, {5, -1}, {9, -1}, {1001, -1},
		{16, 0}, {16, 1}, {16, 2}, {16, 3}, {16, 4}, {15, 2}, {17, 2}} { // kind -1: mixed
		n := tc.n
		c := newCollection("", "m")
		var want []int
		for i := range n {
			var s sketch
			kind := tc.kind
			if kind < 0 {
				kind = i % 5
			}
			switch kind {
			case 0: // unrelated
				s = sketch{r.Uint64(), r.Uint64(), r.Uint64(), r.Uint64()}
			case 1: // around the cutoff, anywhere
				s = flip(q, cut-2+r.IntN(5), 0, sketchBits)
			case 2: // all the distance in the first half, at the cutoff or one past it
				s = flip(q, cut+r.IntN(2), 0, sketchBits/2)
			case 3: // all of it in the second half
				s = flip(q, cut-1+r.IntN(3), sketchBits/2, sketchBits)
			default: // near
				s = flip(q, r.IntN(cut), 0, sketchBits)
			}
			c.insert(&entry{id: fmt.Sprint(i), sketch: s}, 0)
			if hamming(q, s) <= cut {
				want = append(want, i)
			}
		}
		var got []int
		for s := nextNear(c.sketches, &q, cut, 0); s >= 0; s = nextNear(c.sketches, &q, cut, s+1) {
			got = append(got, s)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%d entries: scan found %v, full distance %v", n, got, want)
		}
	}
}
