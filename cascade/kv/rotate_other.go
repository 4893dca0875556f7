//go:build !amd64

package kv

// flipFWHT multiplies x by signs (as long) and transforms it with fwht.
func flipFWHT(x, signs []float32) { flipFWHTGo(x, signs) }

// signs is the sketch of the rotated x: bit k set when x[k] >= 0, for k < sketchBits.
func signs(x []float32) sketch { return signsGo(x) }
