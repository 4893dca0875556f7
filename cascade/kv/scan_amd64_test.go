package kv

import "testing"

// TestScanMasksAssembly: each assembly version this processor runs computes the Go version's
// mask.
func TestScanMasksAssembly(t *testing.T) {
	for _, k := range []struct {
		name string
		ok   bool
		head headFunc
		full fullFunc
	}{{"POPCNT", hasPOPCNT, headMaskPOPCNT, fullMaskPOPCNT}, {"AVX-512", hasAVX512, headMaskAVX512, nil}} {
		t.Run(k.name, func(t *testing.T) {
			if !k.ok {
				t.Skipf("this processor has no %s", k.name)
			}
			checkHeadMask(t, k.head)
			if k.full != nil {
				checkFullMask(t, k.full)
			}
		})
	}
}
