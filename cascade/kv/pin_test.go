package kv

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// pinnedTexts are texts whose built-in embeddings are pinned below: ASCII and not, contractions,
// numbers, kept punctuation, several lines, and benchout's shape.
var pinnedTexts = []string{
	"What's the capital of France?",
	"system: You are a helpful assistant. Be brief.\nuser: Please explain in two sentences how glaibou trostu fa keme doustai ru relates to gai moubra pike tousai glaza vi.",
	"Please explain in two sentences how glaibou trostu fa keme doustai ru relates to gai moubra pike tousai glaza vi.",
	"I can't, won't, I'm, John's, dont do'nt it`s",
	"What is 3.5 + -4, 1,000 and 10:30? C++ & C# at 5% / $3",
	"  leading\tspaces and\r\nCRLF lines  \n\nNASA iPhone",
	"Où est la Côte d’Ivoire ? ＦＵＬＬＷＩＤＴＨ x −4 ﬁle",
	"",
}

// pinnedSums are the SHA-256 (first 8 bytes) of embedBuiltin of each pinned text, its float32
// bits little-endian: what every stored entry and every Redis peer's vector was made with.
var pinnedSums = []string{
	"185c75a15c890b3a", "dcae39db0be50cdc", "3eae0d2b2279c4b8", "b18a57a04c26cb58",
	"7b24d5d9709ec50c", "09246eda169482bc", "dfedd5a547d6a184", "5f70bf18a0860070",
}

// pinnedJoined is the SHA-256 (first 8 bytes) of the stage's joined vector for benchout's query
// (pinnedTexts[2] asked after the system message: its context is pinnedTexts[1]).
const pinnedJoined = "dda06534ad6bb337"

func vectorSum(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// TestBuiltinPinned: the built-in embedding of each pinned text, and Builtin.Embed's, are the
// vectors it has always been, bit for bit.
func TestBuiltinPinned(t *testing.T) {
	vs, _, _ := Builtin{}.Embed(context.Background(), pinnedTexts)
	for i, s := range pinnedTexts {
		got := vectorSum(vs[i])
		if i < len(pinnedSums) && got != pinnedSums[i] {
			t.Errorf("embedding of %q: sum %s, want %s", s, got, pinnedSums[i])
		}
	}
	v, ok := embedQueryJoined(query{question: pinnedTexts[2], context: pinnedTexts[1]})
	if got := vectorSum(v); !ok || got != pinnedJoined {
		t.Errorf("joined vector of benchout's query: sum %s, want %s", got, pinnedJoined)
	}
	if len(pinnedSums) != len(pinnedTexts) {
		t.Errorf("%d sums for %d texts", len(pinnedSums), len(pinnedTexts))
	}
}

// TestNormalizeCounts: normalizeCounts gives normalize's floats, bit for bit, on sums of the
// built-in embedder's weights small and large (past 2²⁵, where float32 rounds them and the
// four running sums are not used).
func TestNormalizeCounts(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	weights := []float32{weightTrigram, weightWord, weightBigram}
	for trial := range 300 {
		v := make([]float32, BuiltinDim)
		scale := float32(int(1) << (trial % 30)) // up to 2²⁹ a bump: float32 sums round
		// Trial 0 has one large coordinate: summed in order, the others' squares are lost in it.
		if trial == 0 {
			for i := range v {
				v[i] = 0.5
			}
			v[0] = 1 << 28
		}
		for range 1 + r.IntN(2000) {
			w := weights[r.IntN(len(weights))] * scale
			if r.IntN(2) == 0 {
				w = -w
			}
			v[r.IntN(len(v))] += w
		}
		want := slices.Clone(v)
		nw := normalize(want)
		if n := normalizeCounts(v); n != nw || !slices.Equal(v, want) {
			t.Fatalf("trial %d: normalizeCounts differs from normalize (lengths %v, %v)", trial, n, nw)
		}
	}
}

// TestEmbedQueryLargest: the largest context whose question's features are shared, made of the
// character NFKC writes as the most runes, embeds as Builtin.Embed does.
func TestEmbedQueryLargest(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of NFKC")
	}
	sys := strings.Repeat("ﷺ", (1<<18-64)/len("ﷺ"))
	q := query{question: "How do I reset it?", context: "system: " + sys + "\nuser: How do I reset it?"}
	if len(q.context) >= 1<<18 {
		t.Fatalf("context of %d bytes", len(q.context))
	}
	checkEmbedQuery(t, q)
}

// TestJoinCounts: joinCounts gives normalizeCounts then normalizeScaled(√2/2)'s floats of the
// halved counts, bit for bit, on both halves of counts of the built-in embedder's weights few
// and many, within its small table's span, its large one's and beyond, and says the same of a
// zero half.
func TestJoinCounts(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 11))
	var spans [3]int // trials whose largest count is within smallSpan, joinSpan, beyond
	for trial := range 3000 {
		var c [2 * BuiltinDim]int32
		for h := range 2 {
			bumps := []int{0, 1, 3, 30, 300, 3000}[(trial+h*trial/6)%6]
			scale := int32(1)
			if trial%7 == h {
				scale = 64 // some counts beyond the span
			}
			for range bumps {
				w := countWeights[r.IntN(len(countWeights))] * scale
				if r.IntN(2) == 0 {
					w = -w
				}
				c[h*BuiltinDim+r.IntN(BuiltinDim)] += w
			}
		}
		want := make([]float32, 2*BuiltinDim)
		var most int32
		for i, x := range c {
			want[i] = float32(x) / 2
			most = max(most, x, -x)
		}
		switch {
		case most <= smallSpan:
			spans[0]++
		case most <= joinSpan:
			spans[1]++
		default:
			spans[2]++
		}
		wok := joinCountsSlow(want[:BuiltinDim]) && joinCountsSlow(want[BuiltinDim:])
		v := make([]float32, 2*BuiltinDim)
		if ok := joinCounts(v, &c); ok != wok || ok && !slices.EqualFunc(v, want, func(a, b float32) bool {
			return math.Float32bits(a) == math.Float32bits(b)
		}) {
			t.Fatalf("trial %d: joinCounts differs from normalizeCounts and normalizeScaled (%v, want %v)", trial, ok, wok)
		}
	}
	if slices.Contains(spans[:], 0) {
		t.Fatalf("trials by largest count (small span, large span, beyond): %v, want some of each", spans)
	}
}
