package percpu

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"
)

// TestCountersSumEveryAdd adds from many goroutines, each with the slots
// it is given, and checks every counter's sum, that counters do not mix,
// and that each slot starts on a cache line of its own.
func TestCountersSumEveryAdd(t *testing.T) {
	t.Parallel()
	for _, k := range []int{1, 3, 8, 9} {
		c := NewCounters(k)
		if c.Len() != k {
			t.Fatalf("Len %d, want %d", c.Len(), k)
		}
		if a := uintptr(unsafe.Pointer(&c.cells[0])); a%64 != 0 || c.stride%lineWords != 0 {
			t.Fatalf("k=%d: first cell at %#x, stride %d: slots share lines", k, a, c.stride)
		}
		const goroutines, adds = 16, 2000
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				for j := range adds {
					s := Slot()
					if j%7 == 0 {
						s = g + j // any slot number is taken
					}
					for i := range k {
						c.Add(s, i, uint64(i+1))
					}
				}
			})
		}
		wg.Wait()
		for i := range k {
			if got, want := c.Load(i), uint64(goroutines*adds*(i+1)); got != want {
				t.Errorf("k=%d: counter %d is %d, want %d", k, i, got, want)
			}
		}
	}
}

// TestLoadNeverGoesBack reads a counter while it is added to: each read is
// at least the one before it.
func TestLoadNeverGoesBack(t *testing.T) {
	t.Parallel()
	c := NewCounters(1)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				c.Add(Slot(), 0, 1)
			}
		})
	}
	var last uint64
	for range 20000 {
		v := c.Load(0)
		if v < last {
			t.Fatalf("read %d after %d", v, last)
		}
		last = v
	}
	stop.Store(true)
	wg.Wait()
}

// BenchmarkCounters adds one to two counters from every CPU; compare
// BenchmarkShared, one atomic both CPUs add to, with -cpu 1,2.
func BenchmarkCounters(b *testing.B) {
	c := NewCounters(2)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s := Slot()
			c.Add(s, 0, 1)
			c.Add(s, 1, 1)
		}
	})
}

func BenchmarkShared(b *testing.B) {
	var c [2]atomic.Uint64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c[0].Add(1)
			c[1].Add(1)
		}
	})
}

// TestSlotsAreBounded: whatever GOMAXPROCS says, a set of up to eight
// counters takes at most 64 slots of one cache line, 4 KiB.
func TestSlotsAreBounded(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(200))
	c := NewCounters(5)
	if n := len(c.cells) * 8; n != maxSlots*64 || maxSlots != 64 {
		t.Errorf("5 counters at GOMAXPROCS 200 take %d bytes in %d slots, want 4 KiB", n, c.mask+1)
	}
	runtime.GOMAXPROCS(2)
	if c := NewCounters(5); len(c.cells) != 4*lineWords {
		t.Errorf("at GOMAXPROCS 2: %d cells, want 4 slots of one line", len(c.cells))
	}
}
