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
	"github.com/floodgate/floodgate/internal/racecheck"
	"github.com/floodgate/floodgate/limiter"
)

// partStore allows every hit, on servers named by the first letter of the
// hits' keys (limiter.Partitioner); a call that touches a server named in
// down fails, with a limiter.PartitionError naming it when named is set.
type partStore struct {
	named bool
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
	failed := ""
	for i := range hits {
		part := hits[i].Key[:1]
		s.calls[part]++
		if s.down[part] && failed == "" {
			failed = part
		}
	}
	s.mu.Unlock()
	switch {
	case failed != "" && s.named:
		return &limiter.PartitionError{Partition: failed, Err: errDown}
	case failed != "":
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
// through the breakers of each: the failing server's refuses them, the
// others let them through.
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
		// A call that spans both servers meets the failing one's breaker,
		// open: it is refused. One that spans two healthy servers goes on.
		before := ps.callsTo("a")
		if r := check(t, l, onA, onB); r.Degraded != limiter.DegradedBreakerOpen {
			t.Fatalf("a call on both servers: %+v, want refused by the failing one's breaker", r)
		}
		if ps.callsTo("a") != before {
			t.Fatal("a call on both servers reached the store")
		}
		if r := check(t, l, onB, limiter.Hit{Rule: w, Key: "c1", Cost: 1}); r.Degraded != limiter.NotDegraded {
			t.Fatalf("a call on two healthy servers: %+v, want the store's decision", r)
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

// TestBreakerPerPartitionSpanning: a call that spans servers counts on
// the breakers of each. With one server failing, the failed calls that
// also touch a healthy one count against the failing one alone when the
// store's error names it (limiter.PartitionError): the calls on the
// healthy servers all go on, and the failing one's breaker opens and then
// refuses every call that touches it, until its probe closes it. When
// the error does not name it, they count against every server they
// touched.
func TestBreakerPerPartitionSpanning(t *testing.T) {
	for _, c := range []struct {
		name  string
		named bool
	}{{"named", true}, {"unnamed", false}} {
		named := c.named
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ps := newPartStore()
				ps.named = named
				l := limiter.New(ps, limiter.Options{Timeout: 100 * time.Millisecond,
					Breaker: limiter.BreakerOptions{Failures: 3, ProbeInterval: 50 * time.Millisecond},
					Logger:  slog.New(slog.DiscardHandler)})
				w := window(t, "w", 1<<40, floodgate.FailClosed)
				hit := func(k string) limiter.Hit { return limiter.Hit{Rule: w, Key: k, Cost: 1} }
				onAB, onBC := []limiter.Hit{hit("a1"), hit("b1")}, []limiter.Hit{hit("b2"), hit("c1")}
				ps.set("a", true)
				// Two calls on a and b for one on b and c, over a few
				// deadlines.
				refusedBC, refusedAB := 0, 0
				for i := range 150 {
					hits := onAB
					if i%3 == 2 {
						hits = onBC
					}
					r := check(t, l, hits...)
					switch {
					case hits[0].Key == "a1" && r.Degraded == limiter.DegradedBreakerOpen:
						refusedAB++
					case hits[0].Key == "a1" && r.Degraded != limiter.DegradedStoreError:
						t.Fatalf("call %d on the failing server: %+v, want failed or refused", i, r)
					case hits[0].Key == "b2" && r.Degraded == limiter.DegradedBreakerOpen:
						refusedBC++
					case hits[0].Key == "b2" && r.Degraded != limiter.NotDegraded:
						t.Fatalf("call %d on healthy servers: %+v", i, r)
					}
					time.Sleep(5 * time.Millisecond)
				}
				if refusedAB == 0 {
					t.Fatal("no call on the failing server was refused by an open breaker")
				}
				if named && refusedBC != 0 {
					t.Fatalf("%d calls on healthy servers refused by an open breaker, want none", refusedBC)
				}
				if !named && refusedBC == 0 {
					t.Fatal("failures that name no server counted against the failing one alone")
				}
				// The server is back: the next probe closes its breaker (and,
				// unnamed, that of b).
				ps.set("a", false)
				time.Sleep(50 * time.Millisecond)
				check(t, l, onAB...)
				time.Sleep(50 * time.Millisecond)
				if r := check(t, l, onAB...); r.Degraded != limiter.NotDegraded {
					t.Fatalf("after the server came back: %+v", r)
				}
				if st := l.Stats(); st.BreakerOpen {
					t.Fatalf("%+v, want every breaker closed", st)
				}
			})
		})
	}
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

// TestBreakerPerPartitionAllocs: choosing the breakers of the servers a
// call touches allocates nothing once they are made.
func TestBreakerPerPartitionAllocs(t *testing.T) {
	if racecheck.Enabled {
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
	// A call that spans servers goes through the breaker of each.
	req.Hits[1].Key = "b1"
	decide()
	if n := testing.AllocsPerRun(1000, decide); n != 0 {
		t.Fatalf("%v allocations per decision on two servers, want 0", n)
	}
}
