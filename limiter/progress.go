package limiter

import (
	"fmt"
	"time"
)

// ProgressCheck is the engine's rule for a store call judged by its
// store's progress (ReplyClock), for the calls the engine makes and for
// those a program makes on the store's own client that must end as the
// engine's do (redisstore.Store.ProgressContext). The call's first check
// is due Timeout after it was sent. At each check:
//
//   - past its limit (the hard timeout, or an earlier deadline of the
//     caller's) the call ends (ProgressHard);
//   - when the store cannot tell when it last answered, it ends
//     (ProgressUnknown);
//   - when a reply arrived within Timeout, it goes on, to a check
//     Timeout after that reply (ProgressGoesOn);
//   - when none did and the check ran late (more than the tolerance, half
//     of Timeout, after it was due: this process did not run, and a reply
//     may have been read off a connection but not yet recorded by the
//     goroutine that read it, which resumed with the check), it looks
//     again after the tolerance (ProgressLooksAgain); a second look that
//     sees no reply either ends the call without holding it against the
//     store (ProgressLate);
//   - otherwise the store made no progress for a whole Timeout and the
//     call ends (ProgressNone).
//
// A check never moves past the call's limit. The zero ProgressCheck is
// not usable; make one with NewProgressCheck.
type ProgressCheck struct {
	timeout   time.Duration
	tolerance time.Duration
	due       time.Time // when the next check is due
	limit     time.Time // the latest end
	late      bool      // the last check ran late and saw no reply
}

// ProgressVerdict is what a ProgressCheck decided.
type ProgressVerdict uint8

const (
	ProgressGoesOn     ProgressVerdict = iota // the store answers: check again at Due
	ProgressLooksAgain                        // checked late, no reply seen: look again at Due
	ProgressNone                              // no reply for a whole Timeout: the call ends, the store's fault
	ProgressLate                              // no reply seen twice after a late check: ends, not the store's fault
	ProgressHard                              // the limit passed: the call ends
	ProgressUnknown                           // the store cannot tell: the call ends at its deadline
)

// String names the verdict.
func (v ProgressVerdict) String() string {
	switch v {
	case ProgressGoesOn:
		return "goes on"
	case ProgressLooksAgain:
		return "looks again"
	case ProgressNone:
		return "no progress"
	case ProgressLate:
		return "late"
	case ProgressHard:
		return "hard timeout"
	case ProgressUnknown:
		return "unknown"
	}
	return fmt.Sprintf("ProgressVerdict(%d)", uint8(v))
}

// Ended reports whether the call ends.
func (v ProgressVerdict) Ended() bool { return v >= ProgressNone }

// NewProgressCheck returns the check of a call sent at sent, with the
// engine's timeout and hard timeout (Options.Timeout and HardTimeout; a
// hard timeout below timeout counts as timeout), ending no later than
// deadline when that is not zero.
func NewProgressCheck(sent time.Time, timeout, hard time.Duration, deadline time.Time) ProgressCheck {
	c := ProgressCheck{
		timeout:   timeout,
		tolerance: max(timeout/2, minLateness),
		due:       sent.Add(timeout),
		limit:     sent.Add(max(hard, timeout)),
	}
	if !deadline.IsZero() && deadline.Before(c.limit) {
		c.limit = deadline
	}
	return c
}

// Due returns when the next check is due.
func (c *ProgressCheck) Due() time.Time { return c.due }

// Check judges the call at now, its check having been due at Due. reply
// returns when the store last answered on the call's connections and
// whether it can tell (ReplyClock.LastReply); it is called only when the
// call is within its limit. When the call goes on, Due is the next check.
func (c *ProgressCheck) Check(now time.Time, reply func() (time.Time, bool)) ProgressVerdict {
	if !now.Before(c.limit) {
		return ProgressHard
	}
	last, ok := reply()
	switch silent := now.Sub(last) >= c.timeout; {
	case !ok:
		return ProgressUnknown
	case silent && now.Sub(c.due) > c.tolerance:
		c.late = true
		c.due = earliest(now.Add(c.tolerance), c.limit)
		return ProgressLooksAgain
	case silent && c.late:
		return ProgressLate
	case silent:
		return ProgressNone
	}
	c.late = false
	c.due = earliest(last.Add(c.timeout), c.limit)
	return ProgressGoesOn
}

// earliest returns the earlier of a and b.
func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
