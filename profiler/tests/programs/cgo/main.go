// A Go program with goroutines in Go code and in a C function called through cgo, for the
// profiler's tests (profiler/tests/go_programs.rs): then two goroutines in loops without a call,
// which only Go's asynchronous preemption (its own SIGURG) can take their threads from; exits 3
// if a third goroutine never runs.
package main

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"
)

//go:noinline
func goSpin(d time.Duration) uint64 {
	var x uint64
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		for i := 0; i < 100000; i++ {
			x += uint64(i)
		}
	}
	return x
}

//go:noinline
func cgoSpin(d time.Duration) uint64 {
	var x uint64
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		x += cSpin(1000000)
	}
	return x
}

// tightLoop never calls a function: only asynchronous preemption (SIGURG) lets the scheduler
// run another goroutine on its thread.
//
//go:noinline
func tightLoop(stop *int32) uint64 {
	var x uint64
	for *stop == 0 {
		x++
	}
	return x
}

func main() {
	runtime.GOMAXPROCS(2)
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); goSpin(400 * time.Millisecond) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); cgoSpin(400 * time.Millisecond) }()
	wg.Wait()
	// Preemption: two tight loops on two Ps; a third goroutine must still get to run.
	var stop int32
	for i := 0; i < 2; i++ {
		go tightLoop(&stop)
	}
	done := make(chan bool)
	start := time.Now()
	go func() { done <- true }()
	select {
	case <-done:
		fmt.Printf("preempted: the third goroutine ran after %v\n", time.Since(start))
	case <-time.After(5 * time.Second):
		fmt.Println("starved: no preemption in 5 s")
		os.Exit(3)
	}
	stop = 1
}
