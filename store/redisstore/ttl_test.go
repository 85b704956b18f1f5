package redisstore

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
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

// TestFixedWindowKeepsItsTTL: a fixed window's key written again within
// its window keeps the TTL of the window's end (written with KEEPTTL),
// also when a batch writes a fresh key twice, first with its TTL.
func TestFixedWindowKeepsItsTTL(t *testing.T) {
	srv := sharedServer(t)
	s := newStandalone(t)
	ctx := context.Background()
	r := ruletest.Rule(t, floodgate.Limit{Name: "keepttl", Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Hour})
	avoidHourBoundary()
	pttl := func(key string) int {
		t.Helper()
		v, err := srv.Do("PTTL", s.Key(r, key))
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("key %s has PTTL %s, want one until its window ends", key, v)
		}
		return n
	}
	hits := []limiter.Hit{{Rule: r, Key: "a", Cost: 1}, {Rule: r, Key: "b", Cost: 1}}
	out := make([]floodgate.Decision, 1)
	if err := s.Decide(ctx, hits[:1], false, out); err != nil {
		t.Fatal(err)
	}
	first := pttl("a")
	left := int(out[0].ResetAfter / time.Millisecond)
	if first < left || first > left+2000 {
		t.Fatalf("PTTL %d ms after the first charge, want the window's end, %d ms away", first, left)
	}
	// The server's clock may not move by a millisecond between two
	// charges: push the TTL back to tell a kept TTL from one written anew.
	if _, err := srv.Do("PEXPIRE", s.Key(r, "a"), strconv.Itoa(first+60000)); err != nil {
		t.Fatal(err)
	}
	if err := s.Decide(ctx, hits[:1], false, out); err != nil {
		t.Fatal(err)
	}
	if got := pttl("a"); got < first+50000 {
		t.Fatalf("PTTL %d ms after a charge in the same window, want the key's TTL kept (about %d)", got, first+60000)
	}
	// One batch charging a fresh key twice: the second write keeps the
	// TTL the first gives it.
	batch := make([]*request, 2)
	for i := range batch {
		rq := getRequest()
		rq.idx = append(rq.idx[:0], 1)
		s.prepare(opCharge, hits, rq, false)
		batch[i] = rq
	}
	s.exec(ctx, batch)
	for _, rq := range batch {
		if rq.err != nil || rq.got != 1 {
			t.Fatalf("batch: charged %d, %v", rq.got, rq.err)
		}
		putRequest(rq)
	}
	pttl("b")
}
