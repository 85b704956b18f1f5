package limiter_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

const hour = time.Hour

func newMem(t testing.TB) *memstore.Store {
	t.Helper()
	s, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func window(t testing.TB, name string, max int64, onFailure floodgate.FailurePolicy) *limiter.Rule {
	return ruletest.With(t, floodgate.Limit{Name: name, Algorithm: floodgate.FixedWindow, Max: max, Window: 1000 * hour}, limiter.RuleOptions{OnFailure: onFailure})
}

// shadowWindow is window in shadow mode.
func shadowWindow(t testing.TB, name string, max int64) *limiter.Rule {
	return ruletest.Shadow(t, floodgate.Limit{Name: name, Algorithm: floodgate.FixedWindow, Max: max, Window: 1000 * hour})
}

func bucket(t testing.TB, name string, burst int64, onFailure floodgate.FailurePolicy) *limiter.Rule {
	return ruletest.With(t, floodgate.Limit{Name: name, Algorithm: floodgate.TokenBucket, Rate: 1, Per: hour, Burst: burst}, limiter.RuleOptions{OnFailure: onFailure})
}

// testStore wraps a real store and can be told to fail or to block until
// the call's context is done. It counts the calls that reach it.
type testStore struct {
	inner    limiter.Store
	fail     atomic.Bool
	lose     atomic.Bool // apply the call, then fail it: an answer lost on the way
	block    atomic.Bool
	calls    atomic.Int64
	deadline atomic.Int64 // time left until the deadline at the last call, ns
	hasDL    atomic.Bool  // the last call had a deadline
	hold     atomic.Int64 // ns each call takes (or until ctx ends)
	inflight atomic.Int64
	peak     atomic.Int64  // most calls in flight at once
	gate     chan struct{} // when set, calls wait for it (or ctx) first
}

var errDown = errors.New("store down")

// call runs one store call through the store's faults: fail, lose, block,
// hold and gate.
func (s *testStore) call(ctx context.Context, inner func() error) error {
	s.calls.Add(1)
	n := s.inflight.Add(1)
	defer s.inflight.Add(-1)
	for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
	}
	d, ok := ctx.Deadline()
	s.hasDL.Store(ok)
	s.deadline.Store(int64(time.Until(d)))
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if s.block.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	if h := time.Duration(s.hold.Load()); h > 0 {
		t := time.NewTimer(h)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if s.fail.Load() {
		return errDown
	}
	if s.lose.Load() {
		inner()
		return errDown
	}
	return inner()
}

func (s *testStore) Decide(ctx context.Context, hits []limiter.Hit, peek bool, out []floodgate.Decision) error {
	return s.call(ctx, func() error { return s.inner.Decide(ctx, hits, peek, out) })
}

// Release passes on to the wrapped store, which keeps no leases unless it
// is a Releaser.
func (s *testStore) Release(ctx context.Context, hits []limiter.Hit) error {
	return s.call(ctx, func() error {
		if r, ok := s.inner.(limiter.Releaser); ok {
			return r.Release(ctx, hits)
		}
		return nil
	})
}

// Refund passes on to the wrapped store, which keeps every charge unless it
// is a Refunder.
func (s *testStore) Refund(ctx context.Context, hits []limiter.Hit) error {
	return s.call(ctx, func() error {
		if r, ok := s.inner.(limiter.Refunder); ok {
			return r.Refund(ctx, hits)
		}
		return nil
	})
}

func check(t testing.TB, l *limiter.Limiter, hits ...limiter.Hit) limiter.Result {
	t.Helper()
	r, err := l.Check(context.Background(), hits)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	return r
}

func TestAllOrNothingAndBinding(t *testing.T) {
	l := limiter.New(newMem(t), limiter.Options{})
	user := window(t, "user", 10, floodgate.FailOpen)
	route := bucket(t, "route", 2, floodgate.FailOpen)
	global := window(t, "global", 3, floodgate.FailOpen)
	hits := []limiter.Hit{{Rule: user, Key: "u1", Cost: 1}, {Rule: route, Key: "r1", Cost: 1}, {Rule: global, Key: "g", Cost: 1}}

	r := check(t, l, hits...)
	if !r.Allowed || r.Binding != 1 || r.Decisions[1].Remaining != 1 {
		t.Fatalf("first: %+v, want allowed, binding 1 (the fewest remaining)", r)
	}
	check(t, l, hits...)
	// The route bucket is empty (retry in about an hour); the global
	// window has 1 left.
	r = check(t, l, hits...)
	if r.Allowed || r.Binding != 1 || r.RetryAfter < hour-time.Minute || r.RetryAfter > hour {
		t.Fatalf("third: %+v, want denied by the route with a retry of about an hour", r)
	}
	// Nothing was charged, so the hits that allowed report what they
	// have left as they are: the user 8, the global window 1.
	for i, want := range []int64{8, 0, 1} {
		if r.Decisions[i].Remaining != want {
			t.Fatalf("third: hit %d remaining %d, want %d (nothing charged)", i, r.Decisions[i].Remaining, want)
		}
	}
	// Nothing was charged: the user still has 8 and the global limit 1.
	p, err := l.Peek(context.Background(), hits[:1])
	if err != nil || p.Decisions[0].Remaining != 7 {
		t.Fatalf("peek user: %+v, %v; want 7 remaining after a peeked unit", p, err)
	}
	other := []limiter.Hit{{Rule: user, Key: "u2", Cost: 1}, {Rule: global, Key: "g", Cost: 1}}
	if r := check(t, l, other...); !r.Allowed || r.Decisions[1].Remaining != 0 {
		t.Fatalf("global's last unit: %+v", r)
	}
	// Two denials: the most specific binds, the longest wait is reported.
	r = check(t, l, hits...)
	if r.Allowed || r.Binding != 1 {
		t.Fatalf("two denials: %+v, want binding 1", r)
	}
	if gw := r.Decisions[2].RetryAfter; gw <= r.Decisions[1].RetryAfter || r.RetryAfter != gw {
		t.Fatalf("two denials: retry %v, want the longer one %v", r.RetryAfter, gw)
	}
}

func TestCostErrors(t *testing.T) {
	ts := &testStore{inner: newMem(t)}
	l := limiter.New(ts, limiter.Options{})
	r := window(t, "w", 5, floodgate.FailOpen)
	if _, err := l.Check(context.Background(), []limiter.Hit{{Rule: r, Key: "k", Cost: 6}}); !errors.Is(err, floodgate.ErrNeverFits) {
		t.Fatalf("cost above capacity: %v, want ErrNeverFits", err)
	}
	if _, err := l.Check(context.Background(), []limiter.Hit{{Rule: r, Key: "k", Cost: 0}}); !errors.Is(err, floodgate.ErrInvalidCost) {
		t.Fatalf("cost 0: %v, want ErrInvalidCost", err)
	}
	if _, err := l.Check(context.Background(), []limiter.Hit{{Key: "k", Cost: 1}}); err == nil {
		t.Fatal("hit without a rule: no error")
	}
	if n := ts.calls.Load(); n != 0 {
		t.Fatalf("store called %d times for invalid requests", n)
	}
	if r, err := l.Check(context.Background(), nil); err != nil || !r.Allowed || r.Binding != -1 {
		t.Fatalf("no hits: %+v, %v; want allowed, binding -1", r, err)
	}
}

func TestShadow(t *testing.T) {
	l := limiter.New(newMem(t), limiter.Options{})
	sh := shadowWindow(t, "shadow", 1)
	en := window(t, "enforced", 5, floodgate.FailOpen)
	hits := []limiter.Hit{{Rule: sh, Key: "k", Cost: 1}, {Rule: en, Key: "k", Cost: 1}}
	check(t, l, hits...)
	r := check(t, l, hits...)
	if !r.Allowed || !r.ShadowDenied || r.Flags[0] != limiter.Shadow|limiter.ShadowDenied || r.Binding != 1 {
		t.Fatalf("%+v, want allowed with the shadow hit denied and binding 1", r)
	}
}

func TestConcurrencyLeases(t *testing.T) {
	l := limiter.New(newMem(t), limiter.Options{})
	c := ruletest.Rule(t, floodgate.Limit{Name: "inflight", Algorithm: floodgate.Concurrency, Max: 2, LeaseTTL: hour})
	a := []limiter.Hit{{Rule: c, Key: "k", Cost: 1}}
	b := []limiter.Hit{{Rule: c, Key: "k", Cost: 1}}
	check(t, l, a...)
	check(t, l, b...)
	if a[0].Lease == 0 || b[0].Lease == 0 || a[0].Lease == b[0].Lease {
		t.Fatalf("leases %d and %d, want two distinct non-zero ones", a[0].Lease, b[0].Lease)
	}
	third := []limiter.Hit{{Rule: c, Key: "k", Cost: 1}}
	if r := check(t, l, third...); r.Allowed {
		t.Fatalf("third while two are held: %+v", r)
	}
	if err := l.Release(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	third[0].Lease = 0
	if r := check(t, l, third...); !r.Allowed {
		t.Fatalf("after a release: %+v", r)
	}
}

func TestFailurePolicies(t *testing.T) {
	ts := &testStore{inner: newMem(t)}
	ts.fail.Store(true)
	local := newMem(t)
	l := limiter.New(ts, limiter.Options{Local: local, Instances: 4, Breaker: limiter.BreakerOptions{Failures: -1}})
	open := window(t, "open", 100, floodgate.FailOpen)
	closed := window(t, "closed", 100, floodgate.FailClosed)
	loc := bucket(t, "local", 8, floodgate.FailLocal) // 2 per instance

	r := check(t, l, limiter.Hit{Rule: open, Key: "k", Cost: 1})
	if !r.Allowed || r.Degraded == limiter.NotDegraded || r.Flags[0] != limiter.Degraded {
		t.Fatalf("fail open: %+v", r)
	}
	r = check(t, l, limiter.Hit{Rule: closed, Key: "k", Cost: 1})
	if r.Allowed || r.Degraded == limiter.NotDegraded || r.RetryAfter != limiter.DefaultClosedRetryAfter || r.Binding != 0 {
		t.Fatalf("fail closed: %+v", r)
	}
	// The local share of a burst of 8 over 4 instances is 2.
	for i := range 2 {
		if r := check(t, l, limiter.Hit{Rule: loc, Key: "k", Cost: 1}); !r.Allowed || r.Degraded == limiter.NotDegraded || r.Decisions[0].Limit != 2 {
			t.Fatalf("local %d: %+v, want allowed by a limit of 2", i, r)
		}
	}
	if r := check(t, l, limiter.Hit{Rule: loc, Key: "k", Cost: 1}); r.Allowed {
		t.Fatalf("local 3: %+v, want denied", r)
	}
	// A closed denial keeps the local hit from being charged.
	r = check(t, l, limiter.Hit{Rule: loc, Key: "k2", Cost: 1}, limiter.Hit{Rule: closed, Key: "k", Cost: 1})
	if r.Allowed || r.Binding != 1 {
		t.Fatalf("local + closed: %+v", r)
	}
	for range 2 {
		if r := check(t, l, limiter.Hit{Rule: loc, Key: "k2", Cost: 1}); !r.Allowed {
			t.Fatalf("k2 was charged by a denied request: %+v", r)
		}
	}
	// A cost within the global burst but above the local share is denied.
	if r := check(t, l, limiter.Hit{Rule: loc, Key: "k3", Cost: 3}); r.Allowed {
		t.Fatalf("cost 3 with a local share of 2: %+v", r)
	}
	if st := l.Stats(); st.Degraded == 0 || st.StoreFailures == 0 {
		t.Fatalf("stats %+v, want degraded decisions and failures counted", st)
	}
	// Once the store answers, it decides again.
	ts.fail.Store(false)
	if r := check(t, l, limiter.Hit{Rule: loc, Key: "k", Cost: 1}); !r.Allowed || r.Degraded != limiter.NotDegraded || r.Decisions[0].Limit != 8 {
		t.Fatalf("store back: %+v", r)
	}
}

func TestLearnedInstances(t *testing.T) {
	ts := &testStore{inner: newMem(t)}
	ts.fail.Store(true)
	var n atomic.Int64
	n.Store(2)
	l := limiter.New(ts, limiter.Options{Local: newMem(t), InstancesFunc: func() int { return int(n.Load()) }})
	loc := window(t, "local", 10, floodgate.FailLocal)
	if r := check(t, l, limiter.Hit{Rule: loc, Key: "a", Cost: 1}); r.Decisions[0].Limit != 5 {
		t.Fatalf("2 instances: limit %d, want 5", r.Decisions[0].Limit)
	}
	n.Store(5)
	if r := check(t, l, limiter.Hit{Rule: loc, Key: "a", Cost: 1}); r.Decisions[0].Limit != 2 {
		t.Fatalf("5 instances: limit %d, want 2", r.Decisions[0].Limit)
	}
}

func TestSplitRule(t *testing.T) {
	r := ruletest.With(t, floodgate.Limit{Name: "q", Algorithm: floodgate.Quota, Max: 10, Period: floodgate.Day}, limiter.RuleOptions{OnFailure: floodgate.FailLocal})
	for _, tc := range []struct {
		n    int
		want int64
	}{{1, 10}, {3, 3}, {10, 1}, {50, 1}} {
		s, err := limiter.SplitRule(r, tc.n)
		if err != nil || s.Limit().Max != tc.want {
			t.Fatalf("split over %d: %+v, %v; want max %d", tc.n, s, err, tc.want)
		}
	}
	tb := bucket(t, "tb", 9, floodgate.FailLocal)
	s, err := limiter.SplitRule(tb, 3)
	if err != nil || s.Limit().Burst != 3 || s.Limit().Rate != 1 || s.ID() == tb.ID() {
		t.Fatalf("split token bucket: %+v, %v", s, err)
	}
}

func TestTimeout(t *testing.T) {
	ts := &testStore{inner: newMem(t)}
	ts.block.Store(true)
	l := limiter.New(ts, limiter.Options{Timeout: 20 * time.Millisecond})
	r := check(t, l, limiter.Hit{Rule: window(t, "w", 5, floodgate.FailClosed), Key: "k", Cost: 1})
	if r.Allowed || r.Degraded == limiter.NotDegraded {
		t.Fatalf("blocked store: %+v, want a degraded denial", r)
	}
	// (A stalled machine may reach the store after the deadline passed.)
	if d := ts.deadline.Load(); !ts.hasDL.Load() || d > int64(20*time.Millisecond) {
		t.Fatalf("store saw a deadline: %v, %v from now; want one at most 20ms away", ts.hasDL.Load(), time.Duration(d))
	}
	// A caller that gives up gets its own error, not a policy decision.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Check(ctx, []limiter.Hit{{Rule: window(t, "w", 5, floodgate.FailOpen), Key: "k", Cost: 1}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: %v, want context.Canceled", err)
	}
}

// allowStore allows every hit and keeps no state: a store for tests of
// the engine's own behaviour, with no goroutines of its own (so that it
// can live in a synctest bubble).
type allowStore struct{}

func (allowStore) Decide(_ context.Context, hits []limiter.Hit, _ bool, out []floodgate.Decision) error {
	for i := range hits {
		c := hits[i].Rule.Capacity()
		out[i] = floodgate.Decision{Allowed: true, Limit: c, Remaining: c - hits[i].Cost}
	}
	return nil
}

// TestBreakerRun: a run of failures with no success among them, sent over
// at least one store deadline, opens the breaker; while open, the store is
// asked once per probe interval, and the first probe that works closes it
// with a clean record.
func TestBreakerRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := &testStore{inner: allowStore{}}
		ts.fail.Store(true)
		l := limiter.New(ts, limiter.Options{Timeout: 100 * time.Millisecond,
			Breaker: limiter.BreakerOptions{Failures: 3, ProbeInterval: 50 * time.Millisecond}})
		hit := limiter.Hit{Rule: window(t, "w", 1000, floodgate.FailOpen), Key: "k", Cost: 1}
		// A burst of failures within one deadline: a stall, not a dead store.
		for range 10 {
			check(t, l, hit)
		}
		if l.Stats().BreakerOpen {
			t.Fatal("open after failures all sent at one instant")
		}
		time.Sleep(60 * time.Millisecond)
		check(t, l, hit)
		if l.Stats().BreakerOpen {
			t.Fatal("open after failures sent over 60ms, less than the deadline")
		}
		time.Sleep(40 * time.Millisecond)
		check(t, l, hit)
		if st := l.Stats(); !st.BreakerOpen || st.BreakerOpens != 1 || st.StoreFailures != 12 {
			t.Fatalf("after failures sent over 100ms: %+v, want open", st)
		}
		// While open and within the probe interval, nothing reaches the
		// store.
		before := ts.calls.Load()
		for range 20 {
			if r := check(t, l, hit); r.Degraded != limiter.DegradedBreakerOpen {
				t.Fatalf("open breaker: %+v, want degraded by the breaker", r)
			}
		}
		if n := ts.calls.Load() - before; n != 0 {
			t.Fatalf("%d store calls within the probe interval, want 0", n)
		}
		// One probe per interval; a failed one keeps it open.
		time.Sleep(50 * time.Millisecond)
		for range 5 {
			check(t, l, hit)
		}
		if n := ts.calls.Load() - before; n != 1 || !l.Stats().BreakerOpen {
			t.Fatalf("%d store calls after one interval (open %v), want 1 failed probe", n, l.Stats().BreakerOpen)
		}
		// The store is back: the next probe closes the breaker.
		ts.fail.Store(false)
		if r := check(t, l, hit); r.Degraded != limiter.DegradedBreakerOpen {
			t.Fatalf("before the next probe: %+v", r)
		}
		time.Sleep(50 * time.Millisecond)
		if r := check(t, l, hit); r.Degraded != limiter.NotDegraded || l.Stats().BreakerOpen {
			t.Fatalf("probe after the store came back: %+v, %+v", r, l.Stats())
		}
		// A clean record: a run of failures must start over.
		ts.fail.Store(true)
		check(t, l, hit)
		time.Sleep(100 * time.Millisecond)
		check(t, l, hit)
		if st := l.Stats(); st.BreakerOpen || st.BreakerOpens != 1 {
			t.Fatalf("two failures after closing: %+v, want closed", st)
		}
	})
}

// TestBreakerRate: the failure rate over the window opens the breaker once
// enough calls ended in it, and the window forgets what is older.
func TestBreakerRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		opts := limiter.Options{Breaker: limiter.BreakerOptions{
			Failures: 1000, MinCalls: 20, FailureRatio: 0.5, Window: 10 * time.Second}}
		hit := limiter.Hit{Rule: window(t, "w", 1<<40, floodgate.FailOpen), Key: "k", Cost: 1}
		run := func(l *limiter.Limiter, ts *testStore, ok, failed int) {
			ts.fail.Store(false)
			for range ok {
				check(t, l, hit)
			}
			ts.fail.Store(true)
			for range failed {
				check(t, l, hit)
			}
		}

		// Too few calls: 19 failures in a row never open it.
		ts := &testStore{inner: allowStore{}}
		l := limiter.New(ts, opts)
		run(l, ts, 0, 19)
		if l.Stats().BreakerOpen {
			t.Fatal("open after 19 calls, want at least MinCalls (20)")
		}
		run(l, ts, 0, 1)
		if !l.Stats().BreakerOpen {
			t.Fatal("closed after 20 failed calls of 20")
		}

		// A healthy store with a failure now and then: 10%, never open.
		ts = &testStore{inner: allowStore{}}
		l = limiter.New(ts, opts)
		for range 50 {
			run(l, ts, 9, 1)
			time.Sleep(100 * time.Millisecond)
		}
		if st := l.Stats(); st.BreakerOpen || st.StoreFailures != 50 {
			t.Fatalf("one call in ten failing: %+v, want closed", st)
		}

		// Half the calls of the window failing: open. The window holds
		// 450 successes and 50 failures.
		run(l, ts, 0, 399)
		if l.Stats().BreakerOpen {
			t.Fatal("449 failures of 899 calls: open")
		}
		run(l, ts, 0, 1)
		if !l.Stats().BreakerOpen {
			t.Fatalf("%+v, want open with half the window's calls failed", l.Stats())
		}

		// The same failures after the window forgot the successes.
		ts = &testStore{inner: allowStore{}}
		l = limiter.New(ts, opts)
		run(l, ts, 30, 25)
		if l.Stats().BreakerOpen {
			t.Fatal("25 failures of 55 calls: open")
		}
		time.Sleep(11 * time.Second)
		run(l, ts, 0, 20)
		if !l.Stats().BreakerOpen {
			t.Fatal("20 failures of 20 in the window: closed")
		}
	})
}

// TestBreakerOneProbeInFlight: while a probe is in flight, no other call
// reaches the store.
func TestBreakerOneProbeInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := &testStore{inner: allowStore{}}
		ts.fail.Store(true)
		l := limiter.New(ts, limiter.Options{Timeout: -1, Breaker: limiter.BreakerOptions{Failures: 1, ProbeInterval: time.Millisecond}})
		hit := limiter.Hit{Rule: window(t, "w", 1000, floodgate.FailOpen), Key: "k", Cost: 1}
		check(t, l, hit)
		ts.fail.Store(false)
		gate := make(chan struct{})
		ts.gate = gate
		time.Sleep(time.Millisecond) // the probe interval
		before := ts.calls.Load()
		probeDone := make(chan limiter.Result)
		go func() {
			r, _ := l.Check(context.Background(), []limiter.Hit{hit})
			probeDone <- r
		}()
		synctest.Wait() // the probe is held at the gate
		for range 50 {
			time.Sleep(100 * time.Microsecond)
			if r := check(t, l, hit); r.Degraded == limiter.NotDegraded {
				t.Fatalf("while the probe is in flight: %+v, want degraded", r)
			}
		}
		if n := ts.calls.Load() - before; n != 1 {
			t.Fatalf("%d store calls with one probe in flight, want 1", n)
		}
		close(gate)
		if r := <-probeDone; r.Degraded != limiter.NotDegraded || !r.Allowed {
			t.Fatalf("probe: %+v", r)
		}
		if l.Stats().BreakerOpen {
			t.Fatal("breaker open after a successful probe")
		}
	})
}

// TestStoreHeldPastDeadline: a store that keeps every call past its
// deadline (stopped, unreachable) opens the breaker (here by the failure
// rate: the window holds nothing else), and every decision comes back by
// its deadline.
func TestStoreHeldPastDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := &testStore{inner: allowStore{}}
		ts.block.Store(true)
		l := limiter.New(ts, limiter.Options{Timeout: 100 * time.Millisecond})
		hit := limiter.Hit{Rule: window(t, "w", 1000, floodgate.FailClosed), Key: "k", Cost: 1}
		var wg sync.WaitGroup
		for range 30 {
			wg.Go(func() {
				for {
					start := time.Now()
					r, err := l.Check(context.Background(), []limiter.Hit{hit})
					took := time.Since(start)
					if err != nil || r.Allowed || r.Degraded == limiter.NotDegraded || took > 100*time.Millisecond {
						t.Errorf("%+v, %v after %v; want denied by 100ms", r, err, took)
					}
					if r.Degraded == limiter.DegradedBreakerOpen {
						return
					}
				}
			})
		}
		wg.Wait()
		if st := l.Stats(); !st.BreakerOpen || st.StoreFailures < 20 || st.QueueTimeouts != 0 {
			t.Fatalf("%+v, want the breaker open after calls sent over a deadline were held", st)
		}
	})
}

// TestWaitingForSlotNotHeldAgainstStore: with every in-flight slot taken,
// calls wait for one within their deadline; a call that spent most of its
// deadline waiting here is decided by its policy when the deadline passes,
// but the breaker does not hold it against the store, and no more calls
// than MaxInFlight are ever in flight.
func TestWaitingForSlotNotHeldAgainstStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := &testStore{inner: allowStore{}}
		ts.hold.Store(int64(90 * time.Millisecond)) // slow, but within the deadline
		l := limiter.New(ts, limiter.Options{Timeout: 100 * time.Millisecond, MaxInFlight: 1,
			Breaker: limiter.BreakerOptions{Failures: 1}})
		hit := limiter.Hit{Rule: window(t, "w", 1000, floodgate.FailClosed), Key: "k", Cost: 1}
		results := make([]limiter.Result, 2)
		var wg sync.WaitGroup
		for i := range results {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * time.Millisecond)
				results[i] = check(t, l, hit)
			})
		}
		wg.Wait()
		// The first is answered after 90ms; the second got the slot then,
		// with 11ms of its deadline left.
		if r := results[0]; !r.Allowed || r.Degraded != limiter.NotDegraded || r.StoreLatency != 90*time.Millisecond {
			t.Fatalf("first: %+v", r)
		}
		if r := results[1]; r.Allowed || r.Degraded != limiter.DegradedDeadline || r.StoreLatency != 11*time.Millisecond {
			t.Fatalf("second: %+v, want denied by its policy at its deadline", r)
		}
		if st := l.Stats(); st.BreakerOpen || st.StoreFailures != 0 || st.QueueTimeouts != 1 || st.SlotWaits != 1 || ts.peak.Load() != 1 {
			t.Fatalf("%+v (peak %d in flight), want the breaker closed, one queue timeout, at most one in flight", st, ts.peak.Load())
		}
	})
}

func TestNoGoroutineLeak(t *testing.T) {
	settle := func(want int) int {
		n := runtime.NumGoroutine()
		for deadline := time.Now().Add(5 * time.Second); n > want && time.Now().Before(deadline); n = runtime.NumGoroutine() {
			time.Sleep(10 * time.Millisecond)
		}
		return n
	}
	mem := newMem(t)
	local := newMem(t)
	before := runtime.NumGoroutine()
	ts := &testStore{inner: mem}
	ts.block.Store(true)
	l := limiter.New(ts, limiter.Options{Timeout: time.Millisecond, Local: local, Breaker: limiter.BreakerOptions{Failures: -1}})
	w := window(t, "w", 1000, floodgate.FailLocal)
	var wg sync.WaitGroup
	for g := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				hits := []limiter.Hit{{Rule: w, Key: string(rune('a' + g)), Cost: 1}}
				if _, err := l.Check(context.Background(), hits); err != nil {
					t.Errorf("check %d: %v", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if after := settle(before); after > before {
		t.Fatalf("%d goroutines before, %d after", before, after)
	}
}

func TestObserver(t *testing.T) {
	ts := &testStore{inner: newMem(t)}
	type seen struct {
		front    limiter.FrontEnd
		peek     bool
		rules    []*limiter.Rule
		flags    []limiter.HitFlags
		degraded limiter.Degradation
		latency  time.Duration
		allowed  bool
	}
	var mu sync.Mutex
	var events []seen
	l := limiter.New(ts, limiter.Options{Observer: limiter.ObserverFunc(func(req *limiter.Request, res *limiter.Result) {
		e := seen{front: req.Front, peek: req.Peek, flags: slices.Clone(res.Flags), degraded: res.Degraded,
			latency: res.StoreLatency, allowed: res.Allowed}
		for _, h := range req.Hits {
			e.rules = append(e.rules, h.Rule)
		}
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	})})
	sh := shadowWindow(t, "shadow", 1)
	w := window(t, "w", 5, floodgate.FailOpen)
	var res limiter.Result
	ctx := context.Background()
	if err := l.Decide(ctx, &limiter.Request{Front: limiter.FrontRLS, Hits: []limiter.Hit{{Rule: sh, Key: "k", Cost: 1}, {Rule: w, Key: "k", Cost: 1}}}, &res); err != nil {
		t.Fatal(err)
	}
	ts.fail.Store(true)
	if err := l.Decide(ctx, &limiter.Request{Front: limiter.FrontHTTPAPI, Peek: true, Hits: []limiter.Hit{{Rule: w, Key: "k", Cost: 1}}}, &res); err != nil {
		t.Fatal(err)
	}
	if len(events) != 2 {
		t.Fatalf("%d observations, want one per request (2)", len(events))
	}
	if e := events[0]; e.front != limiter.FrontRLS || e.peek || len(e.rules) != 2 || e.rules[0] != sh ||
		e.flags[0] != limiter.Shadow || e.flags[1] != 0 || e.degraded != limiter.NotDegraded || e.latency <= 0 || !e.allowed {
		t.Fatalf("first request: %+v", e)
	}
	if e := events[1]; e.front != limiter.FrontHTTPAPI || !e.peek || e.rules[0] != w || e.flags[0] != limiter.Degraded ||
		e.degraded != limiter.DegradedStoreError {
		t.Fatalf("second request: %+v", e)
	}
}

func TestLeakyQueueDelay(t *testing.T) {
	l := limiter.New(newMem(t), limiter.Options{})
	q := ruletest.Rule(t, floodgate.Limit{Name: "q", Algorithm: floodgate.LeakyQueue, Rate: 1, Per: hour, Burst: 2})
	check(t, l, limiter.Hit{Rule: q, Key: "k", Cost: 1})
	r := check(t, l, limiter.Hit{Rule: q, Key: "k", Cost: 1}, limiter.Hit{Rule: window(t, "w", 5, floodgate.FailOpen), Key: "k", Cost: 1})
	if !r.Allowed || r.Delay < hour-time.Minute || r.Delay > hour {
		t.Fatalf("%+v, want allowed after a delay of about an hour", r)
	}
}

func TestFailLocalWithoutLocalStore(t *testing.T) {
	ts := &testStore{inner: newMem(t)}
	ts.fail.Store(true)
	l := limiter.New(ts, limiter.Options{})
	w := window(t, "w", 1, floodgate.FailLocal)
	for range 3 {
		if r := check(t, l, limiter.Hit{Rule: w, Key: "k", Cost: 1}); !r.Allowed || r.Degraded == limiter.NotDegraded {
			t.Fatalf("%+v, want a degraded allow (no local store: fail open)", r)
		}
	}
}

func TestReleaseDuringOutage(t *testing.T) {
	ts := &testStore{inner: newMem(t)}
	ts.fail.Store(true)
	l := limiter.New(ts, limiter.Options{Local: newMem(t), Breaker: limiter.BreakerOptions{Failures: -1}})
	c := ruletest.With(t, floodgate.Limit{Name: "inflight", Algorithm: floodgate.Concurrency, Max: 1, LeaseTTL: hour}, limiter.RuleOptions{OnFailure: floodgate.FailLocal})
	first := []limiter.Hit{{Rule: c, Key: "k", Cost: 1}}
	if r := check(t, l, first...); !r.Allowed || r.Degraded == limiter.NotDegraded {
		t.Fatalf("first: %+v", r)
	}
	second := []limiter.Hit{{Rule: c, Key: "k", Cost: 1}}
	if r := check(t, l, second...); r.Allowed {
		t.Fatalf("second while the local lease is held: %+v", r)
	}
	if err := l.Release(context.Background(), first); !errors.Is(err, errDown) {
		t.Fatalf("release with the store down: %v, want the store's error", err)
	}
	if r := check(t, l, second...); !r.Allowed {
		t.Fatalf("second after the release: %+v, want the local lease freed", r)
	}
}
