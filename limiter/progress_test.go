package limiter_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/limiter"
)

// replyStore is a testStore that tells when replies last arrived (a
// limiter.ReplyClock): while progressing, one arrives at every look (a
// server that keeps answering other calls); otherwise none ever did.
type replyStore struct {
	*testStore
	progressing atomic.Bool
	unknown     atomic.Bool // the store cannot tell
	asked       atomic.Int64
}

func (s *replyStore) LastReply([]limiter.Hit) (time.Time, bool) {
	s.asked.Add(1)
	switch {
	case s.unknown.Load():
		return time.Time{}, false
	case s.progressing.Load():
		return time.Now(), true
	}
	return time.Time{}, true
}

// TestSlowStoreThatAnswersIsNotDegraded: calls that take three deadlines
// each, on a store whose replies keep arriving (a busy server, or this
// process waiting for CPU), are all answered by the store: none is decided
// by policy and the breaker stays closed.
func TestSlowStoreThatAnswersIsNotDegraded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := &replyStore{testStore: &testStore{inner: allowStore{}}}
		cs.progressing.Store(true)
		cs.hold.Store(int64(300 * time.Millisecond))
		l := limiter.New(cs, limiter.Options{Timeout: 100 * time.Millisecond, Breaker: limiter.BreakerOptions{Failures: 3}})
		hit := limiter.Hit{Rule: window(t, "w", 1000, floodgate.FailClosed), Key: "k", Cost: 1}
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(func() {
				for range 5 {
					start := time.Now()
					r := check(t, l, hit)
					if took := time.Since(start); !r.Allowed || r.Degraded != limiter.NotDegraded || took != 300*time.Millisecond {
						t.Errorf("%+v after %v; want allowed by the store after 300ms", r, took)
					}
				}
			})
		}
		wg.Wait()
		st := l.Stats()
		if st.BreakerOpens != 0 || st.Degraded != 0 || st.StoreFailures != 0 || st.SlowCalls != 50 || st.HardTimeouts != 0 {
			t.Fatalf("%+v; want 50 slow calls, nothing degraded, the breaker never open", st)
		}
		if cs.asked.Load() < 50 {
			t.Fatalf("the store's reply clock was read %d times, want at least once per call", cs.asked.Load())
		}
	})
}

// TestProgressStopsAtHardTimeout: a call that the store never answers while
// it answers others is decided by its policy at the hard timeout, and not
// held against the store.
func TestProgressStopsAtHardTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := &replyStore{testStore: &testStore{inner: allowStore{}}}
		cs.progressing.Store(true)
		cs.block.Store(true)
		l := limiter.New(cs, limiter.Options{Timeout: 100 * time.Millisecond, HardTimeout: time.Second,
			Breaker: limiter.BreakerOptions{Failures: 1}})
		hit := limiter.Hit{Rule: window(t, "w", 1000, floodgate.FailClosed), Key: "k", Cost: 1}
		for range 3 {
			start := time.Now()
			r := check(t, l, hit)
			if took := time.Since(start); r.Allowed || r.Degraded != limiter.DegradedDeadline || took != time.Second {
				t.Fatalf("%+v after %v; want denied by policy at the hard timeout, 1s", r, took)
			}
		}
		if st := l.Stats(); st.BreakerOpens != 0 || st.StoreFailures != 0 || st.HardTimeouts != 3 {
			t.Fatalf("%+v; want 3 hard timeouts, none held against the store", st)
		}
		// The caller's own end still ends the wait.
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(250*time.Millisecond, cancel)
		start := time.Now()
		if _, err := l.Check(ctx, []limiter.Hit{hit}); !errors.Is(err, context.Canceled) || time.Since(start) != 250*time.Millisecond {
			t.Fatalf("cancelled at 250ms: %v after %v; want context.Canceled at 250ms", err, time.Since(start))
		}
		ctx, cancel = context.WithTimeout(context.Background(), 400*time.Millisecond)
		defer cancel()
		start = time.Now()
		if _, err := l.Check(ctx, []limiter.Hit{hit}); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 400*time.Millisecond {
			t.Fatalf("caller's deadline 400ms: %v after %v; want its deadline", err, time.Since(start))
		}
	})
}

// TestNoProgressFailsAtDeadline: a store that answers nothing (stopped,
// unreachable) fails every call at its deadline, including the calls that
// waited for an in-flight slot behind calls it did not answer, and those
// count against it: the breaker opens.
func TestNoProgressFailsAtDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := &replyStore{testStore: &testStore{inner: allowStore{}}}
		cs.block.Store(true)
		l := limiter.New(cs, limiter.Options{Timeout: 100 * time.Millisecond, MaxInFlight: 4})
		hit := limiter.Hit{Rule: window(t, "w", 1000, floodgate.FailClosed), Key: "k", Cost: 1}
		var wg sync.WaitGroup
		for range 30 {
			wg.Go(func() {
				for {
					start := time.Now()
					r := check(t, l, hit)
					took := time.Since(start)
					if r.Allowed || r.Degraded == limiter.NotDegraded || took > 100*time.Millisecond {
						t.Errorf("%+v after %v; want denied by policy by the 100ms deadline", r, took)
						return
					}
					if r.Degraded == limiter.DegradedBreakerOpen {
						return
					}
				}
			})
		}
		wg.Wait()
		st := l.Stats()
		if !st.BreakerOpen || st.StoreFailures < 20 || st.QueueTimeouts != 0 || st.SlowCalls != 0 || st.SlotWaits == 0 {
			t.Fatalf("%+v; want the breaker open, every timeout held against the store, slots waited for", st)
		}
	})
}

// TestUnknownProgressKeepsTheDeadline: a store whose reply clock cannot
// tell is judged as a store without one, by the deadline alone.
func TestUnknownProgressKeepsTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := &replyStore{testStore: &testStore{inner: allowStore{}}}
		cs.unknown.Store(true)
		cs.hold.Store(int64(300 * time.Millisecond))
		l := limiter.New(cs, limiter.Options{Timeout: 100 * time.Millisecond})
		start := time.Now()
		r := check(t, l, limiter.Hit{Rule: window(t, "w", 1000, floodgate.FailClosed), Key: "k", Cost: 1})
		if took := time.Since(start); r.Degraded != limiter.DegradedDeadline || took != 100*time.Millisecond {
			t.Fatalf("%+v after %v; want decided by policy at the deadline", r, took)
		}
	})
}
