package algo

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate"
)

// TestRefundAt gives back part of a charge in the window or period that
// took it, for every counting algorithm: what comes back is exactly the
// refund, and a window that has passed is left alone.
func TestRefundAt(t *testing.T) {
	t.Parallel()
	sec := int64(time.Second)
	limits := []floodgate.Limit{
		{Algorithm: floodgate.TokenBucket, Rate: 1, Per: time.Hour, Burst: 10},
		{Algorithm: floodgate.GCRA, Rate: 1, Per: time.Hour, Burst: 10},
		{Algorithm: floodgate.FixedWindow, Max: 10, Window: time.Hour},
		{Algorithm: floodgate.SlidingWindow, Max: 10, Window: time.Hour},
		{Algorithm: floodgate.SlidingLog, Max: 10, Window: time.Hour},
		{Algorithm: floodgate.Quota, Max: 10, Period: floodgate.Day},
	}
	for _, l := range limits {
		p, err := Compile(&l)
		if err != nil {
			t.Fatal(err)
		}
		var s State
		at := 10 * sec
		if d, _ := p.Decide(&s, Request{Now: at, Cost: 3}); !d.Allowed {
			t.Fatalf("%s: charge denied", l.Algorithm)
		}
		if d, _ := p.Decide(&s, Request{Now: at + sec, Cost: 7}); !d.Allowed {
			t.Fatalf("%s: second charge denied", l.Algorithm)
		}
		if err := p.RefundAt(&s, at+2*sec, at, 2); err != nil {
			t.Fatal(err)
		}
		d, _ := p.Decide(&s, Request{Now: at + 2*sec, Cost: 1, Peek: true})
		if !d.Allowed || d.Remaining != 1 {
			t.Errorf("%s: after giving back 2 of 3: %+v, want 2 free", l.Algorithm, d)
		}
		if d, _ := p.Decide(&s, Request{Now: at + 2*sec, Cost: 3, Peek: true}); d.Allowed {
			t.Errorf("%s: more than the refund came back", l.Algorithm)
		}
		if err := p.RefundAt(&s, at+2*sec, at, 0); err != floodgate.ErrInvalidCost {
			t.Errorf("%s: cost 0: %v", l.Algorithm, err)
		}
	}
}

// TestRefundAtPassedWindow leaves a charge alone once its window is gone:
// the new window's count is not lowered by an old charge.
func TestRefundAtPassedWindow(t *testing.T) {
	t.Parallel()
	for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow, floodgate.SlidingLog} {
		p, err := Compile(&floodgate.Limit{Algorithm: alg, Max: 10, Window: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		var s State
		old := int64(10 * time.Second)
		if d, _ := p.Decide(&s, Request{Now: old, Cost: 4}); !d.Allowed {
			t.Fatal("denied")
		}
		later := old + int64(3*time.Minute)
		if d, _ := p.Decide(&s, Request{Now: later, Cost: 6}); !d.Allowed {
			t.Fatal("denied")
		}
		if err := p.RefundAt(&s, later, old, 4); err != nil {
			t.Fatal(err)
		}
		if d, _ := p.Decide(&s, Request{Now: later, Cost: 1, Peek: true}); d.Remaining != 3 {
			t.Errorf("%s: %+v, want the current window's 4 free (3 after a peek of 1)", alg, d)
		}
	}
}

// TestChargeUpTo charges what fits and no more: never below zero credit.
func TestChargeUpTo(t *testing.T) {
	t.Parallel()
	limits := []floodgate.Limit{
		{Algorithm: floodgate.TokenBucket, Rate: 1, Per: time.Hour, Burst: 10},
		{Algorithm: floodgate.LeakyQueue, Rate: 1, Per: time.Hour, Burst: 10},
		{Algorithm: floodgate.FixedWindow, Max: 10, Window: time.Hour},
		{Algorithm: floodgate.SlidingWindow, Max: 10, Window: time.Hour},
		{Algorithm: floodgate.SlidingLog, Max: 10, Window: time.Hour},
		{Algorithm: floodgate.Quota, Max: 10, Period: floodgate.Day},
	}
	now := int64(time.Hour) / 2
	for _, l := range limits {
		p, err := Compile(&l)
		if err != nil {
			t.Fatal(err)
		}
		var s State
		if n, err := p.ChargeUpTo(&s, now, 4); err != nil || n != 4 {
			t.Fatalf("%s: %d, %v; want 4 charged", l.Algorithm, n, err)
		}
		if n, err := p.ChargeUpTo(&s, now, 100); err != nil || n != p.Capacity()-4 {
			t.Fatalf("%s: %d, %v; want the %d left charged", l.Algorithm, n, err, p.Capacity()-4)
		}
		if n, err := p.ChargeUpTo(&s, now, 1); err != nil || n != 0 {
			t.Fatalf("%s: %d, %v; want nothing charged", l.Algorithm, n, err)
		}
		if d, _ := p.Decide(&s, Request{Now: now, Cost: 1, Peek: true}); d.Allowed {
			t.Errorf("%s: %+v after the limit ran out", l.Algorithm, d)
		}
	}
	p, _ := Compile(&floodgate.Limit{Algorithm: floodgate.Concurrency, Max: 2})
	var s State
	if n, err := p.ChargeUpTo(&s, now, 1); n != 0 || err != nil {
		t.Errorf("concurrency: %d, %v", n, err)
	}
}
