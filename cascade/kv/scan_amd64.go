package kv

import "golang.org/x/sys/cpu"

// nearMaskPOPCNT is nearMaskGo with the POPCNT instruction (scan_amd64.s); cutoff is not
// negative.
//
//go:noescape
func nearMaskPOPCNT(block *[blockSlots * sketchWords]uint64, sk *sketch, cutoff int) uint64

// nearMaskAVX512 is nearMaskGo with AVX-512 (scan_amd64.s), two sketches an instruction;
// cutoff is not negative.
//
//go:noescape
func nearMaskAVX512(block *[blockSlots * sketchWords]uint64, sk *sketch, cutoff int) uint64

var (
	hasPOPCNT = cpu.X86.HasPOPCNT // every x86-64 since 2008
	hasAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VPOPCNTDQ
)

// nearMask is the fastest of nearMaskAVX512, nearMaskPOPCNT and nearMaskGo this processor runs.
// (A call, not a function variable: through one, sk escapes and each search allocates it.)
func nearMask(block *[blockSlots * sketchWords]uint64, sk *sketch, cutoff int) uint64 {
	switch {
	case hasAVX512:
		return nearMaskAVX512(block, sk, cutoff)
	case hasPOPCNT:
		return nearMaskPOPCNT(block, sk, cutoff)
	}
	return nearMaskGo(block, sk, cutoff)
}
