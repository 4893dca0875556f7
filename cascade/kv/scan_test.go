package kv

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// blockFunc is a version of blockMask.
type blockFunc func(*[blockWords]uint64, *sketch, int, int) uint64

// TestScanMasks: the version the build uses computes the Go version's masks (scan_amd64_test.go
// checks each assembly version).
func TestScanMasks(t *testing.T) {
	checkBlockMask(t, func(b *[blockWords]uint64, sk *sketch, head, full int) uint64 {
		return blockMask(b, sk, cutoffs{head: head, full: full})
	})
}

// maskCutoffs are cutoffs from 0 to every bit, the scan's among them.
var maskCutoffs = []int{0, 1, headCutoff(DefaultThreshold), hammingCutoff(DefaultThreshold), 63, 64, 128, sketchBits - 1, sketchBits}

// flipBits flips d distinct bits of s among [lo, hi).
func flipBits(r *rand.Rand, s []uint64, d, lo, hi int) {
	for _, b := range r.Perm(hi - lo)[:min(d, hi-lo)] {
		b += lo
		s[b/64] ^= 1 << (b % 64)
	}
}

// checkBlockMask compares f with blockMaskGo for sketches whose first half, or whole, is at, one
// below and one beyond either cutoff, for pairs of cutoffs from none to every bit.
func checkBlockMask(t *testing.T, f blockFunc) {
	t.Helper()
	r := rand.New(rand.NewPCG(13, 13))
	const half = 64 * headWords
	for _, head := range maskCutoffs {
		for _, full := range maskCutoffs {
			for trial := range 20 {
				q := sketch{r.Uint64(), r.Uint64(), r.Uint64(), r.Uint64()}
				var block [blockWords]uint64
				for i := range blockSlots {
					s := q
					switch k := (trial + i) % 4; {
					case trial%5 == 0: // anywhere
						flipBits(r, s[:], r.IntN(sketchBits+1), 0, sketchBits)
					case k < 2: // the first half around its cutoff, the rest around what is left of full
						dh := max(0, min(half, head+r.IntN(3)-1))
						flipBits(r, s[:], dh, 0, half)
						flipBits(r, s[:], max(0, min(sketchBits-half, full-dh+r.IntN(3)-1)), half, sketchBits)
					default: // the whole around the full cutoff
						flipBits(r, s[:], max(0, full+r.IntN(3)-1), 0, sketchBits)
					}
					for w := range sketchWords {
						block[w*blockSlots+i] = s[w]
					}
				}
				if got, want := f(&block, &q, head, full), blockMaskGo(&block, &q, cutoffs{head: head, full: full}); got != want {
					t.Fatalf("cutoffs %d, %d trial %d: mask %064b, want %064b", head, full, trial, got, want)
				}
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

// FuzzBlockMask: the scan's step in the version the build uses finds the slots blockMaskGo
// finds, for any query, any sketches near it and any cutoffs.
func FuzzBlockMask(f *testing.F) {
	f.Add(uint64(1), uint64(2), uint8(30), uint8(46))
	f.Add(uint64(3), uint64(4), uint8(0), uint8(255))
	f.Fuzz(func(t *testing.T, seed, near uint64, head, full uint8) {
		r := rand.New(rand.NewPCG(seed, near))
		q := sketch{r.Uint64(), r.Uint64(), r.Uint64(), r.Uint64()}
		var block [blockWords]uint64
		for i := range blockSlots {
			s := q
			flipBits(r, s[:], r.IntN(int(near%sketchBits)+1), 0, sketchBits)
			for w := range sketchWords {
				block[w*blockSlots+i] = s[w]
			}
		}
		c := cutoffs{head: int(head), full: int(full)}
		if got, want := blockMask(&block, &q, c), blockMaskGo(&block, &q, c); got != want {
			t.Fatalf("cutoffs %+v: mask %064b, want %064b", c, got, want)
		}
	})
}
