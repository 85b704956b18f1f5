package limiter

import (
	"log/slog"
	"sync/atomic"
	"time"
)

// Breaker defaults.
const (
	DefaultBreakerFailures = 5
	DefaultProbeInterval   = 500 * time.Millisecond
)

// BreakerOptions configure the circuit breaker that stops calling a store
// that keeps failing. While it is open every hit is decided by its failure
// policy at once; one request at a time, at most every ProbeInterval, is
// let through to the store as a probe, and the first success closes the
// breaker. Probes ride on requests: with no traffic, nothing is probed.
type BreakerOptions struct {
	// Failures is the number of consecutive failed store calls that opens
	// the breaker (0: DefaultBreakerFailures; negative: it never opens).
	Failures int
	// ProbeInterval is the least time between two probes
	// (0: DefaultProbeInterval).
	ProbeInterval time.Duration
}

// breaker is a lock-free circuit breaker.
type breaker struct {
	threshold int64
	interval  int64 // ns
	now       func() time.Time
	start     time.Time
	log       *slog.Logger

	failures  atomic.Int64 // consecutive
	open      atomic.Bool
	probing   atomic.Bool  // a probe is in flight
	nextProbe atomic.Int64 // ns since start
	opens     atomic.Uint64
}

func (b *breaker) init(o BreakerOptions, now func() time.Time, log *slog.Logger) {
	b.threshold = int64(o.Failures)
	if b.threshold == 0 {
		b.threshold = DefaultBreakerFailures
	}
	b.interval = int64(o.ProbeInterval)
	if b.interval <= 0 {
		b.interval = int64(DefaultProbeInterval)
	}
	if now == nil {
		now = time.Now
	}
	b.now = now
	b.start = now()
	b.log = log
}

// since returns the monotonic time since the breaker was made.
func (b *breaker) since() int64 { return int64(b.now().Sub(b.start)) }

// allow reports whether to call the store, and whether the call is a probe.
func (b *breaker) allow() (call, probe bool) {
	if !b.open.Load() {
		return true, false
	}
	now := b.since()
	if now < b.nextProbe.Load() || !b.probing.CompareAndSwap(false, true) {
		return false, false
	}
	b.nextProbe.Store(now + b.interval)
	return true, true
}

// success records a store call that worked.
func (b *breaker) success(probe bool) {
	if b.failures.Load() != 0 {
		b.failures.Store(0)
	}
	if b.open.Load() && b.open.CompareAndSwap(true, false) {
		b.log.Info("limiter: store answers again, circuit breaker closed")
	}
	if probe {
		b.probing.Store(false)
	}
}

// failure records a store call that failed or timed out.
func (b *breaker) failure(probe bool) {
	if probe {
		b.probing.Store(false) // stays open until the next probe
		return
	}
	n := b.failures.Add(1)
	if b.threshold > 0 && n >= b.threshold && b.open.CompareAndSwap(false, true) {
		b.nextProbe.Store(b.since() + b.interval)
		b.opens.Add(1)
		b.log.Warn("limiter: store failing, circuit breaker open", "consecutive_failures", n)
	}
}

// release ends a call that said nothing about the store's health.
func (b *breaker) release(probe bool) {
	if probe {
		b.nextProbe.Store(b.since())
		b.probing.Store(false)
	}
}
