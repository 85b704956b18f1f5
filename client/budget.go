package client

import (
	"sync"
	"sync/atomic"
	"time"
)

// RetryBudgetOptions configure a RetryBudget. The zero value is usable.
type RetryBudgetOptions struct {
	// Ratio is the share of requests that may be retried: over any
	// Window, retries stay within Ratio times the first attempts (plus
	// MinRetries). Zero means 0.1; a negative value means none beyond
	// MinRetries.
	Ratio float64
	// MinRetries is the number of retries allowed in any Window whatever
	// the traffic, so that a caller that sends little can still retry.
	// Zero means 10; a negative value means none.
	MinRetries int
	// Window is the span over which requests and retries are counted.
	// Zero means 10s.
	Window time.Duration
}

// RetryBudget bounds retries to a share of requests, as Finagle's
// RetryBudget and gRPC's retry throttling do, so that a failing backend
// sees about 1+Ratio times the load instead of MaxAttempts times: it
// allows a retry only when, with it, the retries of the last Window stay
// within Ratio × the first attempts of that Window + MinRetries (counted
// in 20 buckets, so the Window ends with the current bucket). Time is
// passed in; it is safe for concurrent use.
//
// Give the same RetryBudget to every RetryTransport or RetryInterceptor
// that calls one backend: they call Request for each first attempt and
// Retry before each retry, and hand the caller the last answer when Retry
// says no. A retry allowed but never sent, because its caller left while
// it waited, is not counted.
type RetryBudget struct {
	ratio  float64
	min    int64
	denied atomic.Int64

	mu sync.Mutex // guards c
	c  counts     // a: first attempts, b: retries
}

// NewRetryBudget returns a budget with nothing counted yet.
func NewRetryBudget(opts RetryBudgetOptions) *RetryBudget {
	r := opts.Ratio
	switch {
	case r == 0:
		r = 0.1
	case !(r > 0): // negative, or NaN
		r = 0
	}
	m := int64(opts.MinRetries)
	switch {
	case m == 0:
		m = 10
	case m < 0:
		m = 0
	}
	w := opts.Window
	if w <= 0 {
		w = 10 * time.Second
	}
	return &RetryBudget{ratio: r, min: m, c: newCounts(w, 20)}
}

// Request counts a first attempt at now: it adds Ratio to the budget.
func (b *RetryBudget) Request(now time.Time) {
	b.mu.Lock()
	b.c.add(now, 1, 0)
	b.mu.Unlock()
}

// Retry reports whether a retry may be sent at now and, if so, counts it;
// Denied counts the refusals.
func (b *RetryBudget) Retry(now time.Time) bool {
	_, ok := b.take(now)
	return ok
}

// take is Retry, and says which bucket the retry was counted in, for
// giveBack. Without a budget (nil) every retry may be sent.
func (b *RetryBudget) take(now time.Time) (bucket int64, ok bool) {
	if b == nil {
		return 0, true
	}
	b.mu.Lock()
	req, ret := b.c.sums(now)
	ok = float64(ret+1) <= b.ratio*float64(req)+float64(b.min)
	if ok {
		bucket = b.c.add(now, 0, 1)
	}
	b.mu.Unlock()
	if !ok {
		b.denied.Add(1)
	}
	return bucket, ok
}

// giveBack uncounts a retry that take allowed but that was never sent
// (its caller left while it waited), unless its bucket has left the
// window already.
func (b *RetryBudget) giveBack(bucket int64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.c.remove(bucket, 0, 1)
	b.mu.Unlock()
}

// Denied returns the number of retries refused so far.
func (b *RetryBudget) Denied() int64 { return b.denied.Load() }
