//go:build !amd64

package kv

// nearMask is nearMaskGo: math/bits.OnesCount64 is one instruction on the other architectures
// this builds for (see scan_amd64.go).
func nearMask(block *[blockSlots * sketchWords]uint64, sk *sketch, cutoff int) uint64 {
	return nearMaskGo(block, sk, cutoff)
}
