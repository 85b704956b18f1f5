// Package intern turns the bytes the request path builds (client keys,
// counter keys, RateLimit field values) into strings without allocating
// when the same bytes came before: a flood repeats the same key and the
// same field value request after request.
//
// A Table is a fixed number of slots, each holding the last string stored
// in it; bytes are looked up by their hash and compared in full, so a
// string returned always equals the bytes asked for. Its memory is bounded
// whatever the bytes: at most its slots times MaxLen and a few words.
// Bytes are kept the second time in a row that they miss their slot:
// bytes seen once (a stream of ever-different keys, as from many clients)
// cost the allocation they would cost anyway and leave the slot's string
// in place, and bytes that come back take the slot.
package intern

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// MaxLen is the longest string a Table keeps; longer bytes are converted
// without being kept.
const MaxLen = 128

// DefaultSlots is the size of a zero Table.
const DefaultSlots = 256

// seed is the hash seed of every table, made once per process.
var seed = maphash.MakeSeed()

// Table is a lock-free, fixed-size table of strings, safe for concurrent
// use. The zero Table is ready, with DefaultSlots slots; New makes one of
// another size.
type Table struct {
	once  sync.Once
	mask  uint64
	slots []slot
}

// slot is one string, and the hash of the bytes that missed it last.
type slot struct {
	e      atomic.Pointer[entry]
	missed atomic.Uint64
}

type entry struct{ s string }

// New returns a table of at least n slots (a power of two, at least 16).
func New(n int) *Table {
	t := &Table{}
	t.once.Do(func() { t.make(n) })
	return t
}

// make gives t its slots: at least n, a power of two, at least 16.
func (t *Table) make(n int) {
	size := 16
	for size < n && size < 1<<20 {
		size *= 2
	}
	t.mask, t.slots = uint64(size-1), make([]slot, size)
}

// String returns b as a string: the one the table holds for these bytes,
// or a new one, which the table holds from then on when the same bytes
// missed their slot just before. A nil Table holds nothing.
func (t *Table) String(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if t == nil || len(b) > MaxLen {
		return string(b)
	}
	t.once.Do(func() { t.make(DefaultSlots) })
	h := maphash.Bytes(seed, b)
	sl := &t.slots[h&t.mask]
	if e := sl.e.Load(); e != nil && e.s == string(b) {
		return e.s
	}
	if sl.missed.Load() != h {
		sl.missed.Store(h) // seen once: kept if it misses again next
		return string(b)
	}
	e := &entry{s: string(b)}
	sl.e.Store(e)
	return e.s
}
