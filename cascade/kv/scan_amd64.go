package kv

import "golang.org/x/sys/cpu"

// Under GOAMD64=v1 (the default), math/bits.OnesCount64 checks for POPCNT at every call and
// keeps a call to the fallback, around which a Go loop spills its registers. These are the
// scan's step in assembly (scan_amd64.s), with POPCNT (a slot at a time, its last two words
// only when its first two are within their cutoff) or with AVX-512 (eight slots a register).

//go:noescape
func blockMaskPOPCNT(block *[blockWords]uint64, sk *sketch, head, full int) uint64

//go:noescape
func blockMaskAVX512(block *[blockWords]uint64, sk *sketch, head, full int) uint64

var (
	hasPOPCNT = cpu.X86.HasPOPCNT // every x86-64 since 2008
	hasAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VPOPCNTDQ
)

// blockMask is blockMaskGo, in the fastest version this processor runs. (Calls, not function
// variables: through one, the arguments escape and each search allocates.)
func blockMask(block *[blockWords]uint64, sk *sketch, c cutoffs) uint64 {
	switch {
	case hasAVX512:
		return blockMaskAVX512(block, sk, c.head, c.full)
	case hasPOPCNT:
		return blockMaskPOPCNT(block, sk, c.head, c.full)
	}
	return blockMaskGo(block, sk, c)
}
