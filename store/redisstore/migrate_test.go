package redisstore

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// TestSlotMigrationUnderLoad: a Cluster slot moved to another primary
// (CLUSTER SETSLOT ... MIGRATING/IMPORTING, MIGRATE in chunks, as
// redis-cli --cluster reshard does) while 32 callers charge its keys
// through the engine fails no decision and sends none to the failure
// policy, and every allowed charge is counted exactly once. While a
// slot's keys are split between the two nodes, Redis answers a script
// call naming several of them TRYAGAIN; the store used to fail the whole
// batch with it (about 40% of the decisions in the slot went to their
// failure policies, and the breaker opened for every slot).
func TestSlotMigrationUnderLoad(t *testing.T) {
	cl := redistest.StartCluster(t)
	s, err := New(Options{URL: "redis+cluster://" + cl.Addrs()[0], Prefix: "mig:"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	lim := limiter.New(s, limiter.Options{})
	opts := limiter.RuleOptions{OnFailure: floodgate.FailClosed}
	ra := ruletest.With(t, floodgate.Limit{Name: "mig_a", Algorithm: floodgate.FixedWindow, Max: 1 << 40, Window: time.Hour}, opts)
	rb := ruletest.With(t, floodgate.Limit{Name: "mig_b", Algorithm: floodgate.TokenBucket, Rate: 1 << 30, Per: time.Hour, Burst: 1 << 30}, opts)

	// 300 subjects whose keys all live in one slot; half of them charged
	// before the move, the rest new while it runs.
	hot := slot(s.Key(ra, "u0"))
	var subs []string
	for i := 0; len(subs) < 300; i++ {
		if k := "u" + strconv.Itoa(i); slot(s.Key(ra, k)) == hot {
			subs = append(subs, k)
		}
	}
	var charged sync.Map // subject → *atomic.Int64: allowed charges of ra
	count := func(k string) { v, _ := charged.LoadOrStore(k, new(atomic.Int64)); v.(*atomic.Int64).Add(1) }
	for _, k := range subs[:150] {
		res, err := lim.Check(context.Background(), []limiter.Hit{{Rule: ra, Key: k, Cost: 1}, {Rule: rb, Key: k, Cost: 1}})
		if err != nil || !res.Allowed || res.Degraded != limiter.NotDegraded {
			t.Fatalf("before the move: %+v, %v", res, err)
		}
		count(k)
	}

	src, err := cl.PrimaryOf(int(hot))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := cl.Primaries()
	if err != nil {
		t.Fatal(err)
	}
	var dst *redistest.Server
	for _, p := range ps {
		if p != src {
			dst = p
			break
		}
	}
	srcID, err1 := src.Do("CLUSTER", "MYID")
	dstID, err2 := dst.Do("CLUSTER", "MYID")
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}

	var decided, degraded, failed atomic.Int64
	var firstProblem atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; ; i += 7 {
				select {
				case <-stop:
					return
				default:
				}
				k := subs[i%len(subs)]
				hits := []limiter.Hit{{Rule: ra, Key: k, Cost: 1}}
				if g%2 == 1 {
					hits = append(hits, limiter.Hit{Rule: rb, Key: k, Cost: 1})
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				res, err := lim.Check(ctx, hits)
				cancel()
				decided.Add(1)
				switch {
				case err != nil:
					failed.Add(1)
					firstProblem.CompareAndSwap(nil, err.Error())
				case res.Degraded != limiter.NotDegraded:
					degraded.Add(1)
					firstProblem.CompareAndSwap(nil, "degraded: "+res.Degraded.String())
				case res.Allowed:
					count(k)
				}
			}
		}()
	}
	waitFor(t, "decisions under load", 10*time.Second, func() bool { return decided.Load() > 500 })

	ts := strconv.Itoa(int(hot))
	if _, err := dst.Do("CLUSTER", "SETSLOT", ts, "IMPORTING", srcID); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Do("CLUSTER", "SETSLOT", ts, "MIGRATING", dstID); err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(dst.Addr, ":")
	for moved := 0; ; {
		keys, err := src.Do("CLUSTER", "GETKEYSINSLOT", ts, "5")
		if err != nil {
			t.Fatal(err)
		}
		if keys == "" {
			t.Logf("moved %d keys of slot %d", moved, hot)
			break
		}
		ks := strings.Split(keys, "\n")
		if _, err := src.Do(append([]string{"MIGRATE", host, port, "", "0", "5000", "KEYS"}, ks...)...); err != nil {
			t.Fatal(err)
		}
		moved += len(ks)
		time.Sleep(2 * time.Millisecond) // let decisions run between the chunks
	}
	for _, n := range []*redistest.Server{dst, src} {
		if _, err := n.Do("CLUSTER", "SETSLOT", ts, "NODE", dstID); err != nil {
			t.Fatal(err)
		}
	}
	at := decided.Load()
	waitFor(t, "decisions after the move", 10*time.Second, func() bool { return decided.Load() > at+500 })
	close(stop)
	wg.Wait()

	t.Logf("%d decisions, %d failed, %d degraded", decided.Load(), failed.Load(), degraded.Load())
	if failed.Load() != 0 || degraded.Load() != 0 {
		t.Fatalf("%d of %d decisions failed and %d followed their failure policy while slot %d moved; first: %v",
			failed.Load(), decided.Load(), degraded.Load(), hot, firstProblem.Load())
	}
	// Every allowed charge is in Redis once: neither lost nor doubled.
	for _, k := range subs {
		var want int64
		if v, ok := charged.Load(k); ok {
			want = v.(*atomic.Int64).Load()
		}
		out := make([]floodgate.Decision, 1)
		if err := s.Decide(context.Background(), []limiter.Hit{{Rule: ra, Key: k, Cost: 1}}, true, out); err != nil {
			t.Fatal(err)
		}
		// A peek of 1 answers the units left after that 1.
		if got := ra.Capacity() - out[0].Remaining - 1; got != want {
			t.Errorf("%s: Redis counted %d charges, %d were allowed", k, got, want)
		}
	}

	// A move left half done (one of a subject's two keys moved back, the
	// slot left migrating) keeps answering TRYAGAIN: a call without a
	// deadline fails with it, in bounded time, rather than waiting forever.
	k := subs[0]
	if _, err := src.Do("CLUSTER", "SETSLOT", ts, "IMPORTING", dstID); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.Do("CLUSTER", "SETSLOT", ts, "MIGRATING", srcID); err != nil {
		t.Fatal(err)
	}
	host, port, _ = strings.Cut(src.Addr, ":")
	if _, err := dst.Do("MIGRATE", host, port, s.Key(ra, k), "0", "5000"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		out := make([]floodgate.Decision, 2)
		done <- s.Decide(context.Background(), []limiter.Hit{{Rule: ra, Key: k, Cost: 1}, {Rule: rb, Key: k, Cost: 1}}, false, out)
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "TRYAGAIN") {
			t.Fatalf("a call on a half-moved subject: %v, want TRYAGAIN", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a call on a half-moved subject still waits after 20 s")
	}
}
