package algo

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate"
)

// sec converts seconds to Unix ns for the seeds' timelines.
func sec(s float64) int64 { return int64(s * 1e9) }

func mustCompile(t testing.TB, l floodgate.Limit) Params {
	t.Helper()
	p, err := Compile(&l)
	if err != nil {
		t.Fatalf("Compile(%+v): %v", l, err)
	}
	return p
}

func bucket(rate, burst int64) floodgate.Limit {
	return floodgate.Limit{Algorithm: floodgate.TokenBucket, Rate: rate, Per: time.Second, Burst: burst}
}

// countAllowed replays unit-cost arrivals (Unix ns) and counts the allowed.
func countAllowed(t testing.TB, p Params, at []int64) int {
	t.Helper()
	var s State
	n := 0
	for _, now := range at {
		d, err := p.Decide(&s, Request{Now: now, Cost: 1})
		if err != nil {
			t.Fatalf("Decide(now=%d): %v", now, err)
		}
		if d.Allowed {
			n++
		}
	}
	return n
}

// lesson12Burst is seed 000's pattern: 12 requests at t=0 and 5 at t=0.5 s.
func lesson12Burst() []int64 {
	var at []int64
	for range 12 {
		at = append(at, 0)
	}
	for range 5 {
		at = append(at, sec(0.5))
	}
	return at
}

func TestSeedLesson12Burst(t *testing.T) {
	t.Parallel()
	at := lesson12Burst()
	if got := countAllowed(t, mustCompile(t, bucket(5, 10)), at); got != 12 {
		t.Errorf("token bucket 5/s burst 10: %d of 17, want 12", got)
	}
	sw := floodgate.Limit{Algorithm: floodgate.SlidingLog, Max: 10, Window: time.Second}
	if got := countAllowed(t, mustCompile(t, sw), at); got != 10 {
		t.Errorf("sliding window 10 per 1 s: %d of 17, want 10", got)
	}
}

func TestSeedLesson12RateBurstTable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		rate, burst int64
		want        int
	}{{5, 10, 12}, {5, 20, 17}, {10, 10, 15}, {1, 5, 5}} {
		if got := countAllowed(t, mustCompile(t, bucket(c.rate, c.burst)), lesson12Burst()); got != c.want {
			t.Errorf("token bucket rate %d/s burst %d: %d of 17, want %d", c.rate, c.burst, got, c.want)
		}
	}
}

func TestSeedLesson12Steady(t *testing.T) {
	t.Parallel()
	var at []int64
	for i := range 30 {
		at = append(at, int64(i)*int64(100*time.Millisecond))
	}
	if got := countAllowed(t, mustCompile(t, bucket(5, 10)), at); got != 24 {
		t.Errorf("token bucket: %d of 30, want 24", got)
	}
	sw := floodgate.Limit{Algorithm: floodgate.SlidingLog, Max: 10, Window: time.Second}
	if got := countAllowed(t, mustCompile(t, sw), at); got != 30 {
		t.Errorf("sliding window: %d of 30, want 30", got)
	}
}

func TestSeedLesson12Edge(t *testing.T) {
	t.Parallel()
	var at []int64
	for range 10 {
		at = append(at, sec(0.9))
	}
	for range 10 {
		at = append(at, sec(1.1))
	}
	fw := floodgate.Limit{Algorithm: floodgate.FixedWindow, Max: 10, Window: time.Second}
	if got := countAllowed(t, mustCompile(t, fw), at); got != 20 {
		t.Errorf("fixed window: %d in 0.2 s, want 20", got)
	}
	sw := floodgate.Limit{Algorithm: floodgate.SlidingLog, Max: 10, Window: time.Second}
	if got := countAllowed(t, mustCompile(t, sw), at); got != 10 {
		t.Errorf("sliding window: %d in 0.2 s, want 10", got)
	}
}

func TestSeedLesson07(t *testing.T) {
	t.Parallel()
	p := mustCompile(t, bucket(5, 5))
	var s State
	take := func(now int64) floodgate.Decision {
		d, err := p.Decide(&s, Request{Now: now, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	var got []bool
	for range 6 {
		got = append(got, take(0).Allowed)
	}
	if want := []bool{true, true, true, true, true, false}; !equalBools(got, want) {
		t.Errorf("t=0.0: %v, want %v", got, want)
	}
	got = got[:0]
	for range 2 {
		got = append(got, take(sec(0.2)).Allowed)
	}
	if want := []bool{true, false}; !equalBools(got, want) {
		t.Errorf("t=0.2: %v, want %v", got, want)
	}
	d := take(sec(10))
	if !d.Allowed || d.Remaining != 4 {
		t.Errorf("t=10: allowed %v, %d tokens left; want true, 4", d.Allowed, d.Remaining)
	}
}

func equalBools(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSeed002TokenBucket(t *testing.T) {
	t.Parallel()
	p := mustCompile(t, floodgate.Limit{Algorithm: floodgate.TokenBucket, Rate: 2, Per: time.Second, Burst: 10})
	var s State
	steps := []struct {
		at, cost  int64
		allowed   bool
		remaining int64
	}{
		{0, 8, true, 2},
		{sec(2), 7, false, 6},
		{sec(2), 6, true, 0},
	}
	for _, st := range steps {
		before := s
		d, err := p.Decide(&s, Request{Now: st.at, Cost: st.cost})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != st.allowed || d.Remaining != st.remaining {
			t.Errorf("t=%v cost %d: allowed %v remaining %d, want %v %d",
				time.Duration(st.at), st.cost, d.Allowed, d.Remaining, st.allowed, st.remaining)
		}
		if !d.Allowed && s != before {
			t.Errorf("t=%v cost %d: a denial changed the state %+v → %+v", time.Duration(st.at), st.cost, before, s)
		}
	}
}

func TestSeed002FixedWindow(t *testing.T) {
	t.Parallel()
	// 100 per minute: 100 requests at 0:59 and 100 at 1:00 all pass.
	p := mustCompile(t, floodgate.Limit{Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Minute})
	var at []int64
	for range 100 {
		at = append(at, sec(59))
	}
	for range 100 {
		at = append(at, sec(60))
	}
	if got := countAllowed(t, p, at); got != 200 {
		t.Errorf("fixed window: %d of 200 pass, want 200", got)
	}
	// A sliding window does not.
	sw := mustCompile(t, floodgate.Limit{Algorithm: floodgate.SlidingLog, Max: 100, Window: time.Minute})
	if got := countAllowed(t, sw, at); got != 100 {
		t.Errorf("sliding window: %d of 200 pass, want 100", got)
	}
}

func TestSplitLimit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		global    int64
		instances int
		want      int64
	}{
		{100, 4, 25}, {100, 3, 33}, {10, 12, 0}, {7, 1, 7}, {5000, 12, 416},
		{100, 0, 100}, {100, -2, 100}, {0, 3, 0}, {-5, 3, 0},
	} {
		if got := SplitLimit(c.global, c.instances); got != c.want {
			t.Errorf("SplitLimit(%d, %d) = %d, want %d", c.global, c.instances, got, c.want)
		}
	}
}
