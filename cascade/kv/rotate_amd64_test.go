package kv

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestFlipFWHTAssembly: the AVX2 transform gives the Go version's floats bit for bit, for every
// transform length from 16 to 4096, on dense and sparse vectors of mixed magnitudes (so that
// additions round), signed zeros included.
func TestFlipFWHTAssembly(t *testing.T) {
	if !hasAVX2 {
		t.Skip("this processor has no AVX2")
	}
	r := rand.New(rand.NewPCG(29, 29))
	for n := 16; n <= 4096; n *= 2 {
		for trial := range 50 {
			x := make([]float32, n)
			signs := make([]float32, n)
			for i := range x {
				signs[i] = float32(1 - 2*r.IntN(2))
				switch k := r.IntN(8); {
				case trial%3 == 0 && k < 6:
					// sparse: left zero
				case k == 0:
					x[i] = float32(math.Copysign(0, -1))
				default:
					x[i] = float32(r.NormFloat64() * math.Ldexp(1, r.IntN(40)-20))
				}
			}
			want := slices.Clone(x)
			flipFWHTGo(want, signs)
			flipFWHTAVX2(&x[0], &signs[0], n)
			for i := range x {
				if math.Float32bits(x[i]) != math.Float32bits(want[i]) {
					t.Fatalf("n %d trial %d: float %d is %g, want %g", n, trial, i, x[i], want[i])
				}
			}
		}
	}
}
