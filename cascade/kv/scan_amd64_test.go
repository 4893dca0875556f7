package kv

import "testing"

// TestNearMaskAssembly: each assembly version this processor runs computes nearMaskGo's mask.
func TestNearMaskAssembly(t *testing.T) {
	for _, k := range []struct {
		name string
		ok   bool
		f    maskFunc
	}{{"POPCNT", hasPOPCNT, nearMaskPOPCNT}, {"AVX-512", hasAVX512, nearMaskAVX512}} {
		t.Run(k.name, func(t *testing.T) {
			if !k.ok {
				t.Skipf("this processor has no %s", k.name)
			}
			checkMask(t, k.f)
		})
	}
}
