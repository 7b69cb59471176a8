//go:build !cgo

package main

// cSpin counts to n, in Go: without cgo (a statically linked build) there is no C.
//
//go:noinline
func cSpin(n uint64) uint64 {
	var x uint64
	for i := uint64(0); i < n; i++ {
		x += i
	}
	return x
}
