package kv

import "math"

// The scan reads sketches 64 slots a step (a block). A block keeps its slots' sketches word by
// word (collection.blocks, setSketch): the first words of its 64 slots, then their second words,
// and so on, so that a load takes one word of eight slots and the scan streams through memory
// without a read elsewhere. A slot is kept when its first two words are within a cutoff of
// their own (headCutoff) and its whole sketch within the full one; with AVX-512 the two counts
// are made for eight slots at a time, without a branch.

// blockSlots is how many slots one step of the scan takes, one bit of a mask each.
const blockSlots = 64

// blockWords is how many words one block of sketches holds.
const blockWords = blockSlots * sketchWords

// headWords is how many words of a sketch the first cutoff counts.
const headWords = 2

// headCutoff is the cutoff for the first headWords of a sketch at a threshold: the distance
// expected at the threshold over 128 bits plus five standard deviations. At 0.95 it is 30: an
// entry at exactly the threshold has its first half beyond it with probability 3.3e-6 (the
// binomial's tail, checked by TestHeadCutoffTail for thresholds from 0.5 to 0.99), against 4.5e-5
// for the whole sketch beyond the full cutoff. A miss costs one model call, never a wrong answer.
func headCutoff(threshold float32) int {
	const n = 64 * headWords
	f := math.Acos(math.Max(-1, math.Min(1, float64(threshold)))) / math.Pi
	return int(math.Ceil(n*f + 5*math.Sqrt(n*f*(1-f))))
}

// blockMaskGo sets bit i when sketch i of block (word w at block[w*blockSlots+i]) is within both
// cutoffs of sk (within).
func blockMaskGo(block *[blockWords]uint64, sk *sketch, c cutoffs) uint64 {
	var m uint64
	for i := range blockSlots {
		s := sketch{block[i], block[blockSlots+i], block[2*blockSlots+i], block[3*blockSlots+i]}
		if within(sk, &s, c) {
			m |= 1 << i
		}
	}
	return m
}
