package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// ErrEvictable reports a Redis that may evict the limiter's keys: its
// maxmemory-policy is not noeviction while maxmemory is set. Every key
// Floodgate writes has a TTL, so the volatile-* policies evict them as
// readily as the allkeys-* ones; an evicted counter starts afresh, and its
// limit admits again what it had already counted.
var ErrEvictable = errors.New("redisstore: Redis may evict the limiter's keys (maxmemory-policy is not noeviction)")

// DefaultEvictionCheck is the default of Options.EvictionCheck.
const DefaultEvictionCheck = time.Minute

// Eviction is what the latest check of the servers' eviction settings
// found.
type Eviction struct {
	// Evictable reports that some server may evict the limiter's keys:
	// its maxmemory-policy is not noeviction and its maxmemory is set.
	Evictable bool
	// Policy is the maxmemory-policy of the server named by Node: the
	// first one found evictable, or else the first one.
	Policy string
	// MaxMemory is that server's maxmemory in bytes (0: no limit).
	MaxMemory int64
	// Node is that server's address.
	Node string
	// Checked is when the check ran (zero: not yet).
	Checked time.Time
	// Err is why the check could not tell (the servers refuse both CONFIG
	// GET and INFO, say); nil when it could.
	Err error
}

// evictionCheck keeps the latest Eviction and logs changes.
type evictionCheck struct {
	mu     sync.Mutex // guards latest
	latest Eviction
	stop   chan struct{} // closed by Close; nil when nothing watches
	done   chan struct{} // closed when the watching goroutine ends
}

// Eviction returns what the latest check of the servers' eviction settings
// found (see Options.EvictionCheck): metrics export Evictable as a gauge,
// floodgate_store_evictable.
func (s *Store) Eviction() Eviction {
	s.evict.mu.Lock()
	defer s.evict.mu.Unlock()
	return s.evict.latest
}

// CheckEviction reads every server's maxmemory-policy and maxmemory now
// (CONFIG GET, or INFO memory where CONFIG is disabled), keeps the result
// for Eviction and logs a warning when the keys can be evicted (once, and
// again when it changes).
func (s *Store) CheckEviction(ctx context.Context) Eviction {
	e := Eviction{Checked: time.Now()}
	err := s.eachNode(ctx, func(n nodeClient) error {
		policy, maxmem, err := n.evictionSettings(ctx)
		if err != nil {
			return err
		}
		evictable := policy != "noeviction" && maxmem != 0
		if e.Node == "" || evictable && !e.Evictable {
			e.Policy, e.MaxMemory, e.Node, e.Evictable = policy, maxmem, n.addr, evictable
		}
		return nil
	})
	if err != nil {
		e = Eviction{Checked: e.Checked, Err: err}
	}
	s.evict.mu.Lock()
	prev := s.evict.latest
	s.evict.latest = e
	s.evict.mu.Unlock()
	switch {
	case e.Err != nil && (prev.Err == nil || prev.Checked.IsZero()):
		s.log.Warn("redisstore: cannot read Redis' eviction settings; make sure maxmemory-policy is noeviction",
			"err", e.Err)
	case e.Evictable && (!prev.Evictable || prev.Policy != e.Policy || prev.Node != e.Node):
		s.log.Warn("redisstore: Redis may evict the limiter's keys: an evicted counter starts afresh and admits again what it had counted; set maxmemory-policy noeviction",
			"node", e.Node, "maxmemory_policy", e.Policy, "maxmemory", e.MaxMemory)
	case !e.Evictable && e.Err == nil && prev.Evictable:
		s.log.Info("redisstore: Redis no longer evicts the limiter's keys", "node", e.Node, "maxmemory_policy", e.Policy)
	}
	return e
}

// evictionSettings reads a server's maxmemory-policy and maxmemory: with
// CONFIG GET, or from INFO memory where CONFIG is disabled (as managed
// services often do).
func (n nodeClient) evictionSettings(ctx context.Context) (string, int64, error) {
	m, cerr := n.c.Do(ctx, n.c.B().ConfigGet().Parameter("maxmemory-policy").Parameter("maxmemory").Build()).AsStrMap()
	if cerr == nil && m["maxmemory-policy"] != "" {
		maxmem, err := strconv.ParseInt(m["maxmemory"], 10, 64)
		if err != nil {
			return "", 0, fmt.Errorf("redisstore: CONFIG GET maxmemory on %s: %q", n.addr, m["maxmemory"])
		}
		return m["maxmemory-policy"], maxmem, nil
	}
	text, err := n.info(ctx, "memory")
	if err != nil {
		return "", 0, fmt.Errorf("redisstore: eviction settings on %s: CONFIG GET: %v; %w", n.addr, cerr, err)
	}
	f := infoFields(text)
	policy := f["maxmemory_policy"]
	maxmem, perr := strconv.ParseInt(f["maxmemory"], 10, 64)
	if policy == "" || perr != nil {
		return "", 0, fmt.Errorf("redisstore: eviction settings on %s: no maxmemory_policy or maxmemory in INFO memory", n.addr)
	}
	return policy, maxmem, nil
}

// watchEviction checks the eviction settings every interval until Close,
// and at once when now is set.
func (s *Store) watchEviction(every time.Duration, now bool) {
	defer close(s.evict.done)
	check := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s.CheckEviction(ctx)
		cancel()
	}
	if now {
		check()
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.evict.stop:
			return
		case <-t.C:
			check()
		}
	}
}
