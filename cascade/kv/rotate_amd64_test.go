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

// TestSignsAssembly: the AVX2 sign bits are the Go version's, for floats of both signs, zeros of
// both signs and NaNs.
func TestSignsAssembly(t *testing.T) {
	if !hasAVX2 {
		t.Skip("this processor has no AVX2")
	}
	r := rand.New(rand.NewPCG(31, 31))
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}
	for trial := range 200 {
		x := make([]float32, sketchBits+r.IntN(3)*sketchBits)
		for i := range x {
			if trial%4 == 0 && r.IntN(4) == 0 {
				x[i] = special[r.IntN(len(special))]
			} else {
				x[i] = float32(r.NormFloat64())
			}
		}
		var got sketch
		signsAVX2(&x[0], &got)
		if want := signsGo(x); got != want {
			t.Fatalf("trial %d: signs %#x, want %#x", trial, got, want)
		}
	}
}

// sketchGo is lsh.sketch without assembly.
func (l *lsh) sketchGo(v []float32) sketch {
	x := make([]float32, l.n)
	copy(x, v)
	for _, sg := range l.signs {
		flipFWHTGo(x, sg)
	}
	return signsGo(x)
}

// TestSketchAssemblyOnQueries: the sketches of real-looking queries' built-in vectors (benchout's
// prompts and help desk questions, after a system message or alone) and of random vectors of
// other dimensions are the Go version's, bit for bit: a search scores the same candidates.
func TestSketchAssemblyOnQueries(t *testing.T) {
	if !hasAVX2 {
		t.Skip("this processor has no AVX2")
	}
	r := rand.New(rand.NewPCG(37, 37))
	l := newLSH(2 * BuiltinDim)
	for i := range 2000 {
		q := benchoutPrompt(r)
		if i%2 == 1 {
			q = benchQuestion(r)
		}
		ctx := contextOf(q)
		if i%3 != 0 {
			ctx = "system: You are a helpful assistant. Be brief.\n" + ctx
		}
		v, ok := embedQueryJoined(query{question: q, context: ctx})
		if !ok {
			t.Fatalf("%q embeds to nothing", q)
		}
		if got, want := l.sketch(v), l.sketchGo(v); got != want {
			t.Fatalf("%q: sketch %#x, want %#x", q, got, want)
		}
	}
	for _, dim := range []int{384, 768, 1024, 1536, 3072} {
		l := newLSH(dim)
		for range 100 {
			v := make([]float32, dim)
			for i := range v {
				v[i] = float32(r.NormFloat64())
			}
			normalize(v)
			if got, want := l.sketch(v), l.sketchGo(v); got != want {
				t.Fatalf("dim %d: sketch %#x, want %#x", dim, got, want)
			}
		}
	}
}
