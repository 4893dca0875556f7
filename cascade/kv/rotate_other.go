//go:build !amd64

package kv

// flipFWHT multiplies x by signs (as long) and transforms it with fwht.
func flipFWHT(x, signs []float32) { flipFWHTGo(x, signs) }
