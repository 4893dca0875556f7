package kv

import "golang.org/x/sys/cpu"

// Under GOAMD64=v1 (the default), math/bits.OnesCount64 checks for POPCNT at every call and
// keeps a call to the fallback, around which a Go loop spills its registers: ~3 ns a sketch for
// the whole-sketch count instead of ~1.3 with the instruction. These are the two passes in
// assembly (scan_amd64.s), with POPCNT or with AVX-512 (four first halves a register).

//go:noescape
func headMaskPOPCNT(heads *[blockSlots * headWords]uint64, s0, s1 uint64, cutoff int) uint64

//go:noescape
func headMaskAVX512(heads *[blockSlots * headWords]uint64, s0, s1 uint64, cutoff int) uint64

//go:noescape
func fullMaskPOPCNT(block *[blockSlots * sketchWords]uint64, sk *sketch, cutoff int, m uint64) uint64

var (
	hasPOPCNT = cpu.X86.HasPOPCNT // every x86-64 since 2008
	hasAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VPOPCNTDQ
)

// headMask is headMaskGo, in the fastest version this processor runs. (Calls, not function
// variables: through one, the arguments escape and each search allocates.)
func headMask(heads *[blockSlots * headWords]uint64, s0, s1 uint64, cutoff int) uint64 {
	switch {
	case hasAVX512:
		return headMaskAVX512(heads, s0, s1, cutoff)
	case hasPOPCNT:
		return headMaskPOPCNT(heads, s0, s1, cutoff)
	}
	return headMaskGo(heads, s0, s1, cutoff)
}

// fullMask is fullMaskGo, with POPCNT where the processor has it.
func fullMask(block *[blockSlots * sketchWords]uint64, sk *sketch, cutoff int, m uint64) uint64 {
	if hasPOPCNT {
		return fullMaskPOPCNT(block, sk, cutoff, m)
	}
	return fullMaskGo(block, sk, cutoff, m)
}
