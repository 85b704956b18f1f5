package limiter_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// windowLeaser is a store of fixed windows that grants leases, as the
// Redis store does, on a clock the test moves: a lease's Mark is its
// window, and units given back count only within it. Its exact decisions
// (Decide) wait for gate, when set, and deny: a limit that holds a
// request back after its leased hit took its units.
type windowLeaser struct {
	clock   *atomic.Int64 // ns, the limiter's clock too
	window  int64
	max     int64
	gate    chan struct{}
	waiting atomic.Int32

	mu     sync.Mutex // guards counts
	counts map[string][2]int64
}

func (s *windowLeaser) Decide(ctx context.Context, hits []limiter.Hit, _ bool, out []floodgate.Decision) error {
	if s.gate != nil {
		s.waiting.Add(1)
		select {
		case <-s.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for i := range hits {
		out[i] = floodgate.Decision{Limit: hits[i].Rule.Capacity(), RetryAfter: time.Second}
	}
	return nil
}

// add charges n units of key in the current window, as another instance.
func (s *windowLeaser) add(key string, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	idx := s.clock.Load() / s.window
	c := s.counts[key]
	if c[0] != idx {
		c = [2]int64{idx, 0}
	}
	c[1] += n
	s.counts[key] = c
}

func (s *windowLeaser) Lease(_ context.Context, h *limiter.Hit, want int64, back limiter.Giveback) (limiter.Grant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Load()
	idx := now / s.window
	c := s.counts[h.Key]
	if c[0] != idx {
		c = [2]int64{idx, 0}
	}
	if back.Units > 0 && back.Mark == idx {
		c[1] = max(0, c[1]-back.Units)
	}
	var took int64
	switch {
	case want > 0 && c[1]+want <= s.max:
		took = want
	case h.Cost > 0 && c[1]+h.Cost <= s.max:
		took = h.Cost
	}
	c[1] += took
	s.counts[h.Key] = c
	d := floodgate.Decision{Allowed: took > 0, Limit: s.max, Remaining: s.max - c[1],
		ResetAfter: time.Duration((idx+1)*s.window - now)}
	if took == 0 {
		d.RetryAfter = d.ResetAfter
	}
	return limiter.Grant{Units: took, Mark: idx, Decision: d}, nil
}

// TestLeasedUnitsPutBackOnlyIntoTheirLease: a request whose leased hit
// took a unit from its lease and whose other limit then denied puts the
// unit back into the lease only while that lease holds: once another
// request has renewed the lease (here in the next window of a leased
// fixed window), the unit was counted in a window that has ended and
// cannot be spent in the new one, which would admit more than its limit.
func TestLeasedUnitsPutBackOnlyIntoTheirLease(t *testing.T) {
	t.Parallel()
	const ms = int64(time.Millisecond)
	var clock atomic.Int64
	clock.Store(950 * ms)
	store := &windowLeaser{clock: &clock, window: 1000 * ms, max: 100, counts: make(map[string][2]int64)}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := limiter.New(store, limiter.Options{
		Timeout:   -1, // the held request waits for the gate, however long
		Now:       func() time.Time { return base.Add(time.Duration(clock.Load())) },
		DenyCache: limiter.DenyCacheOptions{Entries: -1},
		Lease:     limiter.LeaseOptions{Lifetime: 100 * time.Millisecond, Share: 2},
	})
	leased := ruletest.With(t, floodgate.Limit{Name: "leased", Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Second},
		limiter.RuleOptions{OnFailure: floodgate.FailClosed, Consistency: floodgate.Leased})
	user := ruletest.With(t, floodgate.Limit{Name: "user", Algorithm: floodgate.FixedWindow, Max: 1, Window: time.Hour},
		limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	ctx := context.Background()
	decide := func(hits ...limiter.Hit) limiter.Result {
		t.Helper()
		var r limiter.Result
		if err := l.Decide(ctx, &limiter.Request{Hits: hits}, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	hit := limiter.Hit{Rule: leased, Key: "k", Cost: 1}
	// A first lease of one unit, then one of 50 in the last 50 ms of
	// window 0.
	for i := range 2 {
		if r := decide(hit); !r.Allowed {
			t.Fatalf("request %d: %+v", i+1, r)
		}
		clock.Add(ms)
	}
	// A request takes a unit from the lease; its per-user limit takes
	// its time to deny.
	store.gate = make(chan struct{})
	held := make(chan limiter.Result, 1)
	go func() {
		var r limiter.Result
		_ = l.Decide(ctx, &limiter.Request{Hits: []limiter.Hit{hit, {Rule: user, Key: "u", Cost: 1}}}, &r)
		held <- r
	}()
	deadline := time.Now().Add(10 * time.Second)
	for store.waiting.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the request never reached its exact limit")
		}
		time.Sleep(time.Millisecond)
	}
	// Window 1: other instances take 99 of its 100 units, this one the
	// last, renewing the lease.
	clock.Store(1001 * ms)
	store.add("k", 99)
	if r := decide(hit); !r.Allowed {
		t.Fatalf("the last unit of window 1: %+v", r)
	}
	close(store.gate)
	if r := <-held; r.Allowed {
		t.Fatalf("the request its user limit denies: %+v", r)
	}
	clock.Add(ms)
	admitted := 100
	for range 5 {
		if r := decide(hit); r.Allowed {
			admitted++
		}
	}
	if admitted > 100 {
		t.Fatalf("window 1 of a leased fixed window of 100 admitted %d", admitted)
	}
}
