//go:build !amd64

package kv

// headMask and fullMask are the Go versions: math/bits.OnesCount64 is one instruction on the
// other architectures this builds for (see scan_amd64.go).

func headMask(heads *[blockSlots * headWords]uint64, s0, s1 uint64, cutoff int) uint64 {
	return headMaskGo(heads, s0, s1, cutoff)
}

func fullMask(block *[blockSlots * sketchWords]uint64, sk *sketch, cutoff int, m uint64) uint64 {
	return fullMaskGo(block, sk, cutoff, m)
}
