package kv

import "math/bits"

// blockSlots is how many sketches nearMask compares at once, one bit of its result each.
const blockSlots = 64

// nearMaskGo is nearMask in Go: bit i is set when sketch i of block is within cutoff bits of sk.
// Where math/bits.OnesCount64 is one instruction (arm64, or amd64 built with GOAMD64=v2 and up)
// it is as fast as the assembly; under GOAMD64=v1, each count checks for POPCNT and keeps a call
// to the fallback, around which the loop spills its registers: 3 ns a sketch instead of 1.3.
func nearMaskGo(block *[blockSlots * sketchWords]uint64, sk *sketch, cutoff int) uint64 {
	s0, s1, s2, s3 := sk[0], sk[1], sk[2], sk[3]
	var m uint64
	for i := range blockSlots {
		w := (*sketch)(block[i*sketchWords : (i+1)*sketchWords])
		if bits.OnesCount64(w[0]^s0)+bits.OnesCount64(w[1]^s1)+bits.OnesCount64(w[2]^s2)+bits.OnesCount64(w[3]^s3) <= cutoff {
			m |= 1 << i
		}
	}
	return m
}
