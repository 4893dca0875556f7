package kv

import "testing"

// TestScanMasksAssembly: each assembly version this processor runs computes the Go version's
// mask.
func TestScanMasksAssembly(t *testing.T) {
	for _, k := range []struct {
		name string
		ok   bool
		f    blockFunc
	}{{"POPCNT", hasPOPCNT, blockMaskPOPCNT}, {"AVX-512", hasAVX512, blockMaskAVX512}} {
		t.Run(k.name, func(t *testing.T) {
			if !k.ok {
				t.Skipf("this processor has no %s", k.name)
			}
			checkBlockMask(t, k.f)
		})
	}
}
