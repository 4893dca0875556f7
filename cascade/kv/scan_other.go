//go:build !amd64

package kv

// blockMask is the Go version: math/bits.OnesCount64 is one instruction on the other
// architectures this builds for (see scan_amd64.go).
func blockMask(block *[blockWords]uint64, sk *sketch, c cutoffs) uint64 {
	return blockMaskGo(block, sk, c)
}
