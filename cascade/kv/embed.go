package kv

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

// Embedder turns texts into vectors. Implementations must be safe for concurrent use. The stage
// has one built in (Builtin); a model server's embedder comes from the caller (WithEmbedder),
// which meters it: kv dials no model itself.
type Embedder interface {
	// Embed returns one vector per text, in order, and what the call cost outside this process
	// (zero for in-process work), also when it fails. Vectors need not be normalised.
	Embed(ctx context.Context, texts []string) ([][]float32, energy.Figure, error)
	// ID names the model and its settings. Vectors from embedders with different IDs are never
	// compared: the store keeps them in different collections.
	ID() string
}

// BuiltinDim is the built-in embedder's dimension.
const BuiltinDim = 256

// Builtin is the offline embedder: hashed character trigrams, word unigrams and word bigrams of
// the Normalize form, signed feature hashing into BuiltinDim dimensions, L2-normalised. It needs
// no model and matches wording, not meaning: "reset my password" and "I forgot my login" share
// nothing. The zero value is ready and safe for concurrent use.
type Builtin struct{}

var _ Embedder = Builtin{}

// ID is "builtin-v1-256".
func (Builtin) ID() string { return fmt.Sprintf("builtin-v1-%d", BuiltinDim) }

// Embed hashes each text in process: the figure is zero (the stage's own estimate covers it),
// and it never fails.
func (Builtin) Embed(_ context.Context, texts []string) ([][]float32, energy.Figure, error) {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		out[i] = embedBuiltin(t)
	}
	return out, energy.Figure{}, nil
}

// Feature weights: words count more than their letters, and word order a little.
const (
	weightTrigram = 1
	weightWord    = 2
	weightBigram  = 1.5
)

func embedBuiltin(s string) []float32 {
	v := make([]float32, BuiltinDim)
	bump := func(h uint64, w float32) {
		h ^= h >> 33 // fmix64: FNV's high bits mix poorly on short inputs
		h *= 0xff51afd7ed558ccd
		h ^= h >> 33
		if h>>63 == 1 {
			w = -w
		}
		v[h%BuiltinDim] += w
	}
	words := strings.Fields(Normalize(s))
	for i, w := range words {
		bump(fnvString(fnvByte(fnvOffset, 'w'), w), weightWord)
		if i > 0 {
			h := fnvString(fnvByte(fnvOffset, 'b'), words[i-1])
			bump(fnvString(fnvByte(h, ' '), w), weightBigram)
		}
	}
	r := []rune(" " + strings.Join(words, " ") + " ")
	for i := 0; i+3 <= len(r); i++ {
		h := fnvByte(fnvOffset, 't')
		for _, c := range r[i : i+3] {
			h = fnvRune(h, c)
		}
		bump(h, weightTrigram)
	}
	normalize(v)
	return v
}

// FNV-1a, inline so hashing a feature allocates nothing.
const (
	fnvOffset uint64 = 14695981039346656037
	fnvPrime  uint64 = 1099511628211
)

func fnvByte(h uint64, b byte) uint64 { return (h ^ uint64(b)) * fnvPrime }

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = fnvByte(h, s[i])
	}
	return h
}

func fnvRune(h uint64, r rune) uint64 {
	for ; r > 0; r >>= 8 {
		h = fnvByte(h, byte(r))
	}
	return h
}

// normalize scales v to unit length in place; a zero vector stays zero. It reports the length.
func normalize(v []float32) float64 {
	var sum float64
	for _, x := range v {
		sum += float64(x) * float64(x)
	}
	n := math.Sqrt(sum)
	if n == 0 {
		return 0
	}
	for i := range v {
		v[i] = float32(float64(v[i]) / n)
	}
	return n
}
