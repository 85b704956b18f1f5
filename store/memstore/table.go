package memstore

import (
	"math"
	"slices"
	"sync"
	"unsafe"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/limiter"
)

// chunkSize is the number of entries allocated at once: 512 entries of 80
// bytes are 40 KiB, five whole pages, which the allocator hands out with
// nothing lost to rounding. Entries never move, so a pointer to one stays
// valid while its shard is locked.
const (
	chunkShift = 9
	chunkSize  = 1 << chunkShift
	chunkMask  = chunkSize - 1
)

// A slot of a shard's open-addressing index holds the entry's index plus
// one in its low 24 bits (0 is an empty slot) and 8 bits of the key's hash
// above them, so most probes that miss do not touch the entry.
const (
	idxBits    = 24
	idxMask    = 1<<idxBits - 1
	maxEntries = idxMask - 1 // per shard
	minSlots   = 16
)

// cacheLine is the padding unit that keeps two shards' mutexes apart (two
// 64-byte lines, for CPUs that fetch lines in pairs).
const cacheLine = 128

// entry is one (rule, key) pair's state: 80 bytes on 64-bit machines, plus
// the key's own bytes (in the shard's key arena) and 5 bytes per index slot
// (4/3 to 8/3 slots per key).
//
// What a decision of a rate algorithm writes (exp and the state's Last, A
// and B) comes first, in 32 bytes, and a decision writes rule only when it
// changes: of the two cache lines an entry spans, such a decision dirties
// one for three entries in four, and the other line stays in both cores'
// caches.
type entry struct {
	exp  int64 // Unix ns at which the state is back to full (idle)
	st   algo.State
	rule *limiter.Rule // nil for a free entry
	key  string
	// deny is, while the key's last decision was a denial, the instant (on
	// the monotonic timeline, like exp) at which the cost it denied passes
	// again, and 0 once a decision allows: the key is denying while deny is
	// after now. A free entry keeps the index of the next free one here.
	deny int64
}

// shardState is one shard; every field is guarded by mu. The fields that
// every decision reads or writes come first and fill one 64-byte line
// (TestEntrySize checks it), so that a decision takes one line of the
// shard from the core that last decided there; the rest is written only
// when keys come and go, and stays in every core's cache.
type shardState struct {
	// The hot line.
	mu     sync.Mutex
	ticks  uint32 // decisions, for the cached clock (refine)
	max    int32  // most live entries (0: no cap)
	seen   int64  // the latest system clock reading of a decision here
	writes uint64 // state changes, for snapshots to skip an idle store
	slots  []uint32
	budget int64 // most bytes (0: no cap)

	chunks []*[chunkSize]entry
	dist   []uint8 // each slot's distance from its key's home slot
	used   int32   // entries ever handed out (the high-water mark)
	free   int32   // head of the free list
	n      int32   // live entries
	hand   int32   // the next entry an eviction weighs
	bytes  int64   // memory of the chunks, the index and the live keys (structBytes, keyCost)

	evictions     uint64
	denyEvictions uint64
	expired       uint64
	clamps        uint64

	keys keyArena // the live keys' bytes

	// res holds the settle records of the reservations held here,
	// resDue orders them by expiry (see resQueue) and resMade by the
	// order they were made in, resSeq the last (see resFIFO).
	res          map[resKey]reservation
	resDue       resQueue
	resMade      resFIFO
	resSeq       uint64
	resBytes     int64 // what res holds, as resBytes counts it
	resEvictions uint64
	resExpired   uint64
	// settled holds what the settles of the reservations settled here
	// did, until their TTLs, so that a settle sent again answers alike
	// (see settledRes).
	settled map[resKey]settledRes
	// settledBytes is what settled holds, as settledBytes counts it.
	settledBytes int64
}

// shard pads shardState to whole cache-line pairs so that two shards'
// mutexes never share a line.
type shard struct {
	shardState
	// Never zero bytes: a zero-size last field would get padded itself.
	_ [cacheLine - unsafe.Sizeof(shardState{})%cacheLine]byte
}

// lockSpins is how many times lock tries a busy shard's mutex before it
// waits in Mutex.Lock.
const lockSpins = 64

// lock locks the shard. A shard is held for tens of nanoseconds, while
// Mutex.Lock, finding it held, pauses for far longer before it looks again
// (a pause instruction is slow on some CPUs), so lock first looks again at
// once, a few times.
func (sh *shard) lock() {
	for range lockSpins {
		if sh.mu.TryLock() {
			return
		}
	}
	sh.mu.Lock()
}

func (sh *shard) init(max int32, budget int64) {
	sh.free = -1
	sh.max, sh.budget = max, budget
}

// Memory accounting for Options.MaxBytes counts what the Go allocator
// hands out, rounded as it rounds: a shard's chunks of entries and its
// index, as allocated, with the slack of its key arena (structBytes), and
// for each live key its bytes in the arena and the variable part of its
// state (keyCost). The key is the store's own copy, so nothing else it may
// have been cut from is kept alive.
const (
	entryBytes = int64(unsafe.Sizeof(entry{}))
	chunkBytes = int64(unsafe.Sizeof([chunkSize]entry{}))
	extBytes   = int64(unsafe.Sizeof(algo.Ext{}))
	extEntry   = int64(unsafe.Sizeof(algo.Entry{})) // per log entry or lease
	ptrBytes   = int64(unsafe.Sizeof(uintptr(0)))
)

// extCost is the memory of a state's variable part: the Ext and the
// array of its entries. It is small enough to be inlined, so that the
// states of most algorithms, which have no variable part, pay no call.
func extCost(x *algo.Ext) int64 {
	if x == nil {
		return 0
	}
	return extAlloc(x)
}

// extAlloc is extCost of a variable part x that is not nil.
func extAlloc(x *algo.Ext) int64 {
	return allocSize(extBytes, true) + allocSize(int64(cap(x.Entries))*extEntry, false)
}

// keyCost is the memory of a key with state st, beyond its entry and its
// share of the index: its bytes in the arena and its state's variable part.
func keyCost(key string, st *algo.State) int64 {
	return arenaCost(int64(len(key))) + extCost(st.Ext)
}

// indexBytes is the memory of an index of n slots.
func indexBytes(n int) int64 {
	return allocSize(int64(n)*4, false) + allocSize(int64(n), false)
}

// structBytes is the memory of the shard's chunks and index as allocated,
// and the slack of its key arena.
func (sh *shard) structBytes() int64 {
	return int64(len(sh.chunks))*allocSize(chunkBytes, true) + allocSize(int64(cap(sh.chunks))*ptrBytes, true) +
		indexBytes(len(sh.slots)) + sh.keys.slack()
}

// growthCost is the memory that inserting one more key of n bytes adds to
// the shard's structure: a new chunk when no entry is free, a larger index
// when the index is full enough to double, the arena's slack with its first
// page.
func (sh *shard) growthCost(n int) int64 {
	c := sh.keys.slackFor(n)
	if sh.free < 0 && sh.used&chunkMask == 0 {
		c += allocSize(chunkBytes, true)
		if n := len(sh.chunks); n == cap(sh.chunks) {
			c += allocSize(int64(max(2*n, 4))*ptrBytes, true) - allocSize(int64(n)*ptrBytes, true)
		}
	}
	if int(sh.n+1)*4 > len(sh.slots)*3 {
		c += indexBytes(max(minSlots, 2*len(sh.slots))) - indexBytes(len(sh.slots))
	}
	return c
}

// regrow accounts for an entry whose variable part went from old to new
// bytes.
func (sh *shard) regrow(old, new int64) { sh.bytes += new - old }

// over reports whether the shard is over its byte budget, and must trim.
func (sh *shard) over() bool { return sh.budget > 0 && sh.bytes > sh.budget }

// trim evicts entries, never pinned ones, while the shard is over its byte
// budget. Callers that write often ask over first, which is inlined.
func (s *Store) trim(sh *shard, pin pins, now int64) {
	for sh.over() && s.evict(sh, pin, now) {
	}
}

// Eviction by value. A shard that must make room weighs a few keys, from
// where the last eviction stopped on (hand), and removes the one whose loss
// changes least (worth): first a key whose state gives what a fresh key
// gives, which costs nothing to drop (it counts as expired); then the one
// that holds the least of its limit (algo.Params.Held); a key that is
// denying (its last decision was a denial that still holds) only when
// every key weighed is denying too. It weighs evictSample keys, more while
// all of them are denying (up to evictDenying), and stops at the first
// that costs nothing. Free entries on the way are skipped; after
// evictVisits entries the best key found so far goes. Each eviction thus
// costs a few dozen entries at most, whatever the number of keys.
//
// The hand walks the entries in order and comes back to a key only after
// passing every other, so a key that was just inserted is weighed last:
// by then a key that was used once and left alone is back to full.
const (
	evictSample  = 8
	evictDenying = 64
	evictVisits  = 1024
)

// denyingWorth is added to the worth of a denying key: more than any key
// that is not denying can be worth.
const denyingWorth = 1 << 32

// worth returns what forgetting entry e at now would lose: 0 for a key
// that answers as a fresh one would, else the share of its limit it holds
// (algo.HeldFull when nothing is left), plus denyingWorth while it is
// denying or, for a concurrency limit, holds a lease. A quota's share is
// weighed on the wall clock, which worth reads into *wall the first time
// it needs it.
func (s *Store) worth(e *entry, now int64, wall *int64) uint64 {
	if !s.live(e, now) {
		return 0
	}
	p := e.rule.Params()
	t := now
	if p.Algorithm().Family() == floodgate.FamilyQuota {
		if *wall == 0 {
			*wall = s.wall()
		}
		t = *wall
	}
	held := uint64(p.Held(&e.st, t))
	if held == 0 {
		return 0
	}
	if e.deny > now || p.Algorithm().Family() == floodgate.FamilyConcurrency {
		// A concurrency key holds leases in flight (held is 0 once the
		// last expired): forgetting it would let more than its limit
		// run at once, so it goes as late as a denying key.
		held += denyingWorth
	}
	return held
}

// pins names the entries of a shard that an eviction must leave alone:
// those of the request that makes room.
type pins struct {
	one int32  // an entry, or -1
	w   []work // a request's hits: their entries (idx) in shard sh
	sh  int32
}

// noPins pins nothing.
var noPins = pins{one: -1}

func (p *pins) has(i int32) bool {
	if i == p.one {
		return true
	}
	for k := range p.w {
		if p.w[k].idx == i && p.w[k].sh == p.sh {
			return true
		}
	}
	return false
}

// evict removes the entry of sh worth least among those it weighs (see
// Eviction by value), never a pinned one, and reports whether there was
// one to remove.
func (s *Store) evict(sh *shard, pin pins, now int64) bool {
	best, least := int32(-1), uint64(math.MaxUint64)
	var wall int64
	weighed := 0
	for visits := int32(0); visits < sh.used; visits++ {
		if weighed >= evictSample && (least < denyingWorth || weighed >= evictDenying) {
			break
		}
		if visits >= evictVisits && best >= 0 {
			break
		}
		i := sh.hand
		if sh.hand++; sh.hand >= sh.used {
			sh.hand = 0
		}
		e := sh.at(i)
		if e.rule == nil || pin.has(i) {
			continue
		}
		weighed++
		if w := s.worth(e, now, &wall); w < least {
			best, least = i, w
			if w == 0 {
				break
			}
		}
	}
	if best < 0 {
		return false
	}
	// The next eviction weighs on from the key after this one: the keys
	// spared here are weighed again, while their entries are still in the
	// cache, and keys go in the order they were written.
	if sh.hand = best + 1; sh.hand >= sh.used {
		sh.hand = 0
	}
	switch {
	case least == 0:
		sh.expired++
	case least >= denyingWorth:
		sh.denyEvictions++
		sh.evictions++
	default:
		sh.evictions++
	}
	s.remove(sh, best)
	return true
}

// at returns entry i.
func (sh *shard) at(i int32) *entry {
	return &sh.chunks[i>>chunkShift][i&chunkMask]
}

// find returns the index of the entry for (rule, key) with hash h, or -1.
func (sh *shard) find(h uint64, rule *limiter.Rule, key string) int32 {
	if len(sh.slots) == 0 {
		return -1
	}
	mask := uint32(len(sh.slots) - 1)
	fp := uint32(h>>32) & 0xff
	for pos := uint32(h) & mask; ; pos = (pos + 1) & mask {
		v := sh.slots[pos]
		if v == 0 {
			return -1
		}
		if v>>idxBits == fp {
			i := int32(v&idxMask) - 1
			e := sh.at(i)
			if sameKey(e.key, key) && (e.rule == rule || e.rule.ID() == rule.ID()) {
				return i
			}
		}
	}
}

// insert adds a new entry for (rule, key), which must not be present,
// evicting entries other than the pinned ones while the shard is full (see
// Eviction by value). It returns the new entry's index.
func (s *Store) insert(sh *shard, h uint64, rule *limiter.Rule, key string, st algo.State, exp, now int64, pin pins) int32 {
	cost := keyCost(key, &st)
	for sh.n > 0 && ((sh.max > 0 && sh.n >= sh.max) || (sh.free < 0 && sh.used >= maxEntries) ||
		(sh.budget > 0 && sh.bytes+cost+sh.growthCost(len(key)) > sh.budget)) {
		if !s.evict(sh, pin, now) {
			break
		}
	}
	if int(sh.n+1)*4 > len(sh.slots)*3 {
		s.grow(sh)
	}
	for !sh.place(h, 0) { // a probe run too long to record: make room
		s.grow(sh)
	}
	var i int32
	if sh.free >= 0 {
		i = sh.free
		sh.free = int32(sh.at(i).deny)
	} else {
		i = sh.used
		if int(i>>chunkShift) == len(sh.chunks) {
			old := sh.structBytes()
			sh.chunks = append(sh.chunks, new([chunkSize]entry))
			sh.bytes += sh.structBytes() - old
		}
		sh.used++
	}
	e := sh.at(i)
	*e = entry{st: st, rule: rule, key: sh.addKey(key), exp: exp}
	sh.place(h, uint32(i+1))
	sh.n++
	sh.bytes += cost
	return i
}

// place puts entry ref (index+1) with hash h into the first free slot of
// its probe run. With ref 0 it only reports whether that slot is within
// reach of the distance byte.
func (sh *shard) place(h uint64, ref uint32) bool {
	if len(sh.slots) == 0 {
		return false
	}
	mask := uint32(len(sh.slots) - 1)
	pos, d := uint32(h)&mask, 0
	for sh.slots[pos] != 0 {
		pos = (pos + 1) & mask
		if d++; d > math.MaxUint8 {
			return false
		}
	}
	if ref != 0 {
		sh.slots[pos] = (uint32(h>>32)&0xff)<<idxBits | ref
		sh.dist[pos] = uint8(d)
	}
	return true
}

// grow doubles the shard's index and places every entry again.
func (s *Store) grow(sh *shard) {
	old := sh.slots
	sh.bytes -= indexBytes(len(old))
	defer func() { sh.bytes += indexBytes(len(sh.slots)) }()
	size := max(minSlots, 2*len(old))
	for {
		sh.slots, sh.dist = make([]uint32, size), make([]uint8, size)
		ok := true
		for _, v := range old {
			if v == 0 {
				continue
			}
			e := sh.at(int32(v&idxMask) - 1)
			if ok = sh.place(s.hash(e.rule.ID(), e.key), v&idxMask); !ok {
				break
			}
		}
		if ok {
			return
		}
		size *= 2
	}
}

// remove deletes entry i from the index and frees it.
func (s *Store) remove(sh *shard, i int32) {
	e := sh.at(i)
	mask := uint32(len(sh.slots) - 1)
	pos := uint32(s.hash(e.rule.ID(), e.key)) & mask
	for sh.slots[pos]&idxMask != uint32(i+1) {
		pos = (pos + 1) & mask
	}
	// Backward-shift deletion: up to the next empty slot, move every
	// entry whose home is at or before the hole into the hole, so that
	// lookups never need tombstones.
	sh.slots[pos], sh.dist[pos] = 0, 0
	for j := (pos + 1) & mask; sh.slots[j] != 0; j = (j + 1) & mask {
		if gap := (j - pos) & mask; gap <= uint32(sh.dist[j]) {
			sh.slots[pos], sh.dist[pos] = sh.slots[j], sh.dist[j]-uint8(gap)
			sh.slots[j], sh.dist[j] = 0, 0
			pos = j
		}
	}
	sh.bytes -= keyCost(e.key, &e.st)
	n := len(e.key)
	*e = entry{deny: int64(sh.free)}
	sh.free = i
	sh.n--
	if sh.keys.remove(n) {
		sh.compactKeys()
	}
}

// addKey copies key into the shard's arena and returns the copy.
func (sh *shard) addKey(key string) string {
	old := sh.keys.slack()
	key = sh.keys.add(key)
	sh.bytes += sh.keys.slack() - old
	return key
}

// compactKeys copies the live keys into fresh pages of a new arena.
func (sh *shard) compactKeys() {
	sh.bytes -= sh.keys.slack()
	sh.keys = keyArena{}
	for i := range sh.used {
		if e := sh.at(i); e.rule != nil {
			e.key = sh.keys.add(e.key)
		}
	}
	sh.bytes += sh.keys.slack()
}

// satAdd returns a+b for b ≥ 0, saturating at MaxInt64.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// sizeClasses are the Go allocator's size classes for small objects
// (internal/runtime/gc.SizeClassToSize).
var sizeClasses = [...]int64{8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256,
	288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024, 1152, 1280, 1408, 1536, 1792, 2048,
	2304, 2688, 3072, 3200, 3456, 4096, 4864, 5376, 6144, 6528, 6784, 6912, 8192, 9472, 9728, 10240, 10880,
	12288, 13568, 14336, 16384, 18432, 19072, 20480, 21760, 24576, 27264, 28672, 32768}

// Allocator constants: objects up to maxSmall bytes come from size
// classes, larger ones are whole pages; a small object with pointers that
// is larger than minHeader carries an 8-byte header; pointer-free objects
// below tinySize share 16-byte blocks.
const (
	maxSmall   = 32768
	minHeader  = 512
	mallocHead = 8
	tinySize   = 16
	pageSize   = 8192
)

// allocSize returns the memory the Go allocator takes for an object of n
// bytes that holds pointers (scan) or not, as the runtime rounds it. A
// tiny pointer-free object counts as the whole 16-byte block it shares,
// which it may keep alive alone.
func allocSize(n int64, scan bool) int64 {
	switch {
	case n <= 0:
		return 0
	case !scan && n < tinySize:
		return tinySize
	case n <= maxSmall-mallocHead:
		if scan && n > minHeader {
			n += mallocHead
		}
		i, _ := slices.BinarySearch(sizeClasses[:], n)
		return sizeClasses[i]
	}
	return (n + pageSize - 1) &^ (pageSize - 1)
}
