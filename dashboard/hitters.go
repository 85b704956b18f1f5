package dashboard

import (
	"sort"
	"sync"
	"time"

	"github.com/floodgate/floodgate/internal/percpu"
)

// DefaultHitters is how many keys the heavy-hitters sketch keeps.
const DefaultHitters = 100

// Hitters finds the keys denied most often with the Space-Saving
// algorithm: k counters; a key not counted yet takes the place of the
// smallest counter and inherits its count as its possible overcount. Any
// key denied more than total/k times is among them. Two generations are
// kept and the older dropped every half hour, so the list follows the last
// 30 to 60 minutes.
//
// The counters are a min-heap on their counts, so that a 429 costs
// O(log k) whatever the keys: in a flood from more keys than k, each new
// key takes the smallest counter's place at the root and walks down the
// heap, rather than scanning all k counters for the smallest.
//
// In front of the sketch each CPU holds its current run of 429s of one
// key (a hitFront): a flood from one key, the common case, counts on its
// CPU's own lock and cache line, and reaches the shared sketch only when
// another key comes on that CPU, when the run is frontRun long, or when
// the sketch is read (Top, Rotate). Space-Saving takes a run of n as n
// single counts of its key (a new key takes the smallest counter's place
// with that count plus n), so the bounds hold as they do key by key.
type Hitters struct {
	k      int
	fronts []hitFront // by percpu slot
	mask   int        // len(fronts) - 1

	mu       sync.Mutex // guards everything below
	cur, old *generation
	rotated  time.Time
}

// frontRun is the longest run of one key a CPU holds before it counts it
// into the sketch.
const frontRun = 1 << 12

// hitFront is one CPU's run of 429s of one key, on cache lines of its
// own.
type hitFront struct {
	mu  sync.Mutex // guards key and n
	key hitterKey
	n   uint64
	_   [64]byte
}

type hitterKey struct{ limit, key string }

type counter struct {
	count, over uint64
}

// generation is one generation's counters: a min-heap on count, and where
// each key's counter is. The counters are allocated with the generation
// and reused: a key that takes another's place takes its counter.
type generation struct {
	heap  []*hitSlot
	at    map[hitterKey]*hitSlot
	slots []hitSlot
}

// hitSlot is a key's counter and its place in the heap.
type hitSlot struct {
	key hitterKey
	counter
	pos int
}

func newGeneration(k int) *generation {
	return &generation{heap: make([]*hitSlot, 0, k), at: make(map[hitterKey]*hitSlot, k), slots: make([]hitSlot, k)}
}

// NewHitters keeps k keys (at least 1).
func NewHitters(k int) *Hitters {
	k = max(k, 1)
	n := percpu.Slots()
	return &Hitters{k: k, fronts: make([]hitFront, n), mask: n - 1, cur: newGeneration(k), old: newGeneration(0)}
}

// Add counts one 429 of key under limit.
func (h *Hitters) Add(limit, key string) { h.addAt(percpu.Slot(), limit, key) }

// addAt is Add for a caller that holds its slot (percpu.Slot) already.
func (h *Hitters) addAt(slot int, limit, key string) {
	f := &h.fronts[slot&h.mask]
	f.mu.Lock()
	switch {
	case f.n > 0 && f.n < frontRun && f.key.key == key && f.key.limit == limit:
		f.n++
		f.mu.Unlock()
		return
	case f.n == 0:
		f.key, f.n = hitterKey{limit, key}, 1
		f.mu.Unlock()
		return
	}
	f.mu.Unlock()
	// The front's run goes to the sketch with h.mu taken first (as flush
	// takes it), so that a reader finds every 429 in a front or in the
	// sketch, never on its way between. The front may have changed
	// meanwhile (another goroutine on this slot): it is looked at again.
	h.mu.Lock()
	f.mu.Lock()
	if f.n > 0 && f.n < frontRun && f.key.key == key && f.key.limit == limit {
		f.n++
	} else {
		run, n := f.key, f.n
		f.key, f.n = hitterKey{limit, key}, 1
		if n > 0 {
			h.cur.add(run, n, h.k)
		}
	}
	f.mu.Unlock()
	h.mu.Unlock()
}

// flush counts every CPU's run into the current generation; h.mu is held.
func (h *Hitters) flush() {
	for i := range h.fronts {
		f := &h.fronts[i]
		f.mu.Lock()
		run, n := f.key, f.n
		f.key, f.n = hitterKey{}, 0
		f.mu.Unlock()
		if n > 0 {
			h.cur.add(run, n, h.k)
		}
	}
}

// add counts n 429s of hk, keeping at most k counters.
func (g *generation) add(hk hitterKey, n uint64, k int) {
	if c := g.at[hk]; c != nil {
		c.count += n
		g.down(c.pos)
		return
	}
	if i := len(g.heap); i < k {
		c := &g.slots[i]
		*c = hitSlot{key: hk, counter: counter{count: n}, pos: i}
		g.heap = append(g.heap, c)
		g.at[hk] = c
		g.up(i)
		return
	}
	// The smallest counter, at the root, goes to the new key.
	c := g.heap[0]
	delete(g.at, c.key)
	c.key, c.counter = hk, counter{count: c.count + n, over: c.count}
	g.at[hk] = c
	g.down(0)
}

// up moves the counter at i towards the root while its count is below
// its parent's.
func (g *generation) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if g.heap[p].count <= g.heap[i].count {
			return
		}
		g.swap(i, p)
		i = p
	}
}

// down moves the counter at i towards the leaves while a child's count is
// below its own.
func (g *generation) down(i int) {
	n := len(g.heap)
	for {
		least := i
		if l := 2*i + 1; l < n && g.heap[l].count < g.heap[least].count {
			least = l
		}
		if r := 2*i + 2; r < n && g.heap[r].count < g.heap[least].count {
			least = r
		}
		if least == i {
			return
		}
		g.swap(i, least)
		i = least
	}
}

func (g *generation) swap(i, j int) {
	g.heap[i], g.heap[j] = g.heap[j], g.heap[i]
	g.heap[i].pos, g.heap[j].pos = i, j
}

// Rotate starts a new generation when the current one is half an hour
// old.
func (h *Hitters) Rotate(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.flush()
	if h.rotated.IsZero() {
		h.rotated = now
	}
	if now.Sub(h.rotated) >= 30*time.Minute {
		h.old, h.cur, h.rotated = h.cur, newGeneration(h.k), now
	}
}

// Hitter is one of the keys denied most.
type Hitter struct {
	Limit string `json:"limit"`
	Key   string `json:"key"`
	// Count is the estimated number of 429s; it overcounts by at most
	// Error.
	Count uint64 `json:"count"`
	Error uint64 `json:"error"`
}

// Top returns up to n keys, most denied first.
func (h *Hitters) Top(n int) []Hitter {
	h.mu.Lock()
	h.flush()
	sum := map[hitterKey]counter{}
	for _, gen := range []*generation{h.old, h.cur} {
		for _, c := range gen.heap {
			s := sum[c.key]
			s.count += c.count
			s.over += c.over
			sum[c.key] = s
		}
	}
	h.mu.Unlock()
	return topOf(sum, n)
}

func topOf(sum map[hitterKey]counter, n int) []Hitter {
	out := make([]Hitter, 0, len(sum))
	for k, c := range sum {
		out = append(out, Hitter{Limit: k.limit, Key: k.key, Count: c.count, Error: c.over})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Key < out[j].Key
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// MergeHitters adds lists of heavy hitters (from several instances) and
// returns the top n.
func MergeHitters(n int, lists ...[]Hitter) []Hitter {
	sum := map[hitterKey]counter{}
	for _, l := range lists {
		for _, h := range l {
			k := hitterKey{h.Limit, h.Key}
			s := sum[k]
			s.count += h.Count
			s.over += h.Error
			sum[k] = s
		}
	}
	return topOf(sum, n)
}
