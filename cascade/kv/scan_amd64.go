package kv

import "golang.org/x/sys/cpu"

// nearMaskPOPCNT is nearMaskGo with the POPCNT instruction (scan_amd64.s); cutoff is not
// negative.
//
//go:noescape
func nearMaskPOPCNT(block *[blockSlots * sketchWords]uint64, sk *sketch, cutoff int) uint64

// nearMask is nearMaskPOPCNT where the processor has POPCNT (every x86-64 since 2008), else
// nearMaskGo.
var nearMask = nearMaskGo

func init() {
	if cpu.X86.HasPOPCNT {
		nearMask = nearMaskPOPCNT
	}
}
