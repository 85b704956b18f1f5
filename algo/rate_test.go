package algo

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
)

func TestSteadyOverloadNoDrift(t *testing.T) {
	t.Parallel()
	// Rate 3/s: T = 333,333,333⅓ ns is not a whole number of nanoseconds.
	// Ten arrivals a second for 10,000 s must let exactly burst + 30,000 in.
	for _, alg := range []floodgate.Algorithm{floodgate.TokenBucket, floodgate.GCRA, floodgate.LeakyBucket} {
		p := mustCompile(t, floodgate.Limit{Algorithm: alg, Rate: 3, Per: time.Second, Burst: 7})
		var s State
		allowed := 0
		for i := int64(0); i <= 100_000; i++ {
			d, err := p.Decide(&s, Request{Now: i * int64(100*time.Millisecond), Cost: 1})
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				allowed++
			}
		}
		if want := 7 + 30_000; allowed != want {
			t.Errorf("%s: %d allowed over 10,000 s, want %d", alg, allowed, want)
		}
	}
}

func TestTokenBucketNumbers(t *testing.T) {
	t.Parallel()
	// 5 per second, burst 10: T = 200 ms.
	p := mustCompile(t, bucket(5, 10))
	var s State
	d, _ := p.Decide(&s, Request{Now: 0, Cost: 10})
	if !d.Allowed || d.Remaining != 0 || d.ResetAfter != 2*time.Second || d.RetryAfter != 0 || d.Limit != 10 {
		t.Errorf("first burst: %+v", d)
	}
	d, _ = p.Decide(&s, Request{Now: sec(0.1), Cost: 3})
	// 0.5 tokens now; 3 tokens at t=0.6 s.
	if d.Allowed || d.Remaining != 0 || d.RetryAfter != 500*time.Millisecond || d.ResetAfter != 1900*time.Millisecond {
		t.Errorf("denial: %+v", d)
	}
	d, _ = p.Decide(&s, Request{Now: sec(0.6), Cost: 3})
	if !d.Allowed || d.Remaining != 0 || d.ResetAfter != 2*time.Second {
		t.Errorf("retry at RetryAfter: %+v", d)
	}
	// Cost above the burst: never, with the decision filled in.
	d, err := p.Decide(&s, Request{Now: sec(10), Cost: 11})
	if !errors.Is(err, floodgate.ErrNeverFits) || d.Allowed || d.RetryAfter != 0 || d.Remaining != 10 || d.Limit != 10 {
		t.Errorf("never fits: %+v, %v", d, err)
	}
}

func TestExactFractionalInterval(t *testing.T) {
	t.Parallel()
	// 3 per second, burst 3: T = 333,333,333⅓ ns. Three requests at t=0 put
	// the TAT at exactly one second: the thirds add up, nothing is lost.
	p := mustCompile(t, bucket(3, 3))
	var s State
	for i := range 3 {
		if d, _ := p.Decide(&s, Request{Now: 0, Cost: 1}); !d.Allowed || d.Remaining != int64(2-i) {
			t.Fatalf("request %d: %+v", i+1, d)
		}
		if want := int64(i+1) * 333_333_333; s.A != want+int64(i+1)/3 || s.B != int64(i+1)%3 {
			t.Fatalf("after %d: TAT %d + %d/3 ns", i+1, s.A, s.B)
		}
	}
	if s.A != 1_000_000_000 || s.B != 0 {
		t.Fatalf("TAT = %d + %d/3 ns, want exactly 1 s", s.A, s.B)
	}
	// One token is back after T: at 333,333,333 ns a third of a
	// nanosecond is missing, which rounds up to a RetryAfter of 1 ns.
	d, _ := p.Decide(&s, Request{Now: 333_333_333, Cost: 1})
	if d.Allowed || d.RetryAfter != 1 || d.ResetAfter != 666_666_667*time.Nanosecond {
		t.Errorf("at 333,333,333 ns: %+v, want denied with RetryAfter 1ns", d)
	}
	if d, _ = p.Decide(&s, Request{Now: 333_333_334, Cost: 1}); !d.Allowed {
		t.Errorf("at 333,333,334 ns: denied")
	}
	if s.A != 1_333_333_333 || s.B != 1 {
		t.Errorf("TAT = %d + %d/3 ns, want 1,333,333,333 + 1/3", s.A, s.B)
	}
}

func TestLeakyQueueNginx(t *testing.T) {
	t.Parallel()
	q := func(burst, delay int64) Params {
		return mustCompile(t, floodgate.Limit{Algorithm: floodgate.LeakyQueue, Rate: 1, Per: time.Second, Burst: burst, Delay: delay})
	}
	type out struct {
		allowed bool
		delay   time.Duration
	}
	run := func(p Params, n int) []out {
		var s State
		var res []out
		for range n {
			d, err := p.Decide(&s, Request{Now: sec(100), Cost: 1})
			if err != nil {
				t.Fatal(err)
			}
			res = append(res, out{d.Allowed, d.Delay})
		}
		return res
	}
	// 1r/s burst=5: 6 simultaneous → 1 now, 5 delayed 1…5 s, 7th rejected.
	got := run(q(5, 0), 8)
	for i, o := range got {
		want := out{i < 6, 0}
		if i < 6 {
			want.delay = time.Duration(i) * time.Second
		}
		if o != want {
			t.Errorf("burst=5 request %d: %+v, want %+v", i+1, o, want)
		}
	}
	// burst=5 nodelay → 6 now, 7th rejected.
	for i, o := range run(q(5, floodgate.NoDelay), 8) {
		if want := (out{i < 6, 0}); o != want {
			t.Errorf("burst=5 nodelay request %d: %+v, want %+v", i+1, o, want)
		}
	}
	// burst=12 delay=8 → 9 now, 4 delayed, rest rejected.
	now, delayed, rejected := 0, 0, 0
	for i, o := range run(q(12, 8), 20) {
		switch {
		case !o.allowed:
			rejected++
		case o.delay == 0:
			now++
		default:
			delayed++
			if want := time.Duration(i-8) * time.Second; o.delay != want {
				t.Errorf("burst=12 delay=8 request %d: delay %v, want %v", i+1, o.delay, want)
			}
		}
	}
	if now != 9 || delayed != 4 || rejected != 7 {
		t.Errorf("burst=12 delay=8: %d now, %d delayed, %d rejected; want 9, 4, 7", now, delayed, rejected)
	}
	// After the queue drains by one slot, one more is admitted, delayed 5 s.
	p := q(5, 0)
	var s State
	for range 7 {
		p.Decide(&s, Request{Now: 0, Cost: 1})
	}
	d, _ := p.Decide(&s, Request{Now: sec(1), Cost: 1})
	if !d.Allowed || d.Delay != 5*time.Second || d.Remaining != 0 || d.ResetAfter != 6*time.Second {
		t.Errorf("one second later: %+v", d)
	}
	d, _ = p.Decide(&s, Request{Now: sec(1), Cost: 1})
	if d.Allowed || d.RetryAfter != time.Second {
		t.Errorf("queue full again: %+v, want RetryAfter 1s", d)
	}
	// Capacity is the queue plus the one in service.
	if _, err := p.Decide(&s, Request{Now: sec(50), Cost: 7}); !errors.Is(err, floodgate.ErrNeverFits) {
		t.Errorf("cost 7 on burst 5: %v, want ErrNeverFits", err)
	}
	if d, err := p.Decide(&s, Request{Now: sec(50), Cost: 6}); err != nil || !d.Allowed || d.Delay != 0 {
		t.Errorf("cost 6 on an idle queue: %+v, %v", d, err)
	}
}

func TestGCRAMatchesTokenBucket(t *testing.T) {
	t.Parallel()
	tb := mustCompile(t, bucket(7, 4))
	gl := floodgate.Limit{Algorithm: floodgate.GCRA, Rate: 7, Per: time.Second, Burst: 4}
	g := mustCompile(t, gl)
	ml := gl
	ml.Algorithm = floodgate.LeakyBucket
	m := mustCompile(t, ml)
	var s1, s2, s3 State
	now := int64(0)
	for i := range 5000 {
		now += int64(i*7919) % int64(300*time.Millisecond)
		cost := int64(1 + i%4)
		d1, _ := tb.Decide(&s1, Request{Now: now, Cost: cost})
		d2, _ := g.Decide(&s2, Request{Now: now, Cost: cost})
		d3, _ := m.Decide(&s3, Request{Now: now, Cost: cost})
		if d1 != d2 || d1 != d3 {
			t.Fatalf("step %d: token bucket %+v, gcra %+v, leaky bucket %+v", i, d1, d2, d3)
		}
	}
}

func TestRateHugeValuesNoOverflow(t *testing.T) {
	t.Parallel()
	// A huge window: 1 per 30 years with a burst of 1; and a huge rate.
	l := floodgate.Limit{Algorithm: floodgate.TokenBucket, Rate: 1, Per: 30 * 365 * 24 * time.Hour, Burst: 1}
	p := mustCompile(t, l)
	var s State
	now := int64(1_800_000_000) * int64(time.Second)
	if d, err := p.Decide(&s, Request{Now: now, Cost: 1}); err != nil || !d.Allowed {
		t.Fatalf("first: %+v %v", d, err)
	}
	d, err := p.Decide(&s, Request{Now: now + 1, Cost: 1})
	if err != nil || d.Allowed || d.RetryAfter != l.Per-1 {
		t.Errorf("second: %+v %v", d, err)
	}
	// Huge rate and burst, costs up to the burst.
	p = mustCompile(t, floodgate.Limit{Algorithm: floodgate.TokenBucket, Rate: 900_000_000, Per: time.Second, Burst: math.MaxInt64 / 1000})
	s = State{}
	if d, err := p.Decide(&s, Request{Now: now, Cost: math.MaxInt64 / 1000}); err != nil || !d.Allowed {
		t.Errorf("huge cost: %+v %v", d, err)
	}
	// An instant so late that TAT arithmetic would wrap is an error.
	if _, err := p.Decide(&State{}, Request{Now: math.MaxInt64 - 5, Cost: 1}); !errors.Is(err, ErrOverflow) {
		t.Errorf("late instant: %v, want ErrOverflow", err)
	}
	// Compile refuses limits whose whole bucket does not fit.
	bad := floodgate.Limit{Algorithm: floodgate.TokenBucket, Rate: 1, Per: time.Duration(math.MaxInt64 / 2), Burst: 10}
	if _, err := Compile(&bad); !errors.Is(err, floodgate.ErrInvalidLimit) {
		t.Errorf("overflowing limit compiled: %v", err)
	}
}

func TestRateCorruptStateClamped(t *testing.T) {
	t.Parallel()
	// A TAT far ahead (a clock that jumped back in a store) counts as an
	// empty bucket, not as a wait of years.
	p := mustCompile(t, bucket(1, 2))
	s := State{A: sec(1e6), B: 5}
	d, err := p.Decide(&s, Request{Now: sec(10), Cost: 1})
	if err != nil || d.Allowed || d.RetryAfter != time.Second || d.ResetAfter != 2*time.Second {
		t.Errorf("%+v %v", d, err)
	}
}
