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
type Hitters struct {
	k int

	mu       sync.Mutex // guards everything below
	cur, old map[hitterKey]*counter
	rotated  time.Time
}

type hitterKey struct{ limit, key string }

type counter struct {
	count, over uint64
}

// NewHitters keeps k keys (at least 1).
func NewHitters(k int) *Hitters {
	return &Hitters{k: max(k, 1), cur: map[hitterKey]*counter{}, old: map[hitterKey]*counter{}}
}

// Add counts one 429 of key under limit.
func (h *Hitters) Add(limit, key string) {
	hk := hitterKey{limit, key}
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.cur[hk]; c != nil {
		c.count++
		return
	}
	if len(h.cur) < h.k {
		h.cur[hk] = &counter{count: 1}
		return
	}
	var minK hitterKey
	var minC *counter
	for k, c := range h.cur {
		if minC == nil || c.count < minC.count {
			minK, minC = k, c
		}
	}
	delete(h.cur, minK)
	h.cur[hk] = &counter{count: minC.count + 1, over: minC.count}
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
		h.old, h.cur, h.rotated = h.cur, map[hitterKey]*counter{}, now
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
	for _, gen := range []map[hitterKey]*counter{h.old, h.cur} {
		for k, c := range gen {
			s := sum[k]
			s.count += c.count
			s.over += c.over
			sum[k] = s
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
