//go:build !amd64

package kv

// nearMask is nearMaskGo: math/bits.OnesCount64 is one instruction on the other architectures
// this builds for (see scan_amd64.go).
var nearMask = nearMaskGo
