package kv

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
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

// TestSketchRecall: vectors at or above the threshold survive the sketch filter (both of the
// scan's cutoffs); unrelated ones do not.
func TestSketchRecall(t *testing.T) {
	const dim, trials = 256, 400
	r := rand.New(rand.NewPCG(7, 7))
	l := newLSH(dim)
	cut := cutoffsFor(DefaultThreshold)
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
			a, b := l.sketch(v), l.sketch(tilt(r, v, tc.cos))
			near := within(&a, &b, cut)
			if near != tc.wantNear {
				wrong++
			}
		}
		if share := float64(wrong) / trials; share > tc.maxShare {
			t.Errorf("cosine %.2f: %.2f%% on the wrong side of the cutoffs %+v", tc.cos, 100*share, cut)
		}
	}
}

// TestSketchBuiltinPairs: on built-in embeddings (sparse, sharing the words of a system prompt
// and of "user"), the distance between sketches follows the model the cutoffs assume, a binomial
// with p = acos(c)/π: at exactly the threshold (a conversation tilted to cosine 0.95) its mean is
// not above the binomial's nor its spread wider, and at most 0.5 % fall beyond the cutoffs; edited questions that
// stay above the threshold are within it; and unrelated questions are as far as the model says,
// on average, not nearer (nearer would make every search check more candidates).
func TestSketchBuiltinPairs(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 11))
	l := newLSH(2 * BuiltinDim)
	cut := cutoffsFor(DefaultThreshold)
	embed := func(q string) []float32 {
		v, ok := embedQueryJoined(query{question: q, context: "system: You are a helpful assistant. Be brief.\n" + contextOf(q)})
		if !ok {
			t.Fatalf("%q embeds to nothing", q)
		}
		return v
	}
	expected := func(c float64) float64 { return sketchBits * math.Acos(math.Min(1, c)) / math.Pi }

	const trials = 2000
	p := expected(DefaultThreshold) / sketchBits
	sd := math.Sqrt(sketchBits * p * (1 - p))
	var sum, sum2 float64
	beyond := 0
	for range trials {
		v := embed(benchPrompt(r))
		a, b := l.sketch(v), l.sketch(tilt(r, v, DefaultThreshold))
		z := (float64(hamming(a, b)) - expected(DefaultThreshold)) / sd
		sum, sum2 = sum+z, sum2+z*z
		if !within(&a, &b, cut) {
			beyond++
		}
	}
	mean := sum / trials
	if spread := math.Sqrt(sum2/trials - mean*mean); mean > 0.15 || spread > 1.2 {
		t.Errorf("at the threshold: distance %.2f ± %.2f standard deviations from the binomial's", mean, spread)
	}
	if share := float64(beyond) / trials; share > 0.005 {
		t.Errorf("at the threshold: %.2f%% beyond the cutoffs %+v", 100*share, cut)
	}

	near, far := 0, 0
	var farGap float64
	for range trials {
		a := benchPrompt(r)
		b := strings.Replace(a, "explain", "tell me", 1)
		if r.IntN(2) == 0 {
			b = a + " " + benchVocab[r.IntN(len(benchVocab))]
		}
		va, vb := embed(a), embed(b)
		half := len(va) / 2
		if 2*dot(va[:half], vb[:half]) >= DefaultThreshold && 2*dot(va[half:], vb[half:]) >= DefaultThreshold {
			near++
			if sa, sb := l.sketch(va), l.sketch(vb); !within(&sa, &sb, cut) {
				t.Errorf("%q and %q: distance %d beyond the cutoffs %+v", a, b, hamming(sa, sb), cut)
			}
		}
		va, vb = embed(benchQuestion(r)), embed(benchQuestion(r))
		if c := float64(dot(va, vb)); c < 0.8 {
			far++
			farGap += float64(hamming(l.sketch(va), l.sketch(vb))) - expected(c)
		}
	}
	if near < trials/4 || far < trials/4 {
		t.Fatalf("%d near pairs, %d far ones: the test's edits no longer make both", near, far)
	}
	if gap := farGap / float64(far); gap < -2 {
		t.Errorf("unrelated questions: distance %.1f bits below acos(c)/π on average", -gap)
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

// rotateNaive is the rotation lsh.sketch applies, in float64 with the Hadamard matrix written
// out (H[k][j] = (-1)^popcount(k&j)), the reference for the fast transform.
func rotateNaive(l *lsh, v []float32) []float64 {
	x := make([]float64, l.n)
	for i, f := range v {
		x[i] = float64(f)
	}
	for _, sg := range l.signs {
		y := make([]float64, l.n)
		for k := range y {
			for j, f := range x {
				if bits.OnesCount(uint(k&j))%2 == 1 {
					y[k] -= f * float64(sg[j])
				} else {
					y[k] += f * float64(sg[j])
				}
			}
		}
		x = y
	}
	return x
}

// TestSketchMatchesNaive: the sketch is the signs of the naive rotation, for dense vectors and
// sparse ones, of the built-in dimension, a smaller and a larger one (coordinates within rounding
// of zero are not compared).
func TestSketchMatchesNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for _, dim := range []int{4, 2 * BuiltinDim, 768} {
		l := newLSH(dim)
		if l.n < dim || l.n < sketchBits || l.n&(l.n-1) != 0 {
			t.Fatalf("dim %d: transform length %d", dim, l.n)
		}
		for trial := range 20 {
			v := make([]float32, dim)
			nonzero := trial % 13
			if trial%5 == 0 {
				nonzero = dim
			}
			for range nonzero {
				v[r.IntN(dim)] = float32(r.NormFloat64())
			}
			got, want := l.sketch(v), rotateNaive(l, v)
			var norm float64
			for _, f := range want {
				norm = math.Max(norm, math.Abs(f))
			}
			for k := range sketchBits {
				if math.Abs(want[k]) <= 1e-5*norm {
					continue
				}
				if bit := got[k/64]>>(k%64)&1 == 1; bit != (want[k] >= 0) {
					t.Fatalf("dim %d trial %d (%d nonzero): bit %d is %v, coordinate %g", dim, trial, nonzero, k, bit, want[k])
				}
			}
		}
	}
	// The same bits in every process and on every platform: the sign flips come from the fixed
	// seed, and the transform only adds (a change of definition changes this value).
	q := "Can you explain how the payment gateway handles the rotate token?"
	v, ok := join(embedBuiltin(q), embedBuiltin(contextOf(q)))
	want := sketch{0xa8108ab1dd46976b, 0xc833405c671fce8e, 0xfaf8bad3fbc02743, 0xf8c5747e6697f593}
	if got := newLSH(len(v)).sketch(v); !ok || got != want {
		t.Fatalf("a built-in embedding sketches to %#x, want %#x", got, want)
	}
}

// TestScanIsExact: the scan finds exactly the slots whose sketch is within both cutoffs, with
// distances on both sides of each, near ones concentrated in either half, the first around its
// own cutoff,
// collections of several sizes (in whole blocks and not), and slots freed and taken again by other sketches.
func TestScanIsExact(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	cut := cutoffsFor(DefaultThreshold)
	q := sketch{r.Uint64(), r.Uint64(), r.Uint64(), r.Uint64()}
	flip := func(s sketch, n int, lo, hi int) sketch { // n distinct bits in [lo, hi)
		for _, b := range r.Perm(hi - lo)[:n] {
			b += lo
			s[b/64] ^= 1 << (b % 64)
		}
		return s
	}
	gen := func(kind int) sketch {
		switch kind {
		case 0: // unrelated
			return sketch{r.Uint64(), r.Uint64(), r.Uint64(), r.Uint64()}
		case 1: // around the cutoff, anywhere
			return flip(q, cut.full-2+r.IntN(5), 0, sketchBits)
		case 2: // all the distance in the first half, at the cutoff or one past it
			return flip(q, cut.full+r.IntN(2), 0, sketchBits/2)
		case 3: // all of it in the second half
			return flip(q, cut.full-1+r.IntN(3), sketchBits/2, sketchBits)
		case 4: // the first half around its cutoff, a little more elsewhere
			return flip(flip(q, cut.head-1+r.IntN(3), 0, 64*headWords), r.IntN(cut.full-cut.head), 64*headWords, sketchBits)
		default: // near
			return flip(q, r.IntN(cut.full), 0, sketchBits)
		}
	}
	for _, tc := range []struct{ n, kind int }{{0, -1}, {1, -1}, {3, -1}, {4, -1}, {5, -1}, {9, -1}, {63, -1},
		{64, -1}, {65, -1}, {1001, -1}, {blockSlots * 16, -1}, {blockSlots*16 + 64, -1},
		{2*blockSlots*16 + 65, -1}, {130, 0}, {130, 1}, {130, 2}, {130, 3}, {130, 4}, {130, 5}, {127, 2}, {129, 4}} { // kind -1: mixed
		n := tc.n
		c := newCollection("", "m")
		kind := func(i int) int {
			if tc.kind < 0 {
				return i % 6
			}
			return tc.kind
		}
		for i := range n {
			c.insert(&entry{id: fmt.Sprint(i), sketch: gen(kind(i))}, 0)
		}
		for i := 0; i < n; i += 7 { // replaced: the slot is freed and taken by the new sketch
			c.insert(&entry{id: fmt.Sprint(i), sketch: gen(kind(i + 1))}, 0)
		}
		var want []int
		for slot, e := range c.slots {
			if within(&q, &e.sketch, cut) {
				want = append(want, slot)
			}
		}
		var got []int
		for _, s := range appendNear(c.blocks, len(c.slots), &q, cut, nil) {
			got = append(got, int(s))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%d entries of kind %d: scan found %v, the cutoffs %v", n, tc.kind, got, want)
		}
	}
}
