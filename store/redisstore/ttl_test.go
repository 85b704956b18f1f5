package redisstore

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/limiter"
)

// TestEveryKeyHasTTL charges, peeks, denies and releases on every
// algorithm, then looks at every key the store wrote: each must expire.
func TestEveryKeyHasTTL(t *testing.T) {
	srv := sharedServer(t)
	s := newStandalone(t)
	ctx := context.Background()
	rules := conformLimits(t)
	for _, r := range rules {
		for i := 0; i < 3*int(r.Params().Capacity()); i++ {
			for _, op := range []scriptOp{opCharge, opPeek, opRelease} {
				if op == opRelease && r.Algorithm() != floodgate.Concurrency {
					continue
				}
				hits := []limiter.Hit{{Rule: r, Key: "ttl" + strconv.Itoa(i%3), Cost: 1, Lease: uint64(i % 4)}}
				out := make([]floodgate.Decision, 1)
				if err := applyOp(ctx, s, op, hits, out); err != nil {
					t.Fatalf("%s: %v", r.ID(), err)
				}
			}
		}
	}
	keys, err := srv.Do("KEYS", s.prefix+"*")
	if err != nil {
		t.Fatal(err)
	}
	list := strings.Fields(keys)
	if len(list) < len(rules) {
		t.Fatalf("only %d keys written for %d rules", len(list), len(rules))
	}
	for _, k := range list {
		ttl, err := srv.Do("PTTL", k)
		if err != nil {
			t.Fatal(err)
		}
		// -1 is a key without a TTL. -2: the key expired between KEYS
		// and PTTL, so it had one; 0: it expires within the millisecond.
		if n, err := strconv.Atoi(ttl); err != nil || n == -1 || n < -2 {
			t.Fatalf("key %s has PTTL %s; every key must expire", k, ttl)
		}
	}
	t.Logf("%d keys, all with a TTL", len(list))
}
