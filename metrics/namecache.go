package metrics

import (
	"sync/atomic"
	"unsafe"
)

// nameCache finds a series by a name that callers pass as the same string
// request after request (a route's or a limit's name, from the compiled
// policy), without hashing the name's bytes: a small table indexed by the
// string's address holds the last series found for each slot. An entry is
// used only when its name equals the one asked for, so a collision or a
// name built anew is only a miss, which the caller's own lookup answers
// and which then takes the slot. Entries are written on misses only, so a
// steady set of names costs reads alone.
type nameCache[T any] struct {
	slots [nameSlots]atomic.Pointer[nameEntry[T]]
}

// nameBits is the log2 of a nameCache's size.
const nameBits = 6

// nameSlots is the size of a nameCache.
const nameSlots = 1 << nameBits

type nameEntry[T any] struct {
	name string
	v    *T
}

// slotOf is the slot of a name: its address and length, mixed.
func slotOf(name string) uint64 {
	h := uint64(uintptr(unsafe.Pointer(unsafe.StringData(name)))>>3) ^ uint64(len(name))
	return h * 0x9E3779B97F4A7C15 >> (64 - nameBits)
}

// get returns the series cached for name, or nil.
func (c *nameCache[T]) get(name string) *T {
	if e := c.slots[slotOf(name)].Load(); e != nil && e.name == name {
		return e.v
	}
	return nil
}

// put caches v for name.
func (c *nameCache[T]) put(name string, v *T) {
	c.slots[slotOf(name)].Store(&nameEntry[T]{name: name, v: v})
}
