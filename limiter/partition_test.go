package limiter_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/limiter"
)

// partStore allows every hit, on servers named by the first letter of the
// hits' keys (limiter.Partitioner); the servers named in down fail every
// call.
type partStore struct {
	mu    sync.Mutex // guards down and calls
	down  map[string]bool
	calls map[string]int
}

func newPartStore() *partStore {
	return &partStore{down: map[string]bool{}, calls: map[string]int{}}
}

// Partition is the first letter of the keys, when they all start with it.
func (s *partStore) Partition(hits []limiter.Hit) (string, bool) {
	if len(hits) == 0 || hits[0].Key == "" {
		return "", false
	}
	part := hits[0].Key[:1]
	for i := range hits {
		if !strings.HasPrefix(hits[i].Key, part) {
			return "", false
		}
	}
	return part, true
}

func (s *partStore) Decide(_ context.Context, hits []limiter.Hit, _ bool, out []floodgate.Decision) error {
	s.mu.Lock()
	failed := false
	for i := range hits {
		part := hits[i].Key[:1]
		s.calls[part]++
		failed = failed || s.down[part]
	}
	s.mu.Unlock()
	if failed {
		return errDown
	}
	return allowStore{}.Decide(context.Background(), hits, false, out)
}

func (s *partStore) set(part string, down bool) {
	s.mu.Lock()
	s.down[part] = down
	s.mu.Unlock()
}

func (s *partStore) callsTo(part string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[part]
}

// TestBreakerPerPartition: on a store whose hits are served by several
// servers (Partitioner), a server that fails opens its own breaker: the
// calls to the others go on, however many calls the failing one gets,
// and its probes close only its own breaker. Calls that span servers go
// through the shared breaker, which the failing server's own calls leave
// closed.
func TestBreakerPerPartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps := newPartStore()
		var logs bytes.Buffer
		l := limiter.New(ps, limiter.Options{Timeout: 100 * time.Millisecond,
			Breaker: limiter.BreakerOptions{Failures: 3, ProbeInterval: 50 * time.Millisecond},
			Logger:  slog.New(slog.NewTextHandler(&logs, nil))})
		w := window(t, "w", 1<<40, floodgate.FailClosed)
		onA, onB := limiter.Hit{Rule: w, Key: "a1", Cost: 1}, limiter.Hit{Rule: w, Key: "b1", Cost: 1}
		ps.set("a", true)
		// Four calls to a for one to b, over a few deadlines.
		for i := range 200 {
			hit := onA
			if i%5 == 4 {
				hit = onB
			}
			r := check(t, l, hit)
			if hit.Key == onB.Key && (r.Degraded != limiter.NotDegraded || !r.Allowed) {
				t.Fatalf("call %d on the healthy server: %+v, want the store's decision", i, r)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if st := l.Stats(); !st.BreakerOpen || st.BreakerOpens != 1 {
			t.Fatalf("%+v, want one breaker open, opened once", st)
		}
		check(t, l, onA) // a probe, maybe
		if r := check(t, l, onA); r.Degraded != limiter.DegradedBreakerOpen {
			t.Fatalf("failing server: %+v, want refused by its breaker", r)
		}
		if !strings.Contains(logs.String(), "partition=a") {
			t.Fatalf("log %q does not name the failing server", logs.String())
		}
		// A call that spans both servers goes through the shared breaker,
		// closed: it reaches the store.
		before := ps.callsTo("a")
		if r := check(t, l, onA, onB); r.Degraded != limiter.DegradedStoreError {
			t.Fatalf("a call on both servers: %+v, want sent and failed", r)
		}
		if ps.callsTo("a") != before+1 {
			t.Fatal("a call on both servers did not reach the store")
		}
		// The server is back: its next probe closes its breaker.
		ps.set("a", false)
		time.Sleep(50 * time.Millisecond)
		if r := check(t, l, onA); r.Degraded != limiter.NotDegraded {
			t.Fatalf("probe after the server came back: %+v", r)
		}
		if st := l.Stats(); st.BreakerOpen || st.BreakerOpens != 1 {
			t.Fatalf("%+v, want every breaker closed", st)
		}
		if !strings.Contains(logs.String(), `msg="limiter: store answers again, circuit breaker closed" partition=a`) {
			t.Fatalf("log %q does not name the server whose breaker closed", logs.String())
		}
	})
}

// TestBreakerPerPartitionOff: with the breaker off, no server's breaker
// opens either.
func TestBreakerPerPartitionOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps := newPartStore()
		l := limiter.New(ps, limiter.Options{Timeout: 100 * time.Millisecond, Breaker: limiter.BreakerOptions{Failures: -1}})
		hit := limiter.Hit{Rule: window(t, "w", 1<<40, floodgate.FailOpen), Key: "a1", Cost: 1}
		ps.set("a", true)
		for range 100 {
			if r := check(t, l, hit); r.Degraded != limiter.DegradedStoreError {
				t.Fatalf("%+v, want every call sent", r)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if st := l.Stats(); st.BreakerOpen || st.BreakerOpens != 0 {
			t.Fatalf("%+v, want no breaker open", st)
		}
	})
}

// TestBreakerPerPartitionAllocs: choosing a server's breaker allocates
// nothing once it is made.
func TestBreakerPerPartitionAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops items at random; scripts/test.sh runs this without it")
	}
	ps := newPartStore()
	l := limiter.New(ps, limiter.Options{})
	w := window(t, "w", 1<<40, floodgate.FailOpen)
	req := limiter.Request{Hits: []limiter.Hit{{Rule: w, Key: "a1", Cost: 1}, {Rule: w, Key: "a2", Cost: 1}}}
	var r limiter.Result
	ctx := context.Background()
	decide := func() {
		if err := l.Decide(ctx, &req, &r); err != nil || !r.Allowed {
			t.Fatalf("%+v, %v", r, err)
		}
	}
	decide()
	if n := testing.AllocsPerRun(1000, decide); n != 0 {
		t.Fatalf("%v allocations per decision, want 0", n)
	}
}
