package kv

import "golang.org/x/sys/cpu"

// flipFWHTAVX2 multiplies x[:n] by signs[:n] and transforms it with fwht, in AVX2
// (rotate_amd64.s): the same floats, eight at a time. n is a power of two, at least 16.
//
//go:noescape
func flipFWHTAVX2(x, signs *float32, n int)

var hasAVX2 = cpu.X86.HasAVX2

// flipFWHT multiplies x by signs (as long) and transforms it with fwht.
func flipFWHT(x, signs []float32) {
	if hasAVX2 && len(x) >= 16 && len(signs) >= len(x) {
		flipFWHTAVX2(&x[0], &signs[0], len(x))
		return
	}
	flipFWHTGo(x, signs)
}

// signsAVX2 sets bit k of s when x[k] >= 0, for the first sketchBits floats of x.
//
//go:noescape
func signsAVX2(x *float32, s *sketch)

// signs is the sketch of the rotated x: bit k set when x[k] >= 0, for k < sketchBits.
func signs(x []float32) sketch {
	if hasAVX2 && len(x) >= sketchBits {
		var s sketch
		signsAVX2(&x[0], &s)
		return s
	}
	return signsGo(x)
}
