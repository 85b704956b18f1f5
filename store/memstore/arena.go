package memstore

import "unsafe"

// keyArena holds the bytes of a shard's keys one after another in pages,
// rather than each key in a small heap object of its own. Small objects
// that live long among short-lived garbage of their size class pin
// half-empty spans: a flood of distinct keys, each a string of its own,
// keeps far more memory resident than the keys take. Once removed keys
// waste more than a quarter of the live ones, the shard copies its live
// keys into fresh pages (Store.compactKeys) and leaves the old pages to the
// garbage collector, so the arena's memory stays within bytes().
//
// An entry's key is a string that points into a page. Nothing ever writes
// to bytes a key uses, so such a string stays valid wherever it goes; the
// store only uses them while the shard is locked. The pages are kept alive
// by the keys that point into them: a page none of them uses is freed by
// the collector even before a compaction.
type keyArena struct {
	cur   []byte // the page being filled
	live  int64  // bytes of the keys in use
	dead  int64  // bytes of keys removed since the last compaction
	alloc int64  // memory allocated since the last compaction
}

// Keys go into pages of arenaPage bytes; a key longer than arenaLong gets
// an allocation of its own, so that no page loses more than an eighth of
// itself to a key that did not fit at its end.
const (
	arenaPage = 16 << 10
	arenaLong = arenaPage / 8
)

// arenaCost is what n bytes of live keys count for the byte cap: half as
// much again. The arena holds them and the removed keys not yet compacted
// away, at most a quarter as much (remove), in pages that lose less than an
// eighth of themselves at their ends, or in allocations of their own that
// the allocator rounds up by less than an eighth: 1.25 × 9/8 < 1.5.
func arenaCost(n int64) int64 { return n + (n+1)/2 }

// arenaSlack is the memory an arena may take beyond arenaCost of its live
// keys once it has a page: the unused end of the page being filled.
const arenaSlack = arenaPage

// slack is the arena's memory beyond arenaCost of its live keys.
func (a *keyArena) slack() int64 {
	if cap(a.cur) == 0 {
		return 0
	}
	return arenaSlack
}

// slackFor is what adding a key of n bytes adds to slack.
func (a *keyArena) slackFor(n int) int64 {
	if cap(a.cur) == 0 && n > 0 && n <= arenaLong {
		return arenaSlack
	}
	return 0
}

// add copies key into the arena and returns the copy.
func (a *keyArena) add(key string) string {
	n := len(key)
	if n == 0 {
		return ""
	}
	a.live += int64(n)
	if n > arenaLong {
		p := make([]byte, n)
		copy(p, key)
		a.alloc += allocSize(int64(n), false)
		return unsafe.String(&p[0], n)
	}
	if cap(a.cur)-len(a.cur) < n {
		a.cur = make([]byte, 0, arenaPage)
		a.alloc += allocSize(arenaPage, false)
	}
	off := len(a.cur)
	a.cur = append(a.cur, key...)
	return unsafe.String(&a.cur[off], n)
}

// remove gives back the bytes of a removed key. It reports whether the
// removed keys now take more than a quarter of the live ones' bytes, and
// the arena must be compacted.
func (a *keyArena) remove(n int) bool {
	a.live -= int64(n)
	a.dead += int64(n)
	return a.dead > a.live/4
}

// bytes is the memory the arena counts for the byte cap: arenaCost of its
// live keys and its slack, never less than it allocated (TestKeyArena).
func (a *keyArena) bytes() int64 { return arenaCost(a.live) + a.slack() }
