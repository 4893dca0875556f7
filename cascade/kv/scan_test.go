package kv

import (
	"math/rand/v2"
	"testing"
)

type maskFunc func(*[blockSlots * sketchWords]uint64, *sketch, int) uint64

// TestNearMask: the mask the build uses is nearMaskGo's (scan_amd64_test.go checks each
// assembly version).
func TestNearMask(t *testing.T) { checkMask(t, nearMask) }

// checkMask compares f with nearMaskGo for sketches at, one below and one beyond the cutoff, in
// each word, and cutoffs from 0 to all bits.
func checkMask(t *testing.T, f maskFunc) {
	t.Helper()
	r := rand.New(rand.NewPCG(13, 13))
	for _, cutoff := range []int{0, 1, hammingCutoff(DefaultThreshold), 128, sketchBits - 1, sketchBits} {
		for trial := range 50 {
			q := sketch{r.Uint64(), r.Uint64(), r.Uint64(), r.Uint64()}
			var block [blockSlots * sketchWords]uint64
			for i := range blockSlots {
				s := q
				d := min(sketchBits, max(0, cutoff+r.IntN(3)-1)) // at, below or beyond the cutoff
				if trial%5 == 0 {
					d = r.IntN(sketchBits + 1)
				}
				for _, b := range r.Perm(sketchBits)[:d] {
					s[b/64] ^= 1 << (b % 64)
				}
				copy(block[i*sketchWords:], s[:])
			}
			if got, want := f(&block, &q, cutoff), nearMaskGo(&block, &q, cutoff); got != want {
				t.Fatalf("cutoff %d trial %d: mask %064b, want %064b", cutoff, trial, got, want)
			}
		}
	}
}
