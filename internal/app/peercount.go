package app

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/redisstore"
)

// peerCounter is rls.PeerCounter over the Redis clients of the stores:
// INCRBY then EXPIRE for each counter, pipelined, as envoyproxy/ratelimit
// sends them; per-second counters go to REDIS_PERSECOND's Redis when
// there is one. A count is bounded as the engine bounds its store calls
// (redisstore.Store.ProgressContext): it fails at the deadline only when
// that Redis answered nothing for that long, and waits up to the hard
// timeout while it keeps answering.
type peerCounter struct {
	main, second  *redisstore.Store // second nil: main has every counter
	timeout, hard time.Duration
}

// newPeerCounter returns the counter over the Redis of st, with the
// engine's deadline and hard timeout, or nil when its main store is not
// Redis.
func newPeerCounter(st *stores, timeout, hard time.Duration) *peerCounter {
	redis := func(s limiter.Store) *redisstore.Store {
		rs, _ := s.(*redisstore.Store)
		return rs
	}
	if ps, ok := st.main.(*perSecondSplit); ok {
		m, s := redis(ps.other), redis(ps.second)
		if m == nil || s == nil {
			return nil
		}
		return &peerCounter{main: m, second: s, timeout: timeout, hard: hard}
	}
	if m := redis(st.main); m != nil {
		return &peerCounter{main: m, timeout: timeout, hard: hard}
	}
	return nil
}

// Count implements rls.PeerCounter.
func (c *peerCounter) Count(ctx context.Context, keys []string, hits []uint64, ttl []int64, perSecond []bool, out []int64) error {
	if c.second == nil {
		return c.count(ctx, c.main, keys, hits, ttl, out, nil)
	}
	var idx [2][]int
	for i := range keys {
		j := 0
		if perSecond[i] {
			j = 1
		}
		idx[j] = append(idx[j], i)
	}
	for j, st := range []*redisstore.Store{c.main, c.second} {
		if len(idx[j]) > 0 {
			if err := c.count(ctx, st, keys, hits, ttl, out, idx[j]); err != nil {
				return err
			}
		}
	}
	return nil
}

// count sends the counters at idx (all when nil) to cl.
func (c *peerCounter) count(ctx context.Context, st *redisstore.Store, keys []string, hits []uint64, ttl []int64, out []int64, idx []int) error {
	n := len(keys)
	if idx != nil {
		n = len(idx)
	}
	at := func(k int) int {
		if idx == nil {
			return k
		}
		return idx[k]
	}
	cl := st.Client()
	cmds := make(rueidis.Commands, 0, 2*n)
	named := keys
	if idx != nil {
		named = make([]string, n)
	}
	for k := range n {
		i := at(k)
		if idx != nil {
			named[k] = keys[i]
		}
		cmds = append(cmds, cl.B().Incrby().Key(keys[i]).Increment(int64(hits[i])).Build(),
			cl.B().Expire().Key(keys[i]).Seconds(ttl[i]).Build())
	}
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = st.ProgressContext(ctx, named, c.timeout, c.hard)
		defer cancel()
	}
	res := cl.DoMulti(ctx, cmds...)
	for k := range n {
		v, err := res[2*k].AsInt64()
		if err != nil {
			return fmt.Errorf("rls: INCRBY %s: %w", keys[at(k)], err)
		}
		if err := res[2*k+1].Error(); err != nil {
			return fmt.Errorf("rls: EXPIRE %s: %w", keys[at(k)], err)
		}
		out[at(k)] = v
	}
	return nil
}
