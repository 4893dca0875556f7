package kv

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

// Embedder turns texts into vectors. Implementations must be safe for concurrent use. The stage
// has one built in (Builtin); a model server's embedder comes from the caller (Options.Embedder,
// e.g. neural.NewEmbedder over a backend), which meters it: kv dials no model itself.
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
	wp := wordsPool.Get().(*[]string)
	words := appendNormWords((*wp)[:0], s)
	v := embedWords(words)
	putWords(wp, words)
	return v
}

// normWords is strings.Fields(Normalize(s)) without building the joined text: the words of
// each token (a token is one word unless folding gave it white space).
func normWords(s string) []string {
	toks := tokenize(s)
	words := make([]string, 0, len(toks))
	for _, t := range toks {
		if strings.IndexFunc(t.norm, unicode.IsSpace) >= 0 {
			words = append(words, strings.Fields(t.norm)...)
		} else {
			words = append(words, t.norm)
		}
	}
	return words
}

// appendNormWords appends normWords(s) to words. An ASCII text, the usual one, is read in one
// pass over its bytes by the rules of tokenizeLine: text.Canon changes nothing in ASCII but
// white space (which only ends words) and the backquote (an apostrophe), and folding it is
// lower-casing it.
func appendNormWords(words []string, s string) []string {
	if !isASCII(s) {
		return append(words, normWords(s)...)
	}
	s = strings.ReplaceAll(strings.ToLower(s), "`", "'")
	start, apos := -1, false // the word is s[start:i]; start < 0: no word
	var prev byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		var next byte
		if i+1 < len(s) {
			next = s[i+1]
		}
		switch {
		case asciiSpace[c]:
			words, start, apos = appendASCIIWord(words, s, start, i, apos)
		case (c == '.' || c == ',' || c == ':') && isDigit(prev) && isDigit(next):
			if start < 0 {
				start = i // 3.5, 1,000, 10:30
			}
		case c == '-' && isDigit(next) && !isDigit(prev) && !isLetter(prev):
			words, _, apos = appendASCIIWord(words, s, start, i, apos)
			start = i // -4
		case c == '\'':
			apos = apos || start >= 0 // kept until the word ends: contractions are read with it
		case unicode.IsPunct(rune(c)) && strings.IndexByte(keptPunct, c) < 0:
			words, start, apos = appendASCIIWord(words, s, start, i, apos)
		default:
			if start < 0 {
				start = i
			}
		}
		prev = c
	}
	words, _, _ = appendASCIIWord(words, s, start, len(s), apos)
	return words
}

// appendASCIIWord appends the words of s[start:end] (none when start < 0), a word of an ASCII
// text, as appendWord makes its tokens, and returns the state of no word.
func appendASCIIWord(words []string, s string, start, end int, apos bool) ([]string, int, bool) {
	if start < 0 {
		return words, -1, false
	}
	w := s[start:end]
	if !apos && !mayBeWhole(w) { // no contraction: every suffix has an apostrophe
		return append(words, w), -1, false
	}
	return appendParts(words, w, apos), -1, false
}

// appendParts appends the tokens of w, a lower-cased word that may be a contraction: its parts
// (w itself when it is none), without apostrophes when the word had one, none empty.
func appendParts(dst []string, w string, apos bool) []string {
	parts := expand(w)
	if parts == nil {
		parts = []string{w}
	}
	for _, p := range parts {
		if apos {
			p = strings.ReplaceAll(p, "'", "")
		}
		if p != "" {
			dst = append(dst, p)
		}
	}
	return dst
}

// asciiSpace is unicode.IsSpace for ASCII bytes.
var asciiSpace = [256]bool{'\t': true, '\n': true, '\v': true, '\f': true, '\r': true, ' ': true}

func isDigit(c byte) bool  { return '0' <= c && c <= '9' }
func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// wordsPool holds the word lists the embedder builds and drops.
var wordsPool = sync.Pool{New: func() any { return new([]string) }}

// embedQuery is Builtin's embedding of a query's question and context, each as Embed makes
// it, tokenizing the question once when the context ends with it as its last user message:
// the context's words are then those of the messages before, "user", and the question's
// (query renders that message as its own line, "user: " and the text; see builtinTail).
func embedQuery(q query) (question, context []float32) {
	v := make([]float32, 2*BuiltinDim)
	embedQueryInto(v, q)
	return v[:BuiltinDim:BuiltinDim], v[BuiltinDim:]
}

// embedQueryJoined is join(embedQuery(q)) written into one vector: the same floats, without the
// two half vectors and the copy.
func embedQueryJoined(q query) ([]float32, bool) {
	v := make([]float32, 2*BuiltinDim)
	if len(q.question) >= 1<<18 || len(q.context) >= 1<<18 {
		// float32 may round sums this long: they are made in the order they always were.
		featuresQueryInto(v, q)
		if !joinCountsSlow(v[:BuiltinDim]) || !joinCountsSlow(v[BuiltinDim:]) {
			return nil, false
		}
		return v, true
	}
	var c [2 * BuiltinDim]int32
	countQueryInto(&c, q)
	if !joinCounts(v, &c) {
		return nil, false
	}
	return v, true
}

// embedQueryInto writes embedQuery(q) into v, question half then context half.
func embedQueryInto(v []float32, q query) {
	featuresQueryInto(v, q)
	normalizeCounts(v[:BuiltinDim])
	normalizeCounts(v[BuiltinDim:])
}

// featuresQueryInto writes into v the sums of the feature weights (addFeatures) of q's question
// and of its context, question half then context half: embedQueryInto before normalising.
func featuresQueryInto(v []float32, q query) {
	prefix, ok := builtinTail(q)
	wp := wordsPool.Get().(*[]string)
	if !ok {
		w := appendNormWords((*wp)[:0], q.question)
		addFeatures(v[:BuiltinDim], w, "")
		clear(w)
		w = appendNormWords(w[:0], q.context)
		addFeatures(v[BuiltinDim:], w, "")
		putWords(wp, w)
		return
	}
	cw := appendNormWords((*wp)[:0], prefix)
	cw = append(cw, "user")
	n := len(cw)
	cw = appendNormWords(cw, q.question)
	qv, cv := v[:BuiltinDim], v[BuiltinDim:]
	if n == len(cw) || len(q.context) >= 1<<18 {
		addFeatures(qv, cw[n:], "")
		addFeatures(cv, cw, "")
		putWords(wp, cw)
		return
	}
	// The context's features are the question's and those of the words before it: the
	// question's are counted once and copied. The weights are multiples of 0.5, and a context
	// under 256 KiB has less than 2²² of them (about 12 a byte at most: NFKC writes up to 18
	// runes for one character), so float32 adds them exactly in any order.
	addFeatures(qv, cw[n:], "")
	copy(cv, qv)
	addFeatures(cv, cw[:n], cw[n])
	putWords(wp, cw)
}

// countQueryInto is featuresQueryInto in twice the weights as integers, for a question and a
// context under 256 KiB each (whose float32 sums are exact: these halved). The features of the
// lines before the question, and "user", are taken from prefixCounts when it has them.
func countQueryInto(c *[2 * BuiltinDim]int32, q query) {
	prefix, ok := builtinTail(q)
	qc, cc := c[:BuiltinDim], c[BuiltinDim:]
	pc := (*prefixEntry)(nil)
	if ok {
		pc = prefixCounts.lookup(prefix)
	}
	if pc != nil {
		// The usual query: a kept system prompt, then the question, counted as it is read.
		f := newWordCounter((*[BuiltinDim]int32)(qc))
		if countNormWords(&f, q.question) {
			f.end()
			copy(cc, pc.counts[:])
			if f.words > 0 {
				for i, x := range qc {
					cc[i] += x
				}
				f.boundary(cc)
			}
			return
		}
		clear(qc)
	}
	wp := wordsPool.Get().(*[]string)
	if !ok {
		w := appendNormWords((*wp)[:0], q.question)
		addWeights(qc, w, "", &countWeights)
		clear(w)
		w = appendNormWords(w[:0], q.context)
		addWeights(cc, w, "", &countWeights)
		putWords(wp, w)
		return
	}
	cw := (*wp)[:0]
	n := 0
	if pc == nil {
		cw = appendNormWords(cw, prefix)
		cw = append(cw, "user")
		n = len(cw)
	}
	cw = appendNormWords(cw, q.question)
	// The context's features are the question's and those of the words before it: the
	// question's are counted once and copied.
	addWeights(qc, cw[n:], "", &countWeights)
	switch {
	case pc != nil && n == len(cw):
		copy(cc, pc.counts[:])
	case pc != nil:
		// Those of the words before it, ending with "user", and of "user" followed by the
		// question: their pair and the trigram across the space between.
		copy(cc, qc)
		for i, x := range pc.counts {
			cc[i] += x
		}
		addBoundary(cc, "user", cw[0], &countWeights)
	case n == len(cw):
		addWeights(cc, cw, "", &countWeights)
	default:
		copy(cc, qc)
		addWeights(cc, cw[:n], cw[n], &countWeights)
		prefixCounts.offer(prefix, cw[:n])
	}
	putWords(wp, cw)
}

// addBoundary adds to v what addWeights(v, words, next) adds beyond addWeights(v, words, "")
// for words ending with the word last (not empty): the pair of last and next, and the trigram
// of last's last rune, the space, and next's first rune.
func addBoundary[T featureSum](v []T, last, next string, wt *[3]T) {
	h := fnvString(fnvByte(fnvOffset, 'b'), last)
	bumpAt(v, fnvString(fnvByte(h, ' '), next), wt[2])
	r0, _ := utf8.DecodeLastRuneInString(last)
	r2, _ := utf8.DecodeRuneInString(next)
	bumpAt(v, fnvRune(fnvRune(fnvRune(fnvByte(fnvOffset, 't'), r0), ' '), r2), wt[0])
}

// putWords returns a word list to wordsPool, emptied so that the pool keeps no text alive.
func putWords(wp *[]string, words []string) {
	clear(words)
	*wp = words[:0]
	wordsPool.Put(wp)
}

// builtinTail reports whether q's context is some lines, then "user: " and the question, and
// returns those lines. The question must start with an ASCII byte: text.Canon of "user: "
// and the question's first line is then "user: " and Canon of that line (NFKC composes nothing
// across an ASCII rune, and the space runs Canon collapses and trims end a word either way),
// which tokenizes as "user" and the line's words.
func builtinTail(q query) (string, bool) {
	const role = "user: "
	if q.question == "" || q.question[0] >= utf8.RuneSelf || !strings.HasSuffix(q.context, q.question) {
		return "", false
	}
	p, ok := strings.CutSuffix(q.context[:len(q.context)-len(q.question)], role)
	if !ok || p != "" && !strings.HasSuffix(p, "\n") {
		return "", false
	}
	return p, true
}

// embedWords is the built-in embedding of a text's Normalize words.
func embedWords(words []string) []float32 {
	v := make([]float32, BuiltinDim)
	embedWordsInto(v, words)
	return v
}

// embedWordsInto writes the built-in embedding of words into v (BuiltinDim long, all zero).
func embedWordsInto(v []float32, words []string) {
	addFeatures(v, words, "")
	normalizeCounts(v[:BuiltinDim])
}

// featureSum is what the built-in embedder adds feature weights into: float32 sums of the
// weights, or int32 sums of twice them (exact at any length; the same numbers, halved, as long
// as the float32 sums are: see featuresQueryInto).
type featureSum interface{ float32 | int32 }

// The weights of a trigram, a word and a bigram, as floats and doubled as integers.
var (
	floatWeights = [3]float32{weightTrigram, weightWord, weightBigram}
	countWeights = [3]int32{2 * weightTrigram, 2 * weightWord, 2 * weightBigram}
)

// addFeatures adds to v the weights of the features of a text's words: the words, the pairs of
// words, and the character trigrams of " " + the words joined by " " + " ". With next, words
// are followed by a word next and the text goes on: then also the pair of the last word and
// next, and of the trigrams only those that start before the space ahead of next (the others
// are next's text's own).
func addFeatures(v []float32, words []string, next string) {
	addWeights(v, words, next, &floatWeights)
}

// addWeights is addFeatures with the weights wt (trigram, word, bigram) into sums of type T.
func addWeights[T featureSum](v []T, words []string, next string, wt *[3]T) {
	v = v[:BuiltinDim]
	bump := func(h uint64, w T) { bumpAt(v, h, w) }
	// A word's bytes are read once for three hashes side by side: the word's ('w', w), its pair
	// with the word before ('b', the word before, ' ', w), and the start of its pair with the
	// word after ('b', w, ' '), which the next word goes on with.
	var after uint64 // 'b', the word before, ' '
	for i, w := range words {
		hw, hb, ha := fnvByte(fnvOffset, 'w'), after, fnvByte(fnvOffset, 'b')
		for j := 0; j < len(w); j++ {
			hw, hb, ha = fnvByte(hw, w[j]), fnvByte(hb, w[j]), fnvByte(ha, w[j])
		}
		bump(hw, wt[1])
		if i > 0 {
			bump(hb, wt[2])
		}
		after = fnvByte(ha, ' ')
	}
	if next != "" && len(words) > 0 {
		bump(fnvString(after, next), wt[2])
	}
	// The trigrams, a window sliding one rune at a time, without building the text. The hash of
	// 't' and the window's last two runes, and of 't' and its last rune, are carried from one
	// rune to the next, so each rune's three hashing steps are independent of one another.
	t := fnvByte(fnvOffset, 't')
	var h1, h2 uint64 // 't' and the last rune; 't' and the last two
	n := 0
	tri := func(c rune) {
		if n >= 2 {
			bump(fnvRune(h2, c), wt[0])
		}
		h1, h2 = fnvRune(t, c), fnvRune(h1, c)
		n++
	}
	tri(' ')
	for i, w := range words {
		if i > 0 {
			tri(' ')
		}
		for _, c := range w {
			tri(c)
		}
	}
	tri(' ') // the end, or the space before next
	if next != "" {
		r, _ := utf8.DecodeRuneInString(next)
		tri(r)
	}
}

// bumpAt adds w to the coordinate of v the feature hashed h falls in, or subtracts it.
func bumpAt[T featureSum](v []T, h uint64, w T) {
	h ^= h >> 33 // fmix64: FNV's high bits mix poorly on short inputs
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	if h>>63 == 1 {
		w = -w
	}
	v[h%BuiltinDim] += w
}

// prefixCache keeps the feature counts (countWeights) of a few conversations' lines before
// their last user message, and "user": a service's fixed system prompt is the same lines before
// every question, and a server may carry a few services (tenants, or one-message calls beside
// calls with a system prompt), whose queries come interleaved. A prefix is kept when it is
// offered again among the last prefixSlots offers (lookups of kept ones offer nothing), so
// conversations that share nothing allocate nothing; it takes the place of the one kept
// longest. Safe for concurrent use.
type prefixCache struct {
	ents     [prefixSlots]atomic.Pointer[prefixEntry]
	next     atomic.Uint32              // the slot the next prefix kept takes, modulo prefixSlots
	seen     [prefixSlots]atomic.Uint64 // the hashes of the last prefixes offered
	nextSeen atomic.Uint32              // the one the next offer writes, modulo prefixSlots
}

// prefixSlots is how many prefixes the cache keeps.
const prefixSlots = 4

type prefixEntry struct {
	prefix string
	counts [BuiltinDim]int32
}

// maxCachedPrefix is the longest prefix kept.
const maxCachedPrefix = 4 << 10

var (
	prefixCounts prefixCache
	prefixSeed   = maphash.MakeSeed()
)

// lookup returns the entry of prefix, nil when it is not one of those kept.
func (c *prefixCache) lookup(prefix string) *prefixEntry {
	for i := range c.ents {
		if e := c.ents[i].Load(); e != nil && e.prefix == prefix {
			return e
		}
	}
	return nil
}

// offer keeps prefix, whose words and "user" are words, when it is among the last ones offered.
func (c *prefixCache) offer(prefix string, words []string) {
	if len(prefix) > maxCachedPrefix {
		return
	}
	h := maphash.String(prefixSeed, prefix)
	again := false
	for i := range c.seen {
		again = again || c.seen[i].Load() == h
	}
	if !again {
		c.seen[(c.nextSeen.Add(1)-1)%prefixSlots].Store(h)
		return
	}
	e := &prefixEntry{prefix: strings.Clone(prefix)}
	addWeights(e.counts[:], words, "", &countWeights)
	c.ents[(c.next.Add(1)-1)%prefixSlots].Store(e)
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
func normalize(v []float32) float64 { return normalizeScaled(v, 1) }

// normalizeScaled is normalize, then each coordinate multiplied by scale, in one pass.
func normalizeScaled(v []float32, scale float32) float64 {
	var sum float64
	for _, x := range v {
		sum += float64(x) * float64(x)
	}
	return divide(v, sum, scale)
}

// normalizeCounts is normalize for the built-in embedder's sums of feature weights, which are
// multiples of 0.5 (so are float32 sums and roundings of them): their squares are multiples of
// 0.25, which float64 adds exactly in any order below 2⁵¹, so four running sums give normalize's
// sum. A larger one is summed again in normalize's order.
func normalizeCounts(v []float32) float64 {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(v); i += 4 {
		s0 += float64(v[i]) * float64(v[i])
		s1 += float64(v[i+1]) * float64(v[i+1])
		s2 += float64(v[i+2]) * float64(v[i+2])
		s3 += float64(v[i+3]) * float64(v[i+3])
	}
	for ; i < len(v); i++ {
		s0 += float64(v[i]) * float64(v[i])
	}
	sum := s0 + s1 + s2 + s3
	if sum >= 1<<50 {
		return normalize(v)
	}
	return divide(v, sum, 1)
}

// joinSpan bounds the counts joinCounts reads from a table: each is in [-joinSpan, joinSpan].
const joinSpan = 127

// joinCounts writes into v (2·BuiltinDim long) what normalizeCounts, then joinInPlace's
// normalizeScaled(√2/2), make of each half of the sums c/2 (c from countQueryInto), and reports
// whether both halves are nonzero. A result is a function of the coordinate's sum alone, with
// two lengths common to the half, so it divides once per distinct sum (a text's are a few small
// multiples of 0.5) rather than twice per coordinate: the same divisions of the same floats, the
// same results. The second length's sum runs in normalizeScaled's order, one addition a
// coordinate (a zero's adds +0, which changes no sum of squares), the two halves' side by side.
// Counts beyond the span take the two passes.
func joinCounts(v []float32, c *[2 * BuiltinDim]int32) bool {
	const half = BuiltinDim
	qc, cc := (*[half]int32)(c[:half]), (*[half]int32)(c[half:])
	var sq, sc int32 // the squares of the counts: below 2³¹ within the span
	var qlo, qhi, clo, chi int32
	for i := range half {
		a, b := qc[i], cc[i]
		sq += a * a
		sc += b * b
		qlo, qhi = min(qlo, a), max(qhi, a)
		clo, chi = min(clo, b), max(chi, b)
	}
	if min(qlo, clo) < -joinSpan || max(qhi, chi) > joinSpan {
		for i, x := range c {
			v[i] = float32(x) / 2
		}
		return joinCountsSlow(v[:half]) && joinCountsSlow(v[half:])
	}
	// normalizeCounts's sums of squares, exactly: a quarter of these.
	qn, cn := math.Sqrt(float64(sq)/4), math.Sqrt(float64(sc)/4)
	if qn == 0 || cn == 0 {
		return false
	}
	r := counts{qc: qc, cc: cc, qn: qn, cn: cn, qlo: qlo, qhi: qhi, clo: clo, chi: chi}
	if min(qlo, clo) >= -smallSpan && max(qhi, chi) <= smallSpan {
		// A short text's counts are small: tables of their span are less stack to clear.
		var t struct {
			qt, ct [2*smallSpan + 1]float32
			qs, cs [2*smallSpan + 1]float64
		}
		joinTabled(v, &r, smallSpan, t.qt[:], t.ct[:], t.qs[:], t.cs[:])
	} else {
		var t struct {
			qt, ct [2*joinSpan + 1]float32
			qs, cs [2*joinSpan + 1]float64
		}
		joinTabled(v, &r, joinSpan, t.qt[:], t.ct[:], t.qs[:], t.cs[:])
	}
	return true
}

// smallSpan is the span of joinCounts's smaller tables.
const smallSpan = 31

// counts are a query's two halves of counts (in [lo, hi] each) and their lengths.
type counts struct {
	qc, cc             *[BuiltinDim]int32
	qn, cn             float64
	qlo, qhi, clo, chi int32
}

// joinTabled is the rest of joinCounts with tables for counts in [-span, span], by count plus
// span (2·span+1 long, all zero): for each count its float in the question half and in the
// context half, and their squares (exact in float64).
func joinTabled(v []float32, r *counts, span int32, qt, ct []float32, qs, cs []float64) {
	const half = BuiltinDim
	qc, cc := r.qc, r.cc
	for k := r.qlo + span; k <= r.qhi+span; k++ {
		qt[k] = float32(float64(float32(k-span)/2) / r.qn)
		qs[k] = float64(qt[k]) * float64(qt[k])
	}
	for k := r.clo + span; k <= r.chi+span; k++ {
		ct[k] = float32(float64(float32(k-span)/2) / r.cn)
		cs[k] = float64(ct[k]) * float64(ct[k])
	}
	var sq2, sc2 float64
	for i := range half {
		sq2 += qs[qc[i]+span]
		sc2 += cs[cc[i]+span]
	}
	qn2, cn2 := math.Sqrt(sq2), math.Sqrt(sc2)
	const scale float32 = math.Sqrt2 / 2
	for k := r.qlo + span; k <= r.qhi+span; k++ {
		qt[k] = float32(float64(qt[k])/qn2) * scale
	}
	for k := r.clo + span; k <= r.chi+span; k++ {
		ct[k] = float32(float64(ct[k])/cn2) * scale
	}
	qv, cv := (*[half]float32)(v[:half]), (*[half]float32)(v[half:])
	for i := range half {
		qv[i], cv[i] = qt[qc[i]+span], ct[cc[i]+span]
	}
}

// joinCountsSlow is joinCounts in two passes over v.
func joinCountsSlow(v []float32) bool {
	normalizeCounts(v)
	return normalizeScaled(v, math.Sqrt2/2) != 0
}

// divide divides v by the root of sum, its squares' sum, and multiplies it by scale; a zero
// vector stays zero. It reports the root.
func divide(v []float32, sum float64, scale float32) float64 {
	n := math.Sqrt(sum)
	if n == 0 {
		return 0
	}
	for i := range v {
		v[i] = float32(float64(v[i])/n) * scale
	}
	return n
}

// wordCounter adds the features of a text's words (countWeights) to v as the words are read,
// what addWeights(v, words, "", &countWeights) adds for the whole list: the sums are integers,
// so their order is free. A word is given as written in an ASCII text and hashed lower-cased, so
// the text is neither lower-cased nor split into a list first.
type wordCounter struct {
	v      *[BuiltinDim]int32
	words  int
	after  uint64 // 'b', the word before, ' '
	h1, h2 uint64 // 't' and the last rune; 't' and the last two
	runes  int    // trigram window runes so far
	// lead is 'b', "user", ' ' and the first word: the hash of its pair with "user", and first
	// the first word's first byte (addBoundary).
	lead  uint64
	first byte
}

// The hash seeds of a trigram, of a word, of a pair of words, and of "user"'s pair with the
// word after it.
var (
	triSeed  = fnvByte(fnvOffset, 't')
	wordSeed = fnvByte(fnvOffset, 'w')
	pairSeed = fnvByte(fnvOffset, 'b')
	userLead = fnvByte(fnvString(pairSeed, "user"), ' ')
)

func newWordCounter(v *[BuiltinDim]int32) wordCounter {
	f := wordCounter{v: v, lead: userLead}
	f.tri(' ')
	return f
}

func (f *wordCounter) tri(c byte) {
	if f.runes >= 2 {
		bumpAt(f.v[:], fnvRune(f.h2, rune(c)), countWeights[0])
	}
	f.h1, f.h2 = fnvRune(triSeed, rune(c)), fnvRune(f.h1, rune(c))
	f.runes++
}

// word counts one word of an ASCII text (not empty), as written: its bytes are lower-cased.
func (f *wordCounter) word(w string) {
	if f.words > 0 {
		f.tri(' ')
	} else {
		f.lead, f.first = fnvLower(f.lead, w), lowerASCII(w[0])
	}
	hw, hb, ha := wordSeed, f.after, pairSeed
	h1, h2, runes := f.h1, f.h2, f.runes // tri's, inline: a call a byte costs more than it does
	for j := 0; j < len(w); j++ {
		c := lowerASCII(w[j])
		hw, hb, ha = fnvByte(hw, c), fnvByte(hb, c), fnvByte(ha, c)
		if runes >= 2 {
			bumpAt(f.v[:], fnvRune(h2, rune(c)), countWeights[0])
		}
		h1, h2 = fnvRune(triSeed, rune(c)), fnvRune(h1, rune(c))
		runes++
	}
	f.h1, f.h2, f.runes = h1, h2, runes
	bumpAt(f.v[:], hw, countWeights[1])
	if f.words > 0 {
		bumpAt(f.v[:], hb, countWeights[2])
	}
	f.after = fnvByte(ha, ' ')
	f.words++
}

// end closes the trigram window after the last word.
func (f *wordCounter) end() { f.tri(' ') }

// boundary adds to v what addBoundary(v, "user", first word, &countWeights) adds, for the words
// counted so far (at least one).
func (f *wordCounter) boundary(v []int32) {
	bumpAt(v, f.lead, countWeights[2])
	bumpAt(v, fnvRune(fnvRune(fnvRune(triSeed, 'r'), ' '), rune(f.first)), countWeights[0])
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		c += 'a' - 'A'
	}
	return c
}

// fnvLower is fnvString of s lower-cased (ASCII).
func fnvLower(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = fnvByte(h, lowerASCII(s[i]))
	}
	return h
}

// asciiBreaks marks the ASCII punctuation that ends a word (unicode.IsPunct, less keptPunct).
var asciiBreaks = func() (t [utf8.RuneSelf]bool) {
	for c := range t {
		t[c] = unicode.IsPunct(rune(c)) && strings.IndexByte(keptPunct, byte(c)) < 0
	}
	return t
}()

// countNormWords counts the words appendNormWords makes of s with f, in one pass over s's bytes
// by the same rules, and reports false, having counted part of them, when s is not ASCII.
func countNormWords(f *wordCounter, s string) bool {
	start, apos := -1, false // the word is s[start:i]; start < 0: no word
	var prev byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf {
			return false
		}
		c = lowerASCII(c)
		if c == '`' {
			c = '\''
		}
		var next byte
		if i+1 < len(s) {
			next = s[i+1]
		}
		switch {
		case asciiSpace[c]:
			start, apos = f.flush(s, start, i, apos)
		case (c == '.' || c == ',' || c == ':') && isDigit(prev) && isDigit(next):
			if start < 0 {
				start = i // 3.5, 1,000, 10:30
			}
		case c == '-' && isDigit(next) && !isDigit(prev) && !isLetter(prev):
			_, apos = f.flush(s, start, i, apos)
			start = i // -4
		case c == '\'':
			apos = apos || start >= 0 // kept until the word ends: contractions are read with it
		case asciiBreaks[c]:
			start, apos = f.flush(s, start, i, apos)
		default:
			if start < 0 {
				start = i
			}
		}
		prev = c
	}
	f.flush(s, start, len(s), apos)
	return true
}

// flush counts the words of s[start:end] (none when start < 0), as appendASCIIWord makes
// them, and returns the state of no word. Only a word that may be a contraction is lower-cased
// as a string (allocating when it has upper-case letters).
func (f *wordCounter) flush(s string, start, end int, apos bool) (int, bool) {
	if start < 0 {
		return -1, false
	}
	w := s[start:end]
	if !apos && !mayBeWholeEnds(lowerASCII(w[0]), lowerASCII(w[len(w)-1])) {
		f.word(w)
		return -1, false
	}
	var buf [4]string
	for _, p := range appendParts(buf[:0], strings.ReplaceAll(strings.ToLower(w), "`", "'"), apos) {
		f.word(p)
	}
	return -1, false
}
