package tally

import (
	"math"
	"math/bits"
	"runtime"
	"sync/atomic"
	"unsafe"
)

// cacheLine is the stride between stripes: 128 bytes covers the adjacent
// line prefetchers of x86-64 and the 128-byte lines of some arm64 cores.
const cacheLine = 128

// stripeCount is the number of stripes of every value: GOMAXPROCS at
// start, rounded up to a power of two, between 4 and 64.
var stripeCount = func() int {
	n := min(max(runtime.GOMAXPROCS(0), 4), 64)
	return 1 << bits.Len(uint(n-1))
}()

// pick returns a stripe index from the address of a variable on the
// caller's stack: goroutines have stacks of their own (8 KiB at least,
// aligned), so concurrent updaters land on different stripes, at the cost
// of a multiply — a random pick cost more than the contended add it
// saved. A goroutine whose stack moves just changes stripe.
func pick() int {
	var marker byte
	a := uint64(uintptr(unsafe.Pointer(&marker))) >> 13
	return int((a*0x9E3779B97F4A7C15)>>32) & (stripeCount - 1)
}

// addFloat adds v to the float64 whose bits are at p.
func addFloat(p *atomic.Uint64, v float64) {
	for {
		old := p.Load()
		if p.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

func floatOf(bits uint64) float64 { return math.Float64frombits(bits) }
