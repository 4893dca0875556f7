package kv

import (
	"cmp"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync"

	chromem "github.com/philippgille/chromem-go"
)

// The similarity index is a sign sketch (SimHash) per entry: 256 random hyperplanes, one bit
// each for the side of the plane the vector falls on. Two unit vectors with cosine c differ on a
// bit with probability acos(c)/π, so the Hamming distance between sketches estimates the angle.
// A query scans every sketch (four XOR-and-popcounts an entry, sequential in memory) and keeps
// those within a cutoff set four standard deviations above the distance expected at the
// threshold; only those are scored exactly. At a threshold of 0.95 the cutoff is 46 bits: an
// entry at exactly the threshold is missed with probability ~3e-5, and an unrelated entry
// (c ≈ 0.6) survives with probability ~1e-5. A miss costs one model call, never a wrong answer.
const (
	sketchBits  = 256
	sketchWords = sketchBits / 64
	// lshSeed fixes the hyperplanes, so sketches are the same in every process.
	lshSeed = 0x0e0c_6b76_0000_0001
)

// lsh holds the hyperplanes for one dimension, transposed (dim × sketchBits) so that a sparse
// vector touches only its nonzero rows. It is read-only after newLSH.
type lsh struct {
	dim int
	t   []float32
}

func newLSH(dim int) *lsh {
	r := rand.New(rand.NewPCG(lshSeed, uint64(dim)))
	t := make([]float32, dim*sketchBits)
	for i := range t {
		t[i] = float32(r.NormFloat64())
	}
	return &lsh{dim: dim, t: t}
}

// sketch is a vector's sign bits.
type sketch [sketchWords]uint64

// sketch projects v on the hyperplanes. Each accumulator adds v's nonzero rows in index order, as
// one row at a time would; taking eight rows a pass keeps the accumulator in a register across
// them, an eighth of the loads and stores.
func (l *lsh) sketch(v []float32) sketch {
	var acc [sketchBits]float32
	var xs [8]float32
	var rows [8][]float32
	n := 0
	for i, x := range v {
		if x == 0 {
			continue
		}
		xs[n], rows[n] = x, l.t[i*sketchBits:(i+1)*sketchBits]
		if n++; n == 8 {
			x0, x1, x2, x3, x4, x5, x6, x7 := xs[0], xs[1], xs[2], xs[3], xs[4], xs[5], xs[6], xs[7]
			r0, r1, r2, r3 := rows[0][:sketchBits], rows[1][:sketchBits], rows[2][:sketchBits], rows[3][:sketchBits]
			r4, r5, r6, r7 := rows[4][:sketchBits], rows[5][:sketchBits], rows[6][:sketchBits], rows[7][:sketchBits]
			for k := range acc {
				a := acc[k]
				a += x0 * r0[k]
				a += x1 * r1[k]
				a += x2 * r2[k]
				a += x3 * r3[k]
				a += x4 * r4[k]
				a += x5 * r5[k]
				a += x6 * r6[k]
				a += x7 * r7[k]
				acc[k] = a
			}
			n = 0
		}
	}
	for j := range n {
		x, row := xs[j], rows[j][:sketchBits]
		for k := range acc {
			acc[k] += x * row[k]
		}
	}
	var s sketch
	for k, a := range acc {
		if a >= 0 {
			s[k/64] |= 1 << (k % 64)
		}
	}
	return s
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
}

// collection is the index of one tenant's answers from one model. It is safe for concurrent use.
type collection struct {
	tenant, model string
	store         *chromem.Collection // nil when the stage is in memory

	mu       sync.RWMutex
	byID     map[string]*entry
	slots    []*entry // slot → entry; nil for a free slot
	sketches []uint64 // sketchWords per slot, in slot order
	free     []int32
	fifo     []*entry // insertion order; entries no longer in byID are skipped
	head     int
	seq      uint64
}

func newCollection(tenant, model string) *collection {
	return &collection{tenant: tenant, model: model, byID: map[string]*entry{}}
}

func (c *collection) len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.byID)
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
		copy(c.sketches[int(slot)*sketchWords:], e.sketch[:])
	} else {
		slot = int32(len(c.slots))
		c.slots = append(c.slots, e)
		c.sketches = append(c.sketches, e.sketch[:]...)
	}
	e.slot = slot // e is not visible to readers yet
	c.byID[e.id] = e
	c.fifo = append(c.fifo, e)
	if max > 0 {
		evicted = c.trimLocked(max)
	}
	return evicted, added
}

// trimLocked evicts the oldest entries until at most max remain, and returns them. c.mu is held.
func (c *collection) trimLocked(max int) []*entry {
	var evicted []*entry
	for len(c.byID) > max && c.head < len(c.fifo) {
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

func (c *collection) removeLocked(e *entry) {
	slot := e.slot
	if c.byID[e.id] != e {
		return
	}
	delete(c.byID, e.id)
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
	half := len(v) / 2
	cutoff := hammingCutoff(threshold)
	var out []scored
	c.mu.RLock()
	all := c.sketches[:len(c.slots)*sketchWords]
	for slot := nextNear(all, &sk, cutoff, 0); slot >= 0; slot = nextNear(all, &sk, cutoff, slot+1) {
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

// nextNear is the first slot from start whose sketch in all is within cutoff bits of sk, or -1.
// A two-pass layout (words 0-1 of every entry in one array, 2-3 read only when the first half is
// within the cutoff) was 1.8x faster on random sketches but 2x slower on the sketches of real
// questions, where the first half is within the cutoff for about 40 % of the entries: kept as is.
// It is the scan every search makes over the whole collection, kept small so that the query's
// words and the count stay in registers.
func nextNear(all []uint64, sk *sketch, cutoff, start int) int {
	s0, s1, s2, s3 := sk[0], sk[1], sk[2], sk[3]
	for i := start * sketchWords; i+sketchWords <= len(all); i += sketchWords {
		w := (*[sketchWords]uint64)(all[i : i+sketchWords])
		// Three quarters of the bits often exceed the cutoff already (most stored questions
		// differ from the query): the last word is then not counted.
		d := bits.OnesCount64(w[0]^s0) + bits.OnesCount64(w[1]^s1) + bits.OnesCount64(w[2]^s2)
		if d <= cutoff && d+bits.OnesCount64(w[3]^s3) <= cutoff {
			return i / sketchWords
		}
	}
	return -1
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
	if normalize(v[:half]) == 0 || normalize(v[half:]) == 0 {
		return nil, false
	}
	for i := range v {
		v[i] *= math.Sqrt2 / 2
	}
	return v, true
}
