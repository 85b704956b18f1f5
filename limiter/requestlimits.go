package limiter

import (
	"sync"
	"sync/atomic"
)

// DefaultRequestLimits is the number of limits given in requests that a
// RequestLimits keeps by default.
const DefaultRequestLimits = 4096

// RequestLimits keeps what a front end compiled from limits given in
// requests (an Envoy descriptor's limit override, ...), so that the same
// limit sent again reuses its rule, and with it its counters. It holds at
// most Max entries: past that it starts afresh (the counters live in the
// store, not here), so a flood of distinct limits costs bounded memory.
// The zero value holds DefaultRequestLimits; it is safe for concurrent use.
type RequestLimits[K comparable, V any] struct {
	// Max bounds the entries (0: DefaultRequestLimits).
	Max int

	mu      sync.Mutex // guards m
	m       map[K]V
	resets  atomic.Uint64
	entries atomic.Int64
}

// Get returns the entry for k, building and keeping it when there is none.
// build runs without the lock held; an error is returned as is and nothing
// is kept.
func (c *RequestLimits[K, V]) Get(k K, build func() (V, error)) (V, error) {
	c.mu.Lock()
	v, ok := c.m[k]
	c.mu.Unlock()
	if ok {
		return v, nil
	}
	v, err := build()
	if err != nil {
		return v, err
	}
	limit := c.Max
	if limit <= 0 {
		limit = DefaultRequestLimits
	}
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[K]V)
	}
	if len(c.m) >= limit {
		clear(c.m)
		c.resets.Add(1)
	}
	c.m[k] = v
	c.entries.Store(int64(len(c.m)))
	c.mu.Unlock()
	return v, nil
}

// Len returns the number of entries kept.
func (c *RequestLimits[K, V]) Len() int { return int(c.entries.Load()) }

// Resets counts how often the limits filled up and were dropped.
func (c *RequestLimits[K, V]) Resets() uint64 { return c.resets.Load() }
