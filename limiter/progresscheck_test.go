package limiter_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
)

// TestProgressCheckRule: the rule every call judged by its store's
// progress follows, at each kind of check: a store that answers moves the
// check on and never past the limit; a silent one ends the call; a late
// check with no reply looks again after half a deadline, and a second
// silent look ends the call as late; a reply seen at the second look lets
// it go on; the limit and a store that cannot tell end it.
func TestProgressCheckRule(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	const timeout = 200 * time.Millisecond
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	at := func(last time.Time) func() (time.Time, bool) {
		return func() (time.Time, bool) { return last, true }
	}
	unknown := func() (time.Time, bool) { return time.Time{}, false }
	type step struct {
		now   int // ms after t0
		reply func() (time.Time, bool)
		want  limiter.ProgressVerdict
		due   int // ms after t0, when it goes on
	}
	for _, tc := range []struct {
		name     string
		hard     time.Duration
		deadline time.Time
		steps    []step
	}{
		{"answers, then silent", time.Second, time.Time{}, []step{
			{200, at(ms(150)), limiter.ProgressGoesOn, 350},
			{350, at(ms(300)), limiter.ProgressGoesOn, 500},
			{500, at(ms(300)), limiter.ProgressNone, 0},
		}},
		{"never past the limit", 300 * time.Millisecond, time.Time{}, []step{
			{200, at(ms(190)), limiter.ProgressGoesOn, 300},
			{300, at(ms(299)), limiter.ProgressHard, 0},
		}},
		{"the caller's deadline first", time.Second, ms(250), []step{
			{200, at(ms(190)), limiter.ProgressGoesOn, 250},
			{250, at(ms(240)), limiter.ProgressHard, 0},
		}},
		{"late and silent twice", time.Second, time.Time{}, []step{
			{800, at(ms(10)), limiter.ProgressLooksAgain, 900},
			{900, at(ms(10)), limiter.ProgressLate, 0},
		}},
		{"late, then the reply is seen", 2 * time.Second, time.Time{}, []step{
			{800, at(ms(10)), limiter.ProgressLooksAgain, 900},
			{900, at(ms(850)), limiter.ProgressGoesOn, 1050},
			{1050, at(ms(850)), limiter.ProgressNone, 0},
		}},
		{"the second look never past the limit", 850 * time.Millisecond, time.Time{}, []step{
			{800, at(ms(10)), limiter.ProgressLooksAgain, 850},
			{850, at(ms(10)), limiter.ProgressHard, 0},
		}},
		{"a little late is not late", time.Second, time.Time{}, []step{
			{290, at(ms(10)), limiter.ProgressNone, 0},
		}},
		{"cannot tell", time.Second, time.Time{}, []step{
			{200, unknown, limiter.ProgressUnknown, 0},
		}},
		{"never answered", time.Second, time.Time{}, []step{
			{200, at(time.Time{}), limiter.ProgressNone, 0},
		}},
	} {
		c := limiter.NewProgressCheck(t0, timeout, tc.hard, tc.deadline)
		if got := c.Due(); !got.Equal(ms(200)) {
			t.Fatalf("%s: first check due %v after the send, want 200ms", tc.name, got.Sub(t0))
		}
		for i, s := range tc.steps {
			got := c.Check(ms(s.now), s.reply)
			if got != s.want {
				t.Fatalf("%s, step %d at %dms: %v, want %v", tc.name, i, s.now, got, s.want)
			}
			if got.Ended() != (s.due == 0) {
				t.Fatalf("%s, step %d: Ended %v", tc.name, i, got.Ended())
			}
			if !got.Ended() && !c.Due().Equal(ms(s.due)) {
				t.Fatalf("%s, step %d: next check at %v, want %dms", tc.name, i, c.Due().Sub(t0), s.due)
			}
		}
	}
}

// The rule for a call whose store answered 150 ms after it was sent and
// then fell silent, with a deadline of 200 ms: the first check sees the
// reply and moves on to 200 ms after it, where the silence ends the call.
func ExampleProgressCheck() {
	sent := time.Unix(0, 0)
	c := limiter.NewProgressCheck(sent, 200*time.Millisecond, 2*time.Second, time.Time{})
	reply := func() (time.Time, bool) { return sent.Add(150 * time.Millisecond), true }
	for {
		at := c.Due()
		v := c.Check(at, reply)
		fmt.Printf("%v: %v\n", at.Sub(sent), v)
		if v.Ended() {
			break
		}
	}
	// Output:
	// 200ms: goes on
	// 350ms: no progress
}
