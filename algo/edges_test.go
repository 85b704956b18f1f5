package algo

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
)

// TestQuotaAtTheEndOfTime: a calendar period whose end lies past the last
// instant an int64 of nanoseconds holds (2262-04-11T23:47:16.854775807Z)
// must still count: a quota of 2 a month or a week admits 2 requests, never
// every request, and never answers a wrapped-around reset.
func TestQuotaAtTheEndOfTime(t *testing.T) {
	t.Parallel()
	for _, period := range []floodgate.Period{floodgate.Day, floodgate.Week, floodgate.Month} {
		p := mustCompile(t, floodgate.Limit{Algorithm: floodgate.Quota, Max: 2, Period: period})
		var s State
		base := time.Date(2262, 4, 11, 23, 0, 0, 0, time.UTC).UnixNano()
		allowed := 0
		for i, now := range []int64{base, base + 1e9, base + 2e9, math.MaxInt64} {
			d, err := p.Decide(&s, Request{Now: now, Cost: 1})
			if errors.Is(err, ErrOverflow) {
				continue
			}
			if err != nil {
				t.Fatalf("%s request %d: %v", period, i, err)
			}
			if d.Allowed {
				allowed++
			}
			if d.ResetAfter <= 0 || (now < math.MaxInt64 && d.ResetAfter <= time.Nanosecond) {
				t.Errorf("%s request %d: reset after %v: the period's end wrapped around", period, i, d.ResetAfter)
			}
		}
		if allowed > 2 {
			t.Errorf("%s: %d of 4 allowed, want at most 2", period, allowed)
		}
	}
}

// TestSeedLesson07Throttle is seed 003's throttle demo: the stage bucket of
// 5 refilling 5 a second gets 8 requests at once (5 pass, 3 are 429), and
// one second later 6 (5 pass, 1 is 429); the partner-basic plan (2 a
// second, burst 2) gets 4 at once: 200 200 429 429.
func TestSeedLesson07Throttle(t *testing.T) {
	t.Parallel()
	run := func(p Params, s *State, now int64, n int) []bool {
		var got []bool
		for range n {
			d, err := p.Decide(s, Request{Now: now, Cost: 1})
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, d.Allowed)
		}
		return got
	}
	p := mustCompile(t, bucket(5, 5))
	var s State
	if got, want := run(p, &s, 0, 8), []bool{true, true, true, true, true, false, false, false}; !equalBools(got, want) {
		t.Errorf("8 at once: %v, want %v", got, want)
	}
	if got, want := run(p, &s, sec(1), 6), []bool{true, true, true, true, true, false}; !equalBools(got, want) {
		t.Errorf("one second later: %v, want %v", got, want)
	}
	plan := mustCompile(t, bucket(2, 2))
	var ps State
	if got, want := run(plan, &ps, 0, 4), []bool{true, true, false, false}; !equalBools(got, want) {
		t.Errorf("partner-basic: %v, want %v", got, want)
	}
}
