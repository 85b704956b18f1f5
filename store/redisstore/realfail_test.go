package redisstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// TestPauseLeavesNoPhantomLeases: Redis stopped (SIGSTOP) while requests
// under a concurrency limit come and go. Each request is decided by its
// policy: allowed (allow), it is done and releases its lease while Redis
// still does not answer; refused (deny), it never runs and, as the
// gateway does, releases nothing. Once Redis resumes, it runs the
// acquisitions that were written to it before the deadline; no release of
// theirs reached it. With nobody in flight any more, the limit must admit
// again: no lease may be held for a request that has ended or never ran.
func TestPauseLeavesNoPhantomLeases(t *testing.T) {
	for _, policy := range []floodgate.FailurePolicy{floodgate.FailOpen, floodgate.FailClosed} {
		t.Run(policy.String(), func(t *testing.T) { testPauseLeavesNoPhantomLeases(t, policy) })
	}
}

func testPauseLeavesNoPhantomLeases(t *testing.T, policy floodgate.FailurePolicy) {
	srv := redistest.Start(t)
	s, err := New(Options{URL: "redis://" + srv.Addr, Prefix: uniquePrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const max = 4
	conc := ruletest.With(t, floodgate.Limit{Name: "phantom_conc", Algorithm: floodgate.Concurrency, Max: max},
		limiter.RuleOptions{OnFailure: policy})
	probe := ruletest.With(t, floodgate.Limit{Name: "phantom_probe", Algorithm: floodgate.TokenBucket,
		Rate: 1_000_000, Per: time.Hour, Burst: 1_000_000}, limiter.RuleOptions{OnFailure: floodgate.FailOpen})
	lim := limiter.New(s, limiter.Options{}) // the defaults: a 250 ms deadline, the default breaker

	// A request: acquire, hold briefly, release; refused, nothing.
	request := func() (limiter.Result, error) {
		hits := []limiter.Hit{{Rule: conc, Key: "upstream", Cost: 1}}
		res, err := lim.Check(context.Background(), hits)
		if err != nil || !res.Allowed {
			return res, err
		}
		time.Sleep(time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		lim.Release(ctx, hits) // may fail while Redis is stopped: the lease then ends at its TTL
		cancel()
		return res, nil
	}
	for range 3 * max { // healthy: every lease comes back
		if res, err := request(); err != nil || !res.Allowed || res.Degraded != limiter.NotDegraded {
			t.Fatalf("healthy request: %+v, %v", res, err)
		}
	}

	srv.Pause()
	var wg sync.WaitGroup
	var mu sync.Mutex
	degraded := 0
	for range 16 { // 16 callers, 3 requests each: the first ones reach Redis' socket
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				res, err := request()
				mu.Lock()
				if err == nil && res.Degraded != limiter.NotDegraded {
					degraded++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	srv.Resume()
	t.Logf("degraded while stopped: %d; stats %+v", degraded, lim.Stats())

	// Wait for the store to decide again.
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := lim.Check(context.Background(), []limiter.Hit{{Rule: probe, Key: "p", Cost: 1}})
		if err == nil && res.Degraded == limiter.NotDegraded && !lim.Stats().BreakerOpen {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("store not back 10 s after SIGCONT: %+v", lim.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Every request has ended: the limit must admit again (within 2 s).
	var res limiter.Result
	for end := time.Now().Add(2 * time.Second); ; {
		if res, err = request(); err != nil {
			t.Fatal(err)
		}
		if res.Allowed || time.Now().After(end) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	held, _ := srv.Do("ZCARD", s.Key(conc, "upstream"))
	ttl, _ := srv.Do("PTTL", s.Key(conc, "upstream"))
	if !res.Allowed {
		t.Fatalf("with no request in flight, the concurrency limit of %d refuses (RetryAfter %v): "+
			"Redis holds %s leases of requests that ended while it was stopped (key PTTL %s ms)",
			max, res.RetryAfter, held, ttl)
	}
}

// TestClusterSubjectsWithoutAHashTag: on a Cluster, a subject that leaves
// the key's hash tag empty (an empty subject, or one that starts with '}')
// must still be decided by Redis: a sliding log's and a concurrency
// limit's two keys, and a reservation's settle record, must land in one
// slot.
func TestClusterSubjectsWithoutAHashTag(t *testing.T) {
	s := newCluster(t)
	log := ruletest.With(t, floodgate.Limit{Name: "tag_log", Algorithm: floodgate.SlidingLog, Max: 3, Window: time.Hour},
		limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	conc := ruletest.With(t, floodgate.Limit{Name: "tag_conc", Algorithm: floodgate.Concurrency, Max: 3},
		limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	for _, subject := range []string{"", "}", "}abc", "}{x}"} {
		for _, r := range []*limiter.Rule{log, conc} {
			hits := []limiter.Hit{{Rule: r, Key: subject, Cost: 1, Lease: 7}}
			out := make([]floodgate.Decision, 1)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := s.Decide(ctx, hits, false, out)
			cancel()
			if err != nil {
				t.Errorf("%s, subject %q (keys %q, %q: slots %d, %d): %v", r.Limit().Name, subject,
					s.Key(r, subject), s.Key(r, subject)+":h", slot(s.Key(r, subject)), slot(s.Key(r, subject)+":h"), err)
			}
		}
	}
	// The same subject from many callers at once: the requests that wait
	// for their lane are sent together by a goroutine of the store's own.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs int
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				hits := []limiter.Hit{{Rule: conc, Key: "}x", Cost: 1, Lease: uint64(w*100 + i + 1)}}
				out := make([]floodgate.Decision, 1)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := s.Decide(ctx, hits, false, out)
				cancel()
				if err == nil {
					err = s.Release(context.Background(), hits)
				}
				if err != nil {
					mu.Lock()
					errs++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if errs != 0 {
		t.Fatalf("%d of 320 concurrent decisions on subject \"}x\" failed", errs)
	}
}
