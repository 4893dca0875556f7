package kv

import (
	"cmp"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"

	chromem "github.com/philippgille/chromem-go"
)

// The similarity index is a sign sketch (SimHash) per entry: the signs of 256 coordinates of the
// vector after a pseudo-random rotation, one bit each. Two unit vectors with cosine c differ on a
// bit with probability acos(c)/π, so the Hamming distance between sketches estimates the angle.
// A query scans the sketches (scan.go: each whole one, and its first half against a looser
// cutoff of its own) and keeps those within a cutoff set four standard
// deviations above the distance expected at the threshold; only those are scored exactly. At a
// threshold of 0.95 the cutoff is 46 bits: an entry at exactly the threshold is missed with
// probability ~5e-5 (4.5e-5 the whole sketch, 3.3e-6 its first half), and an unrelated entry
// (c ≈ 0.6) survives with probability ~1e-5. A miss costs one model call, never a wrong answer.
//
// The rotation is HD₃ (Andoni, Indyk, Laarhoven, Razenshteyn and Schmidt, "Practical and Optimal
// LSH for Angular Distance", NeurIPS 2015): three rounds of random sign flips, each followed by a
// Walsh-Hadamard transform, on the vector padded to a power of two. It stands in for 256 Gaussian
// hyperplanes: 3·n·log₂n additions instead of 256 multiply-adds per nonzero coordinate
// (BenchmarkSketch), and additions and sign flips only, so the bits are the same on every
// platform (no fused multiply-add); its distances follow acos(c)/π closely on real questions, so
// a search scores few candidates exactly (BenchmarkLookup). Sketches
// are never stored or sent: every place that indexes a vector (load, learn, the Redis stream,
// import) sketches it in this process, so changing the definition needs no migration.
// TestSketchRecall and TestSketchBuiltinPairs check the distances against acos(c)/π.
const (
	sketchBits  = 256
	sketchWords = sketchBits / 64
	// lshSeed fixes the sign flips, so sketches are the same in every process.
	lshSeed = 0x0e0c_6b76_0000_0002
)

// lsh is the rotation for one dimension. It is read-only after newLSH.
type lsh struct {
	dim   int
	n     int          // transform length: a power of two, at least dim and sketchBits
	signs [3][]float32 // ±1 for each round
}

func newLSH(dim int) *lsh {
	n := sketchBits
	for n < dim {
		n *= 2
	}
	r := rand.New(rand.NewPCG(lshSeed, uint64(dim)))
	l := &lsh{dim: dim, n: n}
	for k := range l.signs {
		l.signs[k] = make([]float32, n)
		for i := range l.signs[k] {
			l.signs[k][i] = float32(1 - 2*int(r.Uint64()&1))
		}
	}
	return l
}

// sketch is a vector's sign bits.
type sketch [sketchWords]uint64

// sketch rotates v and takes the signs of the first sketchBits coordinates.
func (l *lsh) sketch(v []float32) sketch {
	if l.n <= 2*BuiltinDim {
		// The built-in embedder's: half the stack of the larger buffer to clear.
		var buf [2 * BuiltinDim]float32
		return l.rotate(buf[:l.n], v)
	}
	var buf [1024]float32
	if l.n <= len(buf) {
		return l.rotate(buf[:l.n], v)
	}
	return l.rotate(make([]float32, l.n), v)
}

// rotate is sketch with x, l.n floats, all zero, to work in.
func (l *lsh) rotate(x, v []float32) sketch {
	copy(x, v)
	return l.rotateInPlace(x)
}

// rotateInPlace is the sketch of x, l.n floats (the vector, then zeros), rotated in place.
func (l *lsh) rotateInPlace(x []float32) sketch {
	for _, sg := range l.signs {
		flipFWHT(x, sg)
	}
	return signs(x)
}

// signsGo is signs where no assembly version runs.
func signsGo(x []float32) sketch {
	var s sketch
	for k, a := range x[:sketchBits] {
		if a >= 0 {
			s[k/64] |= 1 << (k % 64)
		}
	}
	return s
}

// flipFWHTGo multiplies x by signs (as long) and transforms it with fwht: flipFWHT where no
// assembly version runs.
func flipFWHTGo(x, signs []float32) {
	for i, f := range signs[:len(x)] {
		x[i] *= f
	}
	fwht(x)
}

// fwht is the unnormalised Walsh-Hadamard transform of x in place; len(x) is a power of two, at
// least 4. Two levels a pass (radix 4: the same additions in the same order as one level at a
// time, half the loads and stores).
func fwht(x []float32) {
	n := len(x)
	for i := 0; i+4 <= n; i += 4 { // levels 1 and 2
		q := (*[4]float32)(x[i : i+4])
		p0, p1, p2, p3 := q[0]+q[1], q[0]-q[1], q[2]+q[3], q[2]-q[3]
		q[0], q[1], q[2], q[3] = p0+p2, p1+p3, p0-p2, p1-p3
	}
	h := 4
	for ; 4*h <= n; h *= 4 {
		for i := 0; i < n; i += 4 * h {
			a, b, c, d := x[i:i+h], x[i+h:i+2*h], x[i+2*h:i+3*h], x[i+3*h:i+4*h]
			for j := range a {
				p0, p1, p2, p3 := a[j]+b[j], a[j]-b[j], c[j]+d[j], c[j]-d[j]
				a[j], b[j], c[j], d[j] = p0+p2, p1+p3, p0-p2, p1-p3
			}
		}
	}
	if h < n { // one level left
		a, b := x[:h], x[h:2*h]
		for j := range a {
			a[j], b[j] = a[j]+b[j], a[j]-b[j]
		}
	}
}

// hammingCutoff is the largest sketch distance searched for a threshold: the expected distance
// at the threshold plus four standard deviations.
func hammingCutoff(threshold float32) int {
	f := math.Acos(math.Max(-1, math.Min(1, float64(threshold)))) / math.Pi
	return int(math.Ceil(sketchBits*f + 4*math.Sqrt(sketchBits*f*(1-f))))
}

// entry is one learned answer. Entries are immutable once inserted, so a reader may keep one
// after the collection's lock is released.
type entry struct {
	id       string
	vec      []float32 // unit length: question half then context half, each of length 1/√2
	sketch   sketch
	seq      uint64 // insertion order within the collection; eviction is FIFO on it
	slot     int32  // position in the collection's slots, set once by insert
	question string
	context  string
	params   string
	answer   string
	joules   float64
	ctok     int   // completion tokens of the original answer
	created  int64 // unix seconds

	// sig is sign(context), made the first time the entry is a candidate (signature): a hit
	// signs the query's context and each candidate's, and an entry that answers once tends to
	// answer again. Only entries that were candidates hold one.
	sig atomic.Pointer[signature]
}

// entryOverhead is what an entry holds beyond its texts and vector: its sketch, fields, map
// and slot.
const entryOverhead = 256 + 8*sketchWords

// size is about how many bytes e holds in memory.
func (e *entry) size() int64 {
	return int64(entryOverhead + len(e.id) + len(e.question) + len(e.context) + len(e.params) + len(e.answer) + 4*len(e.vec))
}

// signature returns sign(e.context), signing it only the first time.
func (e *entry) signature() signature {
	if p := e.sig.Load(); p != nil {
		return *p
	}
	sig := sign(e.context)
	e.sig.Store(&sig)
	return sig
}

// collection is the index of one tenant's answers from one model. It is safe for concurrent use.
type collection struct {
	tenant, model string
	store         *chromem.Collection // nil when the stage is in memory
	used          atomic.Uint64       // the last use (bound.go): Stage.used holds its address

	mu     sync.RWMutex
	byID   map[string]*entry
	slots  []*entry // slot → entry; nil for a free slot
	blocks []uint64 // the slots' sketches, blockSlots slots a block, word by word (scan.go, setSketch)
	free   []int32
	fifo   []*entry // insertion order; entries no longer in byID are skipped
	head   int
	seq    uint64
	bytes  int64 // the entries' sizes
}

func newCollection(tenant, model string) *collection {
	return &collection{tenant: tenant, model: model, byID: map[string]*entry{}}
}

func (c *collection) len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.byID)
}

// size is the entries' sizes together.
func (c *collection) size() int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.bytes
}

// nextSeq reserves the next insertion number.
func (c *collection) nextSeq() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	return c.seq
}

// insert adds e, replacing an entry with the same id, then evicts the oldest entries beyond max
// (max ≤ 0: no bound). It returns the evicted entries and whether e was new (replaced no entry),
// so that a count of entries moves by added-len(evicted).
func (c *collection) insert(e *entry, max int) (evicted []*entry, added bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	added = true
	if old := c.byID[e.id]; old != nil {
		c.removeLocked(old)
		added = false
	}
	if e.seq > c.seq {
		c.seq = e.seq
	}
	var slot int32
	if n := len(c.free); n > 0 {
		slot, c.free = c.free[n-1], c.free[:n-1]
		c.slots[slot] = e
	} else {
		slot = int32(len(c.slots))
		c.slots = append(c.slots, e)
	}
	c.setSketch(slot, &e.sketch)
	e.slot = slot // e is not visible to readers yet
	c.byID[e.id] = e
	c.bytes += e.size()
	c.fifo = append(c.fifo, e)
	if max > 0 {
		evicted = c.trimLocked(max)
	}
	return evicted, added
}

// trimLocked evicts the oldest entries until at most max remain, and returns them. c.mu is held.
func (c *collection) trimLocked(max int) []*entry {
	return c.evictLocked(func() bool { return len(c.byID) > max })
}

// evictLocked evicts the oldest entries while over says so, and returns them. c.mu is held.
func (c *collection) evictLocked(over func() bool) []*entry {
	var evicted []*entry
	for over() && c.head < len(c.fifo) {
		old := c.fifo[c.head]
		c.fifo[c.head] = nil
		c.head++
		if c.byID[old.id] == old {
			c.removeLocked(old)
			evicted = append(evicted, old)
		}
	}
	if c.head > 1024 && c.head > len(c.fifo)/2 {
		c.fifo = append(c.fifo[:0:0], c.fifo[c.head:]...)
		c.head = 0
	}
	return evicted
}

// setSketch writes sk, the sketch in slot, into c.blocks: word w of slot i of a block at
// w*blockSlots+i, so that the scan reads one word of eight slots in one load (scan.go). A block
// is allocated whole when its first slot is. c.mu is held.
func (c *collection) setSketch(slot int32, sk *sketch) {
	b, i := int(slot)/blockSlots, int(slot)%blockSlots
	if need := (b + 1) * blockWords; len(c.blocks) < need {
		c.blocks = append(c.blocks, make([]uint64, need-len(c.blocks))...)
	}
	blk := (*[blockWords]uint64)(c.blocks[b*blockWords:])
	for w := range sketchWords {
		blk[w*blockSlots+i] = sk[w]
	}
}

func (c *collection) removeLocked(e *entry) {
	slot := e.slot
	if c.byID[e.id] != e {
		return
	}
	delete(c.byID, e.id)
	c.bytes -= e.size()
	c.slots[slot] = nil
	c.free = append(c.free, slot)
}

// entries returns the live entries in insertion order.
func (c *collection) entries() []*entry {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]*entry, 0, len(c.byID))
	for _, e := range c.fifo[c.head:] {
		if e != nil && c.byID[e.id] == e {
			out = append(out, e)
		}
	}
	return out
}

// scored is a candidate with its two cosines.
type scored struct {
	e                 *entry
	question, context float32
}

// search returns the entries whose question half and context half are both at least threshold
// similar to v's, best first. sk is v's sketch.
func (c *collection) search(v []float32, sk sketch, threshold float32) []scored {
	return c.searchCut(v, sk, threshold, cutoffsFor(threshold))
}

// searchCut is search with the threshold's cutoffs (cutoffsFor) made already.
func (c *collection) searchCut(v []float32, sk sketch, threshold float32, cut cutoffs) []scored {
	return c.searchLazy(func() []float32 { return v }, sk, threshold, cut)
}

// searchLazy is searchCut for the vector vecOf returns: it is called only when the sketch scan
// finds a candidate, at most once.
func (c *collection) searchLazy(vecOf func() []float32, sk sketch, threshold float32, cut cutoffs) []scored {
	var out []scored
	var buf [32]int32
	var v []float32
	c.mu.RLock()
	for _, slot := range appendNear(c.blocks, len(c.slots), &sk, cut, buf[:0]) {
		if v == nil {
			v = vecOf()
		}
		half := len(v) / 2
		e := c.slots[slot]
		if e == nil || len(e.vec) != len(v) {
			continue
		}
		q := 2 * dot(v[:half], e.vec[:half])
		if q < threshold {
			continue
		}
		ctx := 2 * dot(v[half:], e.vec[half:])
		if ctx < threshold {
			continue
		}
		out = append(out, scored{e: e, question: q, context: ctx})
	}
	c.mu.RUnlock()
	slices.SortFunc(out, func(a, b scored) int { return cmp.Compare(b.question+b.context, a.question+a.context) })
	return out
}

// cutoffs are the scan's two: for the first word of a sketch and for the whole of it.
type cutoffs struct{ head, full int }

func cutoffsFor(threshold float32) cutoffs {
	return cutoffs{head: headCutoff(threshold), full: hammingCutoff(threshold)}
}

// within reports whether s passes both of the scan's cutoffs for a query sketched q.
func within(q, s *sketch, c cutoffs) bool {
	head := bits.OnesCount64(q[0]^s[0]) + bits.OnesCount64(q[1]^s[1])
	return head <= c.head && head+bits.OnesCount64(q[2]^s[2])+bits.OnesCount64(q[3]^s[3]) <= c.full
}

// appendNear appends to out, in order, the slots below n whose sketch is within both cutoffs of
// sk; blocks holds the sketches (setSketch's layout). It is the loop every search runs over the
// whole collection (scan.go), on one goroutine: BenchmarkLookup, BenchmarkScan and
// BenchmarkServeMiss's search measure it against real questions' sketches.
func appendNear(blocks []uint64, n int, sk *sketch, c cutoffs, out []int32) []int32 {
	if c.head < 0 || c.full < 0 {
		return out
	}
	for s := 0; s < n; s += blockSlots {
		m := blockMask((*[blockWords]uint64)(blocks[s/blockSlots*blockWords:]), sk, c)
		if rest := n - s; rest < blockSlots { // the last block's slots beyond n hold nothing
			m &= 1<<rest - 1
		}
		for ; m != 0; m &= m - 1 {
			out = append(out, int32(s+bits.TrailingZeros64(m)))
		}
	}
	return out
}

func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return s0 + s1 + s2 + s3
}

// join makes the stored vector from the two embeddings: each normalised and scaled by 1/√2, so
// the whole has unit length (chromem-go keeps it as is) and a half's cosine is twice its dot.
// It reports false when either text embedded to nothing.
func join(question, context []float32) ([]float32, bool) {
	if len(question) == 0 || len(question) != len(context) {
		return nil, false
	}
	v := make([]float32, 2*len(question))
	copy(v, question)
	copy(v[len(question):], context)
	return joinInPlace(v)
}

// joinInPlace is join for a vector that holds the two embeddings already, half and half.
func joinInPlace(v []float32) ([]float32, bool) {
	half := len(v) / 2
	if normalizeScaled(v[:half], math.Sqrt2/2) == 0 || normalizeScaled(v[half:], math.Sqrt2/2) == 0 {
		return nil, false
	}
	return v, true
}
