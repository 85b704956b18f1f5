package client

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// AdaptiveThrottleOptions configure an AdaptiveThrottle. The zero value is
// usable.
type AdaptiveThrottleOptions struct {
	// K is the multiplier: while the backend refuses, it keeps seeing
	// about K times the requests it accepts. Zero means 2; values below 1
	// count as 1.
	K float64
	// Window is how far back requests and accepts count. Zero means 2
	// minutes.
	Window time.Duration
}

// AdaptiveThrottle rejects requests locally, before they are sent, with a
// probability that rises as the backend refuses more of them: client-side
// adaptive throttling as described in Google's SRE book ("Handling
// Overload"). Over the last Window it counts the requests whose outcome
// is known (those it rejected, and those the backend answered or that
// ended without an answer) and those the backend accepted, and rejects
// with probability
//
//	max(0, (requests - K·accepts) / (requests + 1))
//
// so that a backend that accepts only part of the load keeps receiving
// about K times what it accepts instead of everything, and is offered
// more again as soon as it accepts more. A request counts when its
// outcome is known, not when it goes, as grpc-go's throttler does: the
// requests still in flight (all of a first burst, or of one after a quiet
// spell) count neither for nor against a backend that has refused
// nothing. Time is passed in, so the throttle can be driven with any
// clock; it is safe for concurrent use.
//
// Give the same AdaptiveThrottle to every RetryTransport or
// RetryInterceptor that calls one backend; they call Allow before each
// attempt, and Accepted or Refused with its outcome (neither for an
// attempt its own caller cancelled: it says nothing of the backend).
type AdaptiveThrottle struct {
	k        float64
	rejected atomic.Int64

	mu sync.Mutex // guards c
	c  counts     // a: requests with a known outcome, b: accepts
}

// ErrThrottled reports a request that an AdaptiveThrottle rejected
// locally: it was not sent.
var ErrThrottled = errors.New("client: rejected locally by adaptive throttling")

// NewAdaptiveThrottle returns a throttle with nothing counted yet.
func NewAdaptiveThrottle(opts AdaptiveThrottleOptions) *AdaptiveThrottle {
	k := opts.K
	switch {
	case k == 0:
		k = 2
	case !(k >= 1): // below 1, or NaN
		k = 1
	}
	w := opts.Window
	if w <= 0 {
		w = 2 * time.Minute
	}
	return &AdaptiveThrottle{k: k, c: newCounts(w, 60)}
}

// rejectProbability is the SRE book's formula.
func rejectProbability(requests, accepts int64, k float64) float64 {
	p := (float64(requests) - k*float64(accepts)) / float64(requests+1)
	return max(0, p)
}

// Allow reports whether a request attempted at now may be sent; false
// means it is rejected locally, and it then counts as a request not
// accepted (Rejected counts it too). Tell the outcome of a request it
// allows with Accepted or Refused.
func (t *AdaptiveThrottle) Allow(now time.Time) bool { return t.allow(now, rand.Float64()) }

// allow is Allow with the random draw u in [0, 1) passed in.
func (t *AdaptiveThrottle) allow(now time.Time, u float64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	req, acc := t.c.sums(now)
	if u < rejectProbability(req, acc, t.k) {
		t.c.add(now, 1, 0)
		t.rejected.Add(1)
		return false
	}
	return true
}

// Accepted counts, at now, a request allowed by Allow whose answer from
// the backend is not a refusal.
func (t *AdaptiveThrottle) Accepted(now time.Time) {
	t.mu.Lock()
	t.c.add(now, 1, 1)
	t.mu.Unlock()
}

// Refused counts, at now, a request allowed by Allow that the backend
// refused, or that ended without an answer (other than by its caller
// cancelling it: such a request is counted neither way).
func (t *AdaptiveThrottle) Refused(now time.Time) {
	t.mu.Lock()
	t.c.add(now, 1, 0)
	t.mu.Unlock()
}

// RejectProbability returns the probability with which Allow would reject
// a request at now.
func (t *AdaptiveThrottle) RejectProbability(now time.Time) float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	req, acc := t.c.sums(now)
	return rejectProbability(req, acc, t.k)
}

// Rejected returns the number of requests rejected locally so far.
func (t *AdaptiveThrottle) Rejected() int64 { return t.rejected.Load() }
