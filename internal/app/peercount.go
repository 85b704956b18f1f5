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
// there is one.
type peerCounter struct {
	main, second rueidis.Client // second nil: main has every counter
	timeout      time.Duration
}

// newPeerCounter returns the counter over the Redis of st, or nil when its
// main store is not Redis.
func newPeerCounter(st *stores, timeout time.Duration) *peerCounter {
	client := func(s limiter.Store) rueidis.Client {
		if rs, ok := s.(*redisstore.Store); ok {
			return rs.Client()
		}
		return nil
	}
	if ps, ok := st.main.(*perSecondSplit); ok {
		m, s := client(ps.other), client(ps.second)
		if m == nil || s == nil {
			return nil
		}
		return &peerCounter{main: m, second: s, timeout: timeout}
	}
	if m := client(st.main); m != nil {
		return &peerCounter{main: m, timeout: timeout}
	}
	return nil
}

// Count implements rls.PeerCounter.
func (c *peerCounter) Count(ctx context.Context, keys []string, hits []uint64, ttl []int64, perSecond []bool, out []int64) error {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
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
	for j, cl := range []rueidis.Client{c.main, c.second} {
		if len(idx[j]) > 0 {
			if err := c.count(ctx, cl, keys, hits, ttl, out, idx[j]); err != nil {
				return err
			}
		}
	}
	return nil
}

// count sends the counters at idx (all when nil) to cl.
func (c *peerCounter) count(ctx context.Context, cl rueidis.Client, keys []string, hits []uint64, ttl []int64, out []int64, idx []int) error {
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
	cmds := make(rueidis.Commands, 0, 2*n)
	for k := range n {
		i := at(k)
		cmds = append(cmds, cl.B().Incrby().Key(keys[i]).Increment(int64(hits[i])).Build(),
			cl.B().Expire().Key(keys[i]).Seconds(ttl[i]).Build())
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
