//go:build cgo

package main

/*
#include <stdint.h>
static uint64_t c_spin(uint64_t n) {
    volatile uint64_t x = 0;
    for (uint64_t i = 0; i < n; i++) x += i;
    return x;
}
*/
import "C"

// cSpin counts to n in C, through cgo.
func cSpin(n uint64) uint64 { return uint64(C.c_spin(C.uint64_t(n))) }
