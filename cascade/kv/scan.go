package kv

import (
	"math"
	"math/bits"
)

// The scan reads sketches in two passes, 64 slots a step (a block), 16 blocks at a time. The
// first reads only each sketch's first two words (16 of its 32 bytes, kept apart in
// collection.heads) and keeps the slots within a cutoff of its own for those 128 bits; the
// second counts the whole sketch of those only. Reading every whole sketch bounds a lookup from below; the first pass reads half the
// bytes and keeps few slots of real questions' (BenchmarkLookup), and every sketch within the
// full cutoff but with the probability below (headCutoff).

// blockSlots is how many slots one step of the scan takes, one bit of a mask each.
const blockSlots = 64

// headWords is how many words of each sketch the first pass reads.
const headWords = 2

// headCutoff is the first pass's cutoff for a threshold: the distance expected at the threshold
// over 128 bits plus five standard deviations. At 0.95 it is 30: an entry at exactly the
// threshold has its first half beyond it with probability 3.3e-6 (the binomial's tail, checked
// by TestHeadCutoffTail for thresholds from 0.5 to 0.99), against 4.5e-5 for the whole sketch
// beyond the full cutoff. A miss costs one model call, never a wrong answer.
func headCutoff(threshold float32) int {
	const n = 64 * headWords
	f := math.Acos(math.Max(-1, math.Min(1, float64(threshold)))) / math.Pi
	return int(math.Ceil(n*f + 5*math.Sqrt(n*f*(1-f))))
}

// headMaskGo sets bit i when the first half of sketch i of a block, heads[i] and
// heads[blockSlots+i] (collection.setHead), is within cutoff bits of the query's, s0 and s1.
func headMaskGo(heads *[blockSlots * headWords]uint64, s0, s1 uint64, cutoff int) uint64 {
	var m uint64
	for i := range blockSlots {
		if bits.OnesCount64(heads[i]^s0)+bits.OnesCount64(heads[blockSlots+i]^s1) <= cutoff {
			m |= 1 << i
		}
	}
	return m
}

// fullMaskGo clears the bits of m whose sketch in block is beyond cutoff bits of sk.
func fullMaskGo(block *[blockSlots * sketchWords]uint64, sk *sketch, cutoff int, m uint64) uint64 {
	for rest := m; rest != 0; rest &= rest - 1 {
		i := bits.TrailingZeros64(rest)
		w := (*sketch)(block[i*sketchWords : (i+1)*sketchWords])
		if bits.OnesCount64(w[0]^sk[0])+bits.OnesCount64(w[1]^sk[1])+bits.OnesCount64(w[2]^sk[2])+bits.OnesCount64(w[3]^sk[3]) > cutoff {
			m &^= 1 << i
		}
	}
	return m
}
