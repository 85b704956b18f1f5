package dashboard

import (
	"sort"
	"sync"
	"time"
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
type Hitters struct {
	k int

	mu       sync.Mutex // guards everything below
	cur, old *generation
	rotated  time.Time
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
	return &Hitters{k: k, cur: newGeneration(k), old: newGeneration(0)}
}

// Add counts one 429 of key under limit.
func (h *Hitters) Add(limit, key string) {
	hk := hitterKey{limit, key}
	h.mu.Lock()
	defer h.mu.Unlock()
	g := h.cur
	if c := g.at[hk]; c != nil {
		c.count++
		g.down(c.pos)
		return
	}
	if n := len(g.heap); n < h.k {
		c := &g.slots[n]
		*c = hitSlot{key: hk, counter: counter{count: 1}, pos: n}
		g.heap = append(g.heap, c)
		g.at[hk] = c
		g.up(n)
		return
	}
	// The smallest counter, at the root, goes to the new key.
	c := g.heap[0]
	delete(g.at, c.key)
	c.key, c.counter = hk, counter{count: c.count + 1, over: c.count}
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
