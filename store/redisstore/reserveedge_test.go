package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

func reservedFree(t *testing.T, s *Store, h limiter.Hit) int64 {
	t.Helper()
	h.Cost, h.Reserve, h.Lease = 1, false, 0
	out := make([]floodgate.Decision, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Decide(ctx, []limiter.Hit{h}, true, out); err != nil {
		t.Fatal(err)
	}
	if !out[0].Allowed {
		return 0
	}
	return out[0].Remaining + 1
}

func settleWithin(s *Store, d time.Duration, hits ...limiter.Hit) ([]limiter.Settled, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	out := make([]limiter.Settled, len(hits))
	err := s.Settle(ctx, hits, out)
	return out, err
}

func reserveAll(t *testing.T, s *Store, hits ...limiter.Hit) []floodgate.Decision {
	t.Helper()
	out := make([]floodgate.Decision, len(hits))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Reserve(ctx, hits, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSettleLostReplyAndRestart: a settle whose answer never comes (the
// server paused past the caller's deadline) and that is sent again once
// the server resumes is applied once, whichever of the two applied it,
// and the copy is answered as that one was; a reservation made before a
// restart (no persistence) is answered not
// found, and changes nothing.
func TestSettleLostReplyAndRestart(t *testing.T) {
	srv := redistest.Start(t)
	s, err := New(Options{URL: "redis://" + srv.Addr, Prefix: uniquePrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := ruletest.Rule(t, floodgate.Limit{Name: "lost_w", Algorithm: floodgate.FixedWindow, Max: 100, Window: 1000 * time.Hour})
	h := limiter.Hit{Rule: w, Key: "k", Cost: 10, Lease: 77, Reserve: true, TTL: time.Hour}
	if d := reserveAll(t, s, h)[0]; !d.Allowed {
		t.Fatal(d)
	}
	srv.Pause()
	h.Cost = 4
	_, err1 := settleWithin(s, 300*time.Millisecond, h)
	srv.Resume()
	t.Logf("first settle while paused: %v", err1)
	time.Sleep(300 * time.Millisecond)
	out, err2 := settleWithin(s, 5*time.Second, h)
	t.Logf("retry: %+v %v", out, err2)
	if got := reservedFree(t, s, h); got != 96 {
		t.Fatalf("free %d, want 96", got)
	}
	// Applied once (96 free), and the copy answered as the settle that
	// applied it, whichever of the two that was.
	if err2 != nil || !out[0].Found || out[0].Remaining != 96 {
		t.Fatalf("the settle sent again: %+v %v, want found with 96 free", out, err2)
	}
	// A restart: the records are gone; a settle is answered not found.
	h2 := h
	h2.Lease, h2.Cost = 78, 10
	reserveAll(t, s, h2)
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	var last error
	for i := 0; i < 50; i++ {
		h2.Cost = 0
		out, err := settleWithin(s, 2*time.Second, h2)
		if err == nil {
			if out[0].Found {
				t.Fatalf("record survived a restart without persistence: %+v", out)
			}
			last = nil
			break
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	if last != nil {
		t.Fatalf("settle after restart: %v", last)
	}
	if got := reservedFree(t, s, h); got != 100 {
		t.Fatalf("after restart: %d free", got)
	}
}

// TestSettleConcurrentFromTwoInstances: eight settles of one reservation
// at once, from two stores (two instances) on one Redis or Cluster: each
// reserved hit is settled exactly once, and every copy is answered as the
// one that settled it.
func TestSettleConcurrentFromTwoInstances(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			a := storeOn(t, mode)
			var url string
			if mode == "cluster" {
				c := sharedCluster(t)
				url = "redis+cluster://" + c.Addrs()[0]
			} else {
				url = "redis://" + sharedServer(t).Addr
			}
			b, err := New(Options{URL: url, Prefix: a.prefix})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			tb := ruletest.Rule(t, floodgate.Limit{Name: "cc_tb", Algorithm: floodgate.TokenBucket, Rate: 1, Per: time.Hour, Burst: 100})
			fw := ruletest.Rule(t, floodgate.Limit{Name: "cc_fw", Algorithm: floodgate.FixedWindow, Max: 100, Window: 1000 * time.Hour})
			sl := ruletest.Rule(t, floodgate.Limit{Name: "cc_sl", Algorithm: floodgate.SlidingLog, Max: 100, Window: 1000 * time.Hour})
			for round := range 20 {
				id := uint64(1000 + round)
				hits := []limiter.Hit{
					{Rule: tb, Key: "u", Cost: 10, Lease: id, Reserve: true, TTL: time.Hour},
					{Rule: fw, Key: "org", Cost: 10, Lease: id, Reserve: true, TTL: time.Hour},
					{Rule: sl, Key: "x", Cost: 10, Lease: id, Reserve: true, TTL: time.Hour},
				}
				for _, d := range reserveAll(t, a, hits...) {
					if !d.Allowed {
						t.Fatal(d)
					}
				}
				var found atomic.Int64
				var mu sync.Mutex
				answers := map[limiter.Settled]int{}
				var wg sync.WaitGroup
				for g := range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						st := a
						if g%2 == 1 {
							st = b
						}
						sh := make([]limiter.Hit, len(hits))
						copy(sh, hits)
						for i := range sh {
							sh[i].Cost = 3
						}
						out, err := settleWithin(st, 5*time.Second, sh...)
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						defer mu.Unlock()
						for _, o := range out {
							if o.Found {
								found.Add(1)
								answers[o]++
							}
						}
					}()
				}
				wg.Wait()
				// Applied once (the units free below), and every copy
				// answered as the one that applied it.
				if found.Load() != 24 || len(answers) > 3 {
					t.Fatalf("round %d: %d hits answered found, %d answers %v; want 24, as the first 3", round, found.Load(), len(answers), answers)
				}
			}
			for _, h := range []limiter.Hit{{Rule: tb, Key: "u"}, {Rule: fw, Key: "org"}, {Rule: sl, Key: "x"}} {
				if got := reservedFree(t, a, h); got != 40 {
					t.Errorf("%s: %d free, want 40", h.Rule.Name(), got)
				}
			}
		})
	}
}

// TestSettleAfterRecordTTL: a settle after the reservation's TTL finds
// nothing and the estimate stands; reservations never settled each leave
// one record, which carries the reservation's TTL.
func TestSettleAfterRecordTTL(t *testing.T) {
	srv := sharedServer(t)
	s := newStandalone(t)
	w := ruletest.Rule(t, floodgate.Limit{Name: "ttl_w", Algorithm: floodgate.FixedWindow, Max: 100, Window: 1000 * time.Hour})
	h := limiter.Hit{Rule: w, Key: "k", Cost: 10, Lease: 5, Reserve: true, TTL: 300 * time.Millisecond}
	reserveAll(t, s, h)
	rk := recordKey(s.Key(w, "k"), 5)
	if p, err := srv.Do("PTTL", rk); err != nil || p == "-1" || p == "-2" {
		t.Fatalf("record %s: PTTL %q %v", rk, p, err)
	}
	time.Sleep(500 * time.Millisecond)
	h.Cost = 0
	out, err := settleWithin(s, 5*time.Second, h)
	if err != nil || out[0].Found {
		t.Fatalf("late settle: %+v %v", out, err)
	}
	if got := reservedFree(t, s, h); got != 90 {
		t.Fatalf("%d free, want 90 (the estimate stands)", got)
	}
	// Never settled: each reservation leaves one record, of a hundred
	// bytes or so, that expires with it.
	flood := ruletest.Rule(t, floodgate.Limit{Name: "ttl_flood", Algorithm: floodgate.TokenBucket, Rate: 1000000,
		Per: time.Second, Burst: 1000000})
	for i := range 500 {
		reserveAll(t, s, limiter.Hit{Rule: flood, Key: "flood", Cost: 1, Lease: uint64(100 + i), Reserve: true, TTL: time.Hour})
	}
	for i := range 500 {
		rk := recordKey(s.Key(flood, "flood"), uint64(100+i))
		p, err := srv.Do("PTTL", rk)
		if err != nil {
			t.Fatal(err)
		}
		if ms, _ := strconv.Atoi(p); ms <= 0 || ms > 3600000 {
			t.Fatalf("record %d: PTTL %q, want the reservation's hour", i, p)
		}
	}
}

// TestSettleOverrunAfterWindowsRolled: a settle above the estimate two
// windows after the reservation charges the excess in the window of now,
// once, and leaves the passed window alone.
func TestSettleOverrunAfterWindowsRolled(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			s := storeOn(t, mode)
			for _, lim := range []floodgate.Limit{
				{Name: "roll_fw", Algorithm: floodgate.FixedWindow, Max: 10, Window: time.Second},
				{Name: "roll_sw", Algorithm: floodgate.SlidingWindow, Max: 10, Window: time.Second},
				{Name: "roll_sl", Algorithm: floodgate.SlidingLog, Max: 10, Window: time.Second},
			} {
				r := ruletest.Rule(t, lim)
				now := int64(1_800_000_000_000_000) // µs, a window start
				s.testNow.Store(now + 100_000)
				h := limiter.Hit{Rule: r, Key: "k", Cost: 5, Lease: 9, Reserve: true, TTL: time.Hour}
				reserveAll(t, s, h)
				// another request in the same window
				out := make([]floodgate.Decision, 1)
				if err := s.Decide(context.Background(), []limiter.Hit{{Rule: r, Key: "k", Cost: 4}}, false, out); err != nil || !out[0].Allowed {
					t.Fatal(err, out)
				}
				s.testNow.Store(now + 2_500_000) // two windows on
				h.Cost = 8
				res, err := settleWithin(s, 5*time.Second, h)
				if err != nil || !res[0].Found || res[0].Overrun != 0 {
					t.Fatalf("%s: %+v %v", lim.Name, res, err)
				}
				if got := reservedFree(t, s, h); got != 7 {
					t.Errorf("%s: %d free, want 7 (3 of the excess charged now)", lim.Name, got)
				}
				s.testNow.Store(0)
			}
		})
	}
}

// TestSettleClusterNodeDies: a reservation over two slots on two nodes,
// one of which dies before the settle. Slot by slot in the hits' order: a
// settle that reaches the live node first settles it there and fails on
// the dead one; one that reaches the dead node first fails before the live
// one, which keeps its estimate. Once the node is back (empty), the second
// settle sent again settles the live node's record, and the first's is
// gone: nothing is settled twice.
func TestSettleClusterNodeDies(t *testing.T) {
	c := redistest.StartClusterWith(t, redistest.ClusterConfig{Args: []string{"--cluster-require-full-coverage", "no"}})
	s, err := New(Options{URL: "redis+cluster://" + c.Addrs()[0] + "," + c.Addrs()[1], Prefix: uniquePrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := ruletest.Rule(t, floodgate.Limit{Name: "nd_w", Algorithm: floodgate.FixedWindow, Max: 100, Window: 1000 * time.Hour})
	owner := func(key string) *redistest.Server {
		for _, n := range c.Nodes {
			if _, err := n.Do("EXISTS", key); err == nil {
				return n
			}
		}
		return nil
	}
	// two subjects on two nodes
	a := "a0"
	na := owner(s.Key(w, a))
	var b string
	for i := 1; i < 200; i++ {
		b = fmt.Sprintf("b%d", i)
		if nb := owner(s.Key(w, b)); nb != nil && nb != na {
			break
		}
	}
	nb := owner(s.Key(w, b))
	t.Logf("a on %s, b on %s", na.Addr, nb.Addr)
	ha := limiter.Hit{Rule: w, Key: a, Cost: 10, Lease: 1, Reserve: true, TTL: time.Hour}
	hb := limiter.Hit{Rule: w, Key: b, Cost: 10, Lease: 1, Reserve: true, TTL: time.Hour}
	reserveAll(t, s, ha, hb)
	ha2, hb2 := ha, hb
	ha2.Lease, hb2.Lease = 2, 2
	reserveAll(t, s, hb2, ha2)
	if got := reservedFree(t, s, ha); got != 80 {
		t.Fatalf("a: %d free", got)
	}
	nb.Kill()
	ha.Cost, hb.Cost = 3, 3
	if out, err := settleWithin(s, time.Second, ha, hb); err == nil || !out[0].Found || out[1].Found {
		t.Fatalf("settle a then b: %+v %v, want a settled and an error for b", out, err)
	}
	ha2.Cost, hb2.Cost = 3, 3
	if out, err := settleWithin(s, time.Second, hb2, ha2); err == nil || out[0].Found || out[1].Found {
		t.Fatalf("settle b then a: %+v %v, want an error and nothing settled", out, err)
	}
	if got := reservedFree(t, s, ha); got != 87 {
		t.Fatalf("a: %d free, want 87 (the first settled at 3, the second keeping its estimate)", got)
	}
	// Retry once the node is back (empty): a's first record is gone, its
	// second is settled now.
	if err := nb.Restart(); err != nil {
		t.Fatal(err)
	}
	var out3, out4 []limiter.Settled
	var err3, err4 error
	for range 100 {
		if out4, err4 = settleWithin(s, 2*time.Second, hb2, ha2); err4 == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err4 != nil || out4[0].Found || !out4[1].Found {
		t.Fatalf("second settle sent again: %+v %v, want b not found (its node lost it) and a settled", out4, err4)
	}
	if out3, err3 = settleWithin(s, 2*time.Second, ha, hb); err3 != nil || !out3[0].Found || out3[0].Remaining != 87 || out3[1].Found {
		t.Fatalf("first settle sent again: %+v %v, want a answered as it was (87 free) and b not found", out3, err3)
	}
	if got := reservedFree(t, s, ha); got != 94 {
		t.Fatalf("a: %d free, want 94 (both reservations settled at 3, once)", got)
	}
}
