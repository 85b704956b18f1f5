// Package percpu counts without making the CPUs that count fight over
// one cache line. A counter added to on every request from every CPU (a
// Prometheus counter, a histogram's buckets) costs little on one CPU and
// several times as much on two or more: each atomic add has to bring the
// line from the CPU that added last. Counters here keep one cell per slot,
// a slot belongs to one P (the runtime's processor) most of the time, and
// the cells of one slot sit together on lines no other slot writes; a
// reader sums the slots.
package percpu

import (
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// lineWords is a cache line in 64-bit words.
const lineWords = 8

// maxSlots bounds the slots of a Counters, whatever GOMAXPROCS says: past
// 32 CPUs, Ps share slots (4 KiB a set of up to 8 counters at most).
const maxSlots = 64

// slots hands each P a slot of its own: sync.Pool keeps what was put back
// on the P that put it, so Get on a P returns the number that P had last.
// Pools are emptied by the collector, after which a P draws a new number;
// two Ps that come to share a slot only share its cache lines.
var (
	nextSlot atomic.Uint32
	slots    = sync.Pool{New: func() any {
		s := new(int)
		*s = int(nextSlot.Add(1) - 1)
		return s
	}}
)

// Slot returns the caller's slot: a small number, the same for calls on
// one P most of the time. Take it once for several adds.
func Slot() int {
	p := slots.Get().(*int)
	s := *p
	slots.Put(p)
	return s
}

// Counters is a fixed number of uint64 counters, each kept as one cell per
// slot. Its methods are safe for concurrent use.
type Counters struct {
	k      int
	mask   int // slots - 1
	stride int // words per slot, whole cache lines
	cells  []atomic.Uint64
}

// Slots returns how many slots a per-CPU structure made now keeps: twice
// GOMAXPROCS, rounded up to a power of two, at most 64. A slot number
// from Slot is taken modulo it (slot & (Slots()-1)).
func Slots() int {
	n := 1
	for n < 2*runtime.GOMAXPROCS(0) && n < maxSlots {
		n *= 2
	}
	return n
}

// NewCounters returns k counters at zero, with twice as many slots as
// GOMAXPROCS (a power of two, at most 64): k*8 bytes per slot, rounded
// up to whole cache lines.
func NewCounters(k int) *Counters {
	n := Slots()
	stride := (k + lineWords - 1) / lineWords * lineWords
	cells := make([]atomic.Uint64, n*stride+lineWords)
	// Start the first slot on a line of its own: the allocation is only
	// 8-byte aligned.
	off := int((64 - uintptr(unsafe.Pointer(&cells[0]))%64) % 64 / 8)
	return &Counters{k: k, mask: n - 1, stride: stride, cells: cells[off : off+n*stride : off+n*stride]}
}

// Len returns the number of counters.
func (c *Counters) Len() int { return c.k }

// Add adds v to counter i (0 ≤ i < Len) in slot (from Slot).
func (c *Counters) Add(slot, i int, v uint64) {
	c.cells[(slot&c.mask)*c.stride+i].Add(v)
}

// Load returns counter i: the sum of its slots. Adds that run meanwhile
// may or may not be in it; a counter that only grows never reads lower
// than a Load before it.
func (c *Counters) Load(i int) uint64 {
	var sum uint64
	for s := i; s < len(c.cells); s += c.stride {
		sum += c.cells[s].Load()
	}
	return sum
}
