package kv

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

type (
	headFunc func(*[blockSlots * headWords]uint64, uint64, uint64, int) uint64
	fullFunc func(*[blockSlots * sketchWords]uint64, *sketch, int, uint64) uint64
)

// TestScanMasks: the versions the build uses compute the Go versions' masks (scan_amd64_test.go
// checks each assembly version).
func TestScanMasks(t *testing.T) {
	checkHeadMask(t, headMask)
	checkFullMask(t, fullMask)
}

// maskCutoffs are cutoffs from 0 to every bit, the scan's among them.
var maskCutoffs = []int{0, 1, headCutoff(DefaultThreshold), hammingCutoff(DefaultThreshold), 63, 64, 128, sketchBits - 1, sketchBits}

// flipBits flips d distinct bits of s among its first n.
func flipBits(r *rand.Rand, s []uint64, d, n int) {
	for _, b := range r.Perm(n)[:min(d, n)] {
		s[b/64] ^= 1 << (b % 64)
	}
}

// checkHeadMask compares f with headMaskGo for first halves at, one below and one beyond the
// cutoff.
func checkHeadMask(t *testing.T, f headFunc) {
	t.Helper()
	r := rand.New(rand.NewPCG(13, 13))
	for _, cutoff := range maskCutoffs {
		for trial := range 50 {
			s0, s1 := r.Uint64(), r.Uint64()
			var heads [blockSlots * headWords]uint64
			for i := range blockSlots {
				w := []uint64{s0, s1}
				d := max(0, cutoff+r.IntN(3)-1)
				if trial%5 == 0 {
					d = r.IntN(64*headWords + 1)
				}
				flipBits(r, w, d, 64*headWords)
				heads[i], heads[blockSlots+i] = w[0], w[1]
			}
			if got, want := f(&heads, s0, s1, cutoff), headMaskGo(&heads, s0, s1, cutoff); got != want {
				t.Fatalf("cutoff %d trial %d: mask %064b, want %064b", cutoff, trial, got, want)
			}
		}
	}
}

// checkFullMask compares f with fullMaskGo for sketches at, one below and one beyond the cutoff,
// with masks of no slot, some and every one.
func checkFullMask(t *testing.T, f fullFunc) {
	t.Helper()
	r := rand.New(rand.NewPCG(14, 14))
	for _, cutoff := range maskCutoffs {
		for trial := range 50 {
			q := sketch{r.Uint64(), r.Uint64(), r.Uint64(), r.Uint64()}
			var block [blockSlots * sketchWords]uint64
			for i := range blockSlots {
				s := q
				d := max(0, cutoff+r.IntN(3)-1)
				if trial%5 == 0 {
					d = r.IntN(sketchBits + 1)
				}
				flipBits(r, s[:], d, sketchBits)
				copy(block[i*sketchWords:], s[:])
			}
			m := r.Uint64()
			switch trial % 7 {
			case 0:
				m = 0
			case 1:
				m = math.MaxUint64
			}
			if got, want := f(&block, &q, cutoff, m), fullMaskGo(&block, &q, cutoff, m); got != want {
				t.Fatalf("cutoff %d trial %d mask %064b: %064b, want %064b", cutoff, trial, m, got, want)
			}
		}
	}
}

// TestHeadCutoffTail: for thresholds from 0.5 to 0.99, an entry at exactly the threshold has
// its first 128 sketch bits beyond the first pass's cutoff with probability at most 1e-5 (the
// binomial's exact tail; at 0.95 it is 3.3e-6, against 4.5e-5 for the whole sketch).
func TestHeadCutoffTail(t *testing.T) {
	for th := 0.5; th < 0.995; th += 0.01 {
		p := math.Acos(th) / math.Pi
		c := headCutoff(float32(th))
		tail := new(big.Float)
		const n = 64 * headWords
		for k := c + 1; k <= n; k++ {
			term := new(big.Float).SetInt(new(big.Int).Binomial(n, int64(k)))
			term.Mul(term, big.NewFloat(math.Pow(p, float64(k))*math.Pow(1-p, float64(n-k))))
			tail.Add(tail, term)
		}
		if v, _ := tail.Float64(); v > 1e-5 {
			t.Errorf("threshold %.2f: the first word is beyond its cutoff %d with probability %.2g", th, c, v)
		}
	}
}
