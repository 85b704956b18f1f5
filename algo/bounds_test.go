package algo

import (
	"math"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
)

// earliestPass checks that a denial's RetryAfter is the earliest wait after
// which the same cost passes with no other traffic: a peek at now+RetryAfter
// allows, a peek one nanosecond earlier does not.
func earliestPass(t *testing.T, p *Params, s State, now, cost int64, d floodgate.Decision) {
	t.Helper()
	if d.Allowed {
		t.Fatalf("request of %d at %d was allowed, want a denial", cost, now)
	}
	if d.RetryAfter <= 0 {
		t.Fatalf("denial with RetryAfter %v, want > 0", d.RetryAfter)
	}
	at := now + int64(d.RetryAfter)
	if at < now {
		t.Fatalf("RetryAfter %v wraps around", d.RetryAfter)
	}
	got, err := p.Decide(&s, Request{Now: at, Cost: cost, Peek: true})
	if err != nil || !got.Allowed {
		t.Errorf("cost %d at now+RetryAfter (%v): allowed=%v err=%v, want allowed", cost, d.RetryAfter, got.Allowed, err)
	}
	got, err = p.Decide(&s, Request{Now: at - 1, Cost: cost, Peek: true})
	if err != nil || got.Allowed {
		t.Errorf("cost %d at now+RetryAfter-1ns (%v): allowed=%v err=%v, want denied (RetryAfter is not the earliest)", cost, d.RetryAfter, got.Allowed, err)
	}
}

// TestSlidingCounterRetryNearInt64Max: with a limit near the int64 bound,
// a current count plus the cost that overflows int64 must still take the
// "wait for the next window" branch: the same cost passes one nanosecond
// into the next window, not after 292 years.
func TestSlidingCounterRetryNearInt64Max(t *testing.T) {
	t.Parallel()
	p := mustCompile(t, floodgate.Limit{Algorithm: floodgate.SlidingWindow, Max: math.MaxInt64, Window: time.Second})
	var s State
	now := time.Date(2026, 3, 1, 12, 0, 0, 500_000_000, time.UTC).UnixNano()
	if d, err := p.Decide(&s, Request{Now: now, Cost: math.MaxInt64 - 1}); err != nil || !d.Allowed {
		t.Fatalf("first request: %+v, %v", d, err)
	}
	d, err := p.Decide(&s, Request{Now: now, Cost: 10})
	if err != nil {
		t.Fatal(err)
	}
	if d.RetryAfter > 2*time.Second {
		t.Errorf("RetryAfter = %v, want about 500ms (the next window)", d.RetryAfter)
	}
	earliestPass(t, &p, s, now, 10, d)
}
