package redisstore

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// The fault tests run the engine over a store on a server of their own,
// break the server under load and check what callers see. They wait for
// conditions, never for fixed times; how fast decisions come back and how
// soon the breaker closes are measured by scripts/bench-faults.sh.
const faultTimeout = 100 * time.Millisecond // the engine's deadline per store call

// faultRig is an engine over a redisstore, with one rule per failure
// policy, each in requests of its own.
type faultRig struct {
	srv    *redistest.Server
	store  *Store
	local  *memstore.Store
	lim    *limiter.Limiter
	rules  map[floodgate.FailurePolicy]*limiter.Rule
	before int // goroutines before the rig started
}

func newFaultRig(t *testing.T) *faultRig {
	t.Helper()
	before := runtime.NumGoroutine()
	srv := redistest.Start(t)
	s, err := New(Options{URL: "redis://" + srv.Addr, Prefix: uniquePrefix(t), WriteTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	local, err := memstore.New(memstore.Options{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	rig := &faultRig{srv: srv, store: s, local: local, before: before, rules: map[floodgate.FailurePolicy]*limiter.Rule{}}
	for _, p := range []floodgate.FailurePolicy{floodgate.FailOpen, floodgate.FailClosed, floodgate.FailLocal} {
		// A token bucket, so that no window boundary can refill the local
		// fallback during the test.
		r := ruletest.With(t, floodgate.Limit{Name: "fault_" + p.String(), Algorithm: floodgate.TokenBucket,
			Rate: 1_000_000, Per: time.Hour, Burst: 1_000_000}, limiter.RuleOptions{OnFailure: p})
		rig.rules[p] = r
	}
	// The local fallback of the local rule: 1,000,000 split over 10,000
	// instances = a burst of 100 requests, refilling 100 an hour.
	rig.lim = limiter.New(s, limiter.Options{
		Timeout:   faultTimeout,
		Instances: 10_000,
		Local:     local,
		Breaker:   limiter.BreakerOptions{Failures: 3, ProbeInterval: 100 * time.Millisecond},
	})
	return rig
}

// close stops the stores and checks that no goroutine was left behind.
func (rig *faultRig) close(t *testing.T) {
	t.Helper()
	rig.store.Close()
	rig.local.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= rig.before+2 {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("goroutine leak: %d goroutines, %d before\n%s", n, rig.before, buf)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// loadStats is what the load saw, per failure policy.
type loadStats struct {
	mu                 sync.Mutex // guards the fields below
	slowest            time.Duration
	errors             int64
	allowed, denied    map[floodgate.FailurePolicy]int64
	degradedAllowed    map[floodgate.FailurePolicy]int64
	degradedDenied     map[floodgate.FailurePolicy]int64
	undegradedRequests int64
}

// load runs workers per policy until stop closes.
func (rig *faultRig) load(stop <-chan struct{}, st *loadStats) *sync.WaitGroup {
	st.allowed, st.denied = map[floodgate.FailurePolicy]int64{}, map[floodgate.FailurePolicy]int64{}
	st.degradedAllowed, st.degradedDenied = map[floodgate.FailurePolicy]int64{}, map[floodgate.FailurePolicy]int64{}
	var wg sync.WaitGroup
	var seq atomic.Int64
	for p, r := range rig.rules {
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					hits := []limiter.Hit{{Rule: r, Key: "subject", Cost: 1}}
					t0 := time.Now()
					res, err := rig.lim.Check(context.Background(), hits)
					took := time.Since(t0)
					seq.Add(1)
					st.mu.Lock()
					st.slowest = max(st.slowest, took)
					switch {
					case err != nil:
						st.errors++
					case res.Degraded != limiter.NotDegraded && res.Allowed:
						st.degradedAllowed[p]++
					case res.Degraded != limiter.NotDegraded:
						st.degradedDenied[p]++
					case res.Allowed:
						st.allowed[p]++
						st.undegradedRequests++
					default:
						st.denied[p]++
						st.undegradedRequests++
					}
					st.mu.Unlock()
					time.Sleep(time.Millisecond)
				}
			}()
		}
	}
	return &wg
}

// waitFor polls cond (under st's lock) until it holds, for at most 30 s.
func (st *loadStats) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st.mu.Lock()
		ok := cond()
		st.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitBreakerClosed sends requests until one is decided by the store again
// and returns how long that took.
func (rig *faultRig) waitBreakerClosed(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	hits := []limiter.Hit{{Rule: rig.rules[floodgate.FailOpen], Key: "probe", Cost: 1}}
	for time.Since(start) < 30*time.Second {
		res, err := rig.lim.Check(context.Background(), hits)
		if err == nil && res.Degraded == limiter.NotDegraded && !rig.lim.Stats().BreakerOpen {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the breaker did not close within 30s: %+v", rig.lim.Stats())
	return 0
}

// degradedEverywhere reports (under st's lock) that every policy has
// decided while degraded, and that the local fallback's share, 100, is
// used up.
func (st *loadStats) degradedEverywhere() bool {
	open, closed, local := floodgate.FailOpen, floodgate.FailClosed, floodgate.FailLocal
	return st.degradedAllowed[open] > 0 && st.degradedDenied[closed] > 0 &&
		st.degradedAllowed[local] >= 100 && st.degradedDenied[local] > 0
}

func (st *loadStats) checkPolicies(t *testing.T) {
	t.Helper()
	st.mu.Lock()
	defer st.mu.Unlock()
	t.Logf("slowest %v; by store: allowed %v denied %v; degraded: allowed %v denied %v",
		st.slowest, st.allowed, st.denied, st.degradedAllowed, st.degradedDenied)
	if st.errors != 0 {
		t.Fatalf("%d checks returned an error; a failing store must be decided by policy", st.errors)
	}
	open, closed, local := floodgate.FailOpen, floodgate.FailClosed, floodgate.FailLocal
	if st.degradedDenied[open] != 0 || st.degradedAllowed[open] == 0 {
		t.Fatalf("allow policy while degraded: %d allowed, %d denied; want all allowed",
			st.degradedAllowed[open], st.degradedDenied[open])
	}
	if st.degradedAllowed[closed] != 0 || st.degradedDenied[closed] == 0 {
		t.Fatalf("deny policy while degraded: %d allowed, %d denied; want all denied",
			st.degradedAllowed[closed], st.degradedDenied[closed])
	}
	if st.degradedAllowed[local] == 0 || st.degradedAllowed[local] > 100 {
		t.Fatalf("local policy while degraded: %d allowed, want 1..100 (the split limit)", st.degradedAllowed[local])
	}
	if st.undegradedRequests == 0 {
		t.Fatalf("no request reached the store")
	}
}

// TestFaultKill: Redis SIGKILLed under load. Each limit follows its policy,
// the breaker opens and closes again once Redis is back, and no goroutine
// is left behind.
func TestFaultKill(t *testing.T) {
	rig := newFaultRig(t)
	stop := make(chan struct{})
	var st loadStats
	wg := rig.load(stop, &st)
	st.waitFor(t, "decisions by the store", func() bool { return st.undegradedRequests >= 60 })
	rig.srv.Kill()
	st.waitFor(t, "every policy to decide, the local share used up", st.degradedEverywhere)
	st.waitFor(t, "the breaker to open", func() bool { return rig.lim.Stats().BreakerOpen })
	close(stop)
	wg.Wait()
	st.checkPolicies(t)
	if !rig.lim.Stats().BreakerOpen {
		t.Fatalf("breaker not open with Redis dead: %+v", rig.lim.Stats())
	}
	if st.degradedAllowed[floodgate.FailLocal] != 100 {
		t.Fatalf("local policy allowed %d while degraded, want exactly the split limit 100", st.degradedAllowed[floodgate.FailLocal])
	}
	if err := rig.srv.Restart(); err != nil {
		t.Fatal(err)
	}
	took := rig.waitBreakerClosed(t)
	t.Logf("breaker closed %v after Redis came back", took)
	rig.close(t)
}

// TestFaultPause: Redis SIGSTOPped under load. Decisions still come back,
// by policy (at their deadline, then at once with the breaker open);
// after SIGCONT the store decides again.
func TestFaultPause(t *testing.T) {
	rig := newFaultRig(t)
	stop := make(chan struct{})
	var st loadStats
	wg := rig.load(stop, &st)
	st.waitFor(t, "decisions by the store", func() bool { return st.undegradedRequests >= 60 })
	rig.srv.Pause()
	st.waitFor(t, "every policy to decide, the local share used up", st.degradedEverywhere)
	st.waitFor(t, "the breaker to open", func() bool { return rig.lim.Stats().BreakerOpen })
	close(stop)
	wg.Wait()
	rig.srv.Resume()
	st.checkPolicies(t)
	took := rig.waitBreakerClosed(t)
	t.Logf("breaker closed %v after SIGCONT", took)
	rig.close(t)
}

// TestScriptFlushUnderLoad: SCRIPT FLUSH while batched decisions run never
// surfaces an error: EVALSHA's NOSCRIPT is answered by EVAL, and nothing
// is charged twice (a call refused with NOSCRIPT did not run).
func TestScriptFlushUnderLoad(t *testing.T) {
	srv := sharedServer(t)
	s := newStandalone(t)
	avoidHourBoundary()
	r := ruletest.With(t, floodgate.Limit{Name: "flush", Algorithm: floodgate.FixedWindow, Max: 1 << 40, Window: time.Hour}, limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	lim := limiter.New(s, limiter.Options{Timeout: 2 * time.Second})
	stop := make(chan struct{})
	var calls, storeErrs, degraded, allowed atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hits := []limiter.Hit{{Rule: r, Key: "k", Cost: 1}}
			out := make([]floodgate.Decision, 1)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				calls.Add(1)
				if i%2 == 0 {
					if err := s.Decide(context.Background(), hits, false, out); err != nil {
						storeErrs.Add(1)
						t.Errorf("store error after SCRIPT FLUSH: %v", err)
					} else if out[0].Allowed {
						allowed.Add(1)
					}
					continue
				}
				res, err := lim.Check(context.Background(), hits)
				if err != nil || res.Degraded != limiter.NotDegraded {
					degraded.Add(1)
				} else if res.Allowed {
					allowed.Add(1)
				}
			}
		}()
	}
	// Twenty flushes, each after at least 50 more calls.
	for i := 0; i < 20; i++ {
		want := calls.Load() + 50
		for deadline := time.Now().Add(30 * time.Second); calls.Load() < want; {
			if time.Now().After(deadline) {
				t.Fatalf("no calls for 30s (%d)", calls.Load())
			}
			time.Sleep(time.Millisecond)
		}
		if _, err := srv.Do("SCRIPT", "FLUSH"); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if calls.Load() < 100 || storeErrs.Load() != 0 || degraded.Load() != 0 {
		t.Fatalf("%d calls, %d store errors, %d degraded engine decisions; want many calls and no errors",
			calls.Load(), storeErrs.Load(), degraded.Load())
	}
	t.Logf("%d calls across 20 SCRIPT FLUSHes", calls.Load())
	if st := lim.Stats(); st.StoreFailures != 0 {
		t.Fatalf("engine saw %d store failures", st.StoreFailures)
	}
	out := make([]floodgate.Decision, 1)
	if err := s.Decide(context.Background(), []limiter.Hit{{Rule: r, Key: "k", Cost: 1}}, true, out); err != nil {
		t.Fatal(err)
	}
	if used := r.Capacity() - out[0].Remaining - 1; used != allowed.Load() {
		t.Fatalf("the window counts %d, the callers were allowed %d", used, allowed.Load())
	}
}
