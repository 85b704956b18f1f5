package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// mixedRequest is one request of TestBatchDecidesAsOneByOne.
type mixedRequest struct {
	op   scriptOp
	hits []limiter.Hit
}

// mixedRequests returns n requests over every algorithm, with costs from 1
// to above the capacity, one to three hits, shadow hits, peeks, releases,
// reservations and their settles, on few keys so that they interact.
func mixedRequests(t *testing.T, rng *rand.Rand, n int) []mixedRequest {
	t.Helper()
	rules := conformLimits(t)
	shadow := ruletest.Shadow(t, floodgate.Limit{Name: "mixshadow", Algorithm: floodgate.FixedWindow, Max: 3,
		Window: time.Second})
	rules = append(rules, shadow)
	var reqs, reserves []mixedRequest
	for range n {
		var rq mixedRequest
		rq.op = opCharge
		if rng.IntN(8) == 0 {
			rq.op = opPeek
		}
		key := fmt.Sprintf("mix%d", rng.IntN(3))
		used := map[*limiter.Rule]bool{}
		for range 1 + rng.IntN(3) {
			r := rules[rng.IntN(len(rules))]
			if used[r] {
				continue
			}
			used[r] = true
			cost := int64(1)
			if rng.IntN(3) == 0 {
				cost = 1 + rng.Int64N(r.Capacity()) // up to the capacity
			}
			rq.hits = append(rq.hits, limiter.Hit{Rule: r, Key: key, Cost: cost, Lease: uint64(1 + rng.IntN(3))})
		}
		if len(rq.hits) == 1 && rq.hits[0].Rule.Algorithm() == floodgate.Concurrency && rng.IntN(2) == 0 {
			rq.op = opRelease
		}
		if rq.op == opCharge {
			id := uint64(1 + rng.IntN(3))
			switch rng.IntN(5) {
			case 0: // a reservation of some of the hits
				rq.op = opReserve
				for i := range rq.hits {
					h := &rq.hits[i]
					h.Lease, h.TTL, h.Reserve = id, time.Hour, i == 0 || rng.IntN(2) == 0
				}
			case 1, 2: // a settle of an earlier reservation (or of none)
				rq.op = opSettle
				if len(reserves) > 0 && rng.IntN(4) > 0 {
					rq.hits = slices.Clone(reserves[rng.IntN(len(reserves))].hits)
				}
				for i := range rq.hits {
					h := &rq.hits[i]
					if !h.Reserve {
						h.Lease, h.Reserve = id, true
					}
					h.Cost = rng.Int64N(h.Rule.Capacity() + 2) // below, at or above the estimate
				}
			}
		}
		reqs = append(reqs, rq)
		if rq.op == opReserve {
			reserves = append(reserves, rq)
		}
	}
	return reqs
}

// TestBatchDecidesAsOneByOne: requests of every algorithm, mixed costs,
// several hits, shadow hits, peeks, releases, reserves and settles, decided by one script
// call, get exactly the answers they get when decided one by one at the
// same instant, and leave the same state behind.
func TestBatchDecidesAsOneByOne(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(16, 10))
			for round := range 20 {
				one, batched := storeOn(t, mode), storeOn(t, mode)
				now := time.Date(2026, 3, 7, 23, 59, 50, 0, time.UTC).UnixMicro() + int64(round)*123_457
				one.testNow.Store(now)
				batched.testNow.Store(now)
				reqs := mixedRequests(t, rng, 40)

				// One by one, through the store's verbs.
				want := make([][]floodgate.Decision, len(reqs))
				wantErr := make([]error, len(reqs))
				for i, rq := range reqs {
					want[i] = make([]floodgate.Decision, len(rq.hits))
					wantErr[i] = applyOp(ctx, one, rq.op, rq.hits, want[i])
				}

				// All in one script call (one slot: the keys share a
				// hash tag... per key, so a call per key on a Cluster).
				bySlot := map[uint16][]*request{}
				var order []*request
				for _, rq := range reqs {
					r := getRequest()
					for i := range rq.hits {
						r.idx = append(r.idx, i)
					}
					batched.prepare(rq.op, rq.hits, r, false)
					sl := slot(r.keys[0])
					bySlot[sl] = append(bySlot[sl], r)
					order = append(order, r)
				}
				for _, b := range bySlot {
					batched.exec(ctx, b)
				}
				for i, r := range order {
					if r.err != nil {
						t.Fatalf("round %d request %d: %v", round, i, r.err)
					}
					for j := range reqs[i].hits {
						if reqs[i].op == opRelease {
							break // answers nothing: the state is compared below
						}
						v := r.vals[6*j : 6*j+6]
						got := floodgate.Decision{Allowed: v[0] == 1,
							Limit: reqs[i].hits[j].Rule.Capacity(), Remaining: v[1], RetryAfter: time.Duration(v[2]),
							ResetAfter: time.Duration(v[3]), Delay: time.Duration(v[4])}
						if reqs[i].op == opSettle {
							// What Settle answers (applyOp's form).
							got = floodgate.Decision{Limit: got.Limit}
							if v[0] == 1 {
								got.Allowed, got.Remaining, got.Overrun = true, v[1], v[2]
							}
						}
						want[i][j].Mark = 0 // the one by one call's: the batch's raw answer carries none
						if got != want[i][j] {
							t.Fatalf("round %d request %d (%v) hit %d (%s cost %d):\n batch      %+v\n one by one %+v",
								round, i, reqs[i].op, j, reqs[i].hits[j].Rule.Name(), reqs[i].hits[j].Cost, got, want[i][j])
						}
					}
					putRequest(r)
				}
				// The same state: a peek of every key answers the same.
				for _, rq := range reqs {
					for _, h := range rq.hits {
						h.Cost = 1
						a, b := make([]floodgate.Decision, 1), make([]floodgate.Decision, 1)
						errA := one.Decide(ctx, []limiter.Hit{h}, true, a)
						errB := batched.Decide(ctx, []limiter.Hit{h}, true, b)
						if a[0] != b[0] || (errA == nil) != (errB == nil) {
							t.Fatalf("round %d: state of %s/%s differs:\n batch      %+v %v\n one by one %+v %v",
								round, h.Rule.Name(), h.Key, b[0], errB, a[0], errA)
						}
					}
				}
			}
		})
	}
}

// TestBatchingUnderLoad: with many callers, requests share script calls,
// and a lone caller's request is sent at once.
func TestBatchingUnderLoad(t *testing.T) {
	s := newStandalone(t)
	r := ruletest.With(t, floodgate.Limit{Name: "load", Algorithm: floodgate.TokenBucket, Rate: 1, Per: time.Hour,
		Burst: 1000}, limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	ctx := context.Background()
	out := make([]floodgate.Decision, 1)
	if err := s.Decide(ctx, []limiter.Hit{{Rule: r, Key: "lone", Cost: 1}}, false, out); err != nil || !out[0].Allowed {
		t.Fatalf("lone request: %+v %v", out[0], err)
	}
	if calls, reqs := s.Calls(); calls != 1 || reqs != 1 {
		t.Fatalf("lone request: %d calls for %d requests", calls, reqs)
	}
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for w := range 64 {
		wg.Go(func() {
			out := make([]floodgate.Decision, 1)
			for range 40 {
				hits := []limiter.Hit{{Rule: r, Key: "hot", Cost: 1}}
				if w%2 == 0 {
					hits[0].Key = fmt.Sprintf("k%d", w)
				}
				if err := s.Decide(ctx, hits, false, out); err != nil {
					t.Error(err)
					return
				}
				if out[0].Allowed && hits[0].Key == "hot" {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	calls, reqs := s.Calls()
	t.Logf("%d requests in %d script calls", reqs-1, calls-1)
	if reqs != 1+64*40 || calls >= reqs {
		t.Fatalf("%d calls for %d requests, want fewer calls than requests", calls, reqs)
	}
	if allowed.Load() != 1000 {
		t.Fatalf("hot key allowed %d, want exactly its burst, 1000", allowed.Load())
	}
}

// TestQueuedRequestNotSent: a request still waiting for its batch when its
// context ends is never sent: it fails with limiter.ErrNotSent, and Redis
// counts only the requests that were sent.
func TestQueuedRequestNotSent(t *testing.T) {
	srv := redistest.Start(t)
	s, err := New(Options{URL: "redis://" + srv.Addr, BatchesInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := ruletest.With(t, floodgate.Limit{Name: "queued", Algorithm: floodgate.FixedWindow, Max: 1000, Window: time.Hour}, limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	hit := []limiter.Hit{{Rule: r, Key: "k", Cost: 1}}
	apply := func(d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		return s.Decide(ctx, hit, false, make([]floodgate.Decision, 1))
	}
	avoidHourBoundary()
	if err := apply(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	sent := make(chan error, 1)
	go func() { sent <- apply(10 * time.Second) }() // sent, held by the stopped server
	for deadline := time.Now().Add(10 * time.Second); ; {
		if calls, _ := s.Calls(); calls == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second request was not sent")
		}
		time.Sleep(time.Millisecond)
	}
	// The lane's one call is in flight: this one waits, and gives up.
	if err := apply(100 * time.Millisecond); !errors.Is(err, limiter.ErrNotSent) {
		t.Fatalf("queued request: %v, want ErrNotSent", err)
	}
	srv.Resume()
	if err := <-sent; err != nil {
		t.Fatalf("the request in flight: %v", err)
	}
	out := make([]floodgate.Decision, 1)
	if err := s.Decide(context.Background(), hit, true, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Remaining != 1000-2-1 {
		t.Fatalf("peek %+v: want the two sent requests counted, not the one that gave up", out[0])
	}
}

// TestNoBatching: with MaxBatch 1 every request has a script call of its
// own, and decisions stay exact.
func TestNoBatching(t *testing.T) {
	srv := sharedServer(t)
	s, err := New(Options{URL: "redis://" + srv.Addr, Prefix: uniquePrefix(t), MaxBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := ruletest.With(t, floodgate.Limit{Name: "nobatch", Algorithm: floodgate.FixedWindow, Max: 300, Window: time.Hour}, limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	avoidHourBoundary()
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			out := make([]floodgate.Decision, 1)
			for range 20 {
				if err := s.Decide(context.Background(), []limiter.Hit{{Rule: r, Key: "k", Cost: 1}}, false, out); err != nil {
					t.Error(err)
					return
				}
				if out[0].Allowed {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if calls, reqs := s.Calls(); calls != reqs || reqs != 32*20 || allowed.Load() != 300 {
		t.Fatalf("%d calls for %d requests, %d allowed; want a call each and exactly 300 allowed", calls, reqs, allowed.Load())
	}
}

// TestSecondCallWaitsForAQueue: beside calls in flight, a request goes at
// once only while at most one other request is in flight; the next ones
// wait, and a further call goes once MaxBatch/8 of them wait, and no fewer
// than the calls in flight carry. The server is paused, so every call
// stays in flight until the end.
func TestSecondCallWaitsForAQueue(t *testing.T) {
	srv := redistest.Start(t)
	s, err := New(Options{URL: "redis://" + srv.Addr, MaxBatch: 32, BatchesInFlight: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := ruletest.With(t, floodgate.Limit{Name: "spill", Algorithm: floodgate.FixedWindow, Max: 1000, Window: time.Hour}, limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	avoidHourBoundary()
	decide := func() error {
		return s.Decide(context.Background(), []limiter.Hit{{Rule: r, Key: "k", Cost: 1}}, false, make([]floodgate.Decision, 1))
	}
	if err := decide(); err != nil { // loads the script
		t.Fatal(err)
	}
	waitFor := func(what string, cond func(calls int64, pending int) bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; {
			calls, _ := s.Calls()
			s.single.mu.Lock()
			pending := len(s.single.pending)
			s.single.mu.Unlock()
			if cond(calls, pending) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d calls, %d waiting", what, calls, pending)
			}
			time.Sleep(time.Millisecond)
		}
	}
	srv.Pause()
	errs := make(chan error, 8)
	send := func() { go func() { errs <- decide() }() }
	send()
	waitFor("the first request sent at once", func(c int64, _ int) bool { return c == 2 })
	send()
	waitFor("the second request sent beside the first", func(c int64, _ int) bool { return c == 3 })
	for i := 1; i < 32/8; i++ {
		send()
		waitFor("a request waiting behind two", func(_ int64, p int) bool { return p == i })
	}
	if calls, _ := s.Calls(); calls != 3 {
		t.Fatalf("%d calls with %d requests waiting, want 3", calls, 32/8-1)
	}
	send()
	waitFor("a further call for a queue of MaxBatch/8", func(c int64, p int) bool { return c == 4 && p == 0 })
	// Six requests are in flight now: MaxBatch/8 waiting is not enough
	// for a fourth call; six are.
	inFlight := 2 + 32/8
	for i := 1; i < inFlight; i++ {
		send()
		waitFor("a request waiting behind three calls", func(_ int64, p int) bool { return p == i })
	}
	if calls, _ := s.Calls(); calls != 4 {
		t.Fatalf("%d calls with %d requests waiting beside %d in flight, want 4", calls, inFlight-1, inFlight)
	}
	send()
	waitFor("a further call for a queue as long as the calls in flight carry", func(c int64, p int) bool { return c == 5 && p == 0 })
	srv.Resume()
	for range 2 * inFlight {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	out := make([]floodgate.Decision, 1)
	if err := s.Decide(context.Background(), []limiter.Hit{{Rule: r, Key: "k", Cost: 1}}, true, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Remaining != int64(1000-1-2*inFlight-1) { // a peek answers as if it charged
		t.Fatalf("peek %+v: want every request counted once", out[0])
	}
}
