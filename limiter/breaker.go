package limiter

import (
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Breaker defaults.
const (
	DefaultBreakerWindow       = 10 * time.Second
	DefaultBreakerMinCalls     = 20
	DefaultBreakerFailureRatio = 0.5
	DefaultBreakerFailures     = 20
	DefaultProbeInterval       = 500 * time.Millisecond
)

// BreakerOptions configure the circuit breaker that stops calling a store
// that is failing. While it is open every hit is decided by its failure
// policy at once; one request at a time, at most every ProbeInterval, is
// let through to the store as a probe, and the first success closes the
// breaker. Probes ride on requests: with no traffic, nothing is probed.
//
// The breaker judges the store, not this process: only calls that reached
// the store and failed there count against it (an error, or a deadline
// that passed while the store held the call). For a store that implements
// ReplyClock, a deadline counts only when the store made no progress for
// it (no reply at all on the call's connections), whether or not the call
// had left this process; a call that reached the hard timeout while the
// store kept answering does not count. For other stores, a call whose
// deadline passed while it waited in this process for an in-flight slot or
// in the store's own queue (see ErrNotSent), and a deadline noticed late
// because this process was not running, say nothing about the store. A
// caller that gave up never does.
//
// It opens when either rule holds:
//   - the failure rate: of the calls that ended in the last Window, at
//     least MinCalls did and at least FailureRatio of them failed (a store
//     that fails often);
//   - the run: Failures calls failed with no success between them, sent
//     over at least one store deadline (a store that answers nothing:
//     stopped, unreachable, out of memory). A store held up for less than
//     that (a stall of its machine, say) fails only the calls in flight,
//     all sent within one deadline, and does not open it.
//
// A busy store that answers within the deadline trips neither.
type BreakerOptions struct {
	// Window is the span over which the failure rate is taken
	// (0: DefaultBreakerWindow). It is kept in ten slices, so the rate
	// forgets a tenth of the window at a time.
	Window time.Duration
	// MinCalls is the least number of calls in the window for the rate
	// to count (0: DefaultBreakerMinCalls).
	MinCalls int
	// FailureRatio is the share of failed calls in the window that opens
	// the breaker (0: DefaultBreakerFailureRatio; above 1: the rate never
	// opens it).
	FailureRatio float64
	// Failures is the length of a run of failed calls, with no success
	// among them and sent over at least one store deadline, that opens
	// the breaker (0: DefaultBreakerFailures). Negative: the breaker is
	// off and never opens.
	Failures int
	// ProbeInterval is the least time between two probes
	// (0: DefaultProbeInterval).
	ProbeInterval time.Duration
}

// breakerSlices is the number of slices of the failure-rate window.
const breakerSlices = 10

// windowSlice counts the calls that ended during one slice of the window.
type windowSlice struct {
	epoch atomic.Int64 // 1 + the index of the slice of time counted here; 0: unused
	calls atomic.Int64
	fails atomic.Int64
}

// breaker is a circuit breaker whose hot path (a call that worked) takes a
// few atomic operations and no lock.
type breaker struct {
	off      bool
	minCalls int64
	ratio    float64
	run      int64
	span     int64 // ns a run's calls must have been sent over
	width    int64 // ns per slice
	interval int64 // ns between probes
	now      func() time.Time
	wall     bool // now is time.Now: at can use an instant already read
	start    time.Time
	log      *slog.Logger

	slices [breakerSlices]windowSlice
	turn   sync.Mutex // guards the reset of a slice that starts counting a new span

	failures  atomic.Int64 // in the current run
	runFrom   atomic.Int64 // the earliest send of the run's calls (ns since start)
	open      atomic.Bool
	probing   atomic.Bool  // a probe is in flight
	nextProbe atomic.Int64 // ns since start
	opens     atomic.Uint64
}

func (b *breaker) init(o BreakerOptions, span time.Duration, now func() time.Time, log *slog.Logger) {
	b.span = max(int64(span), 0)
	b.runFrom.Store(math.MaxInt64)
	b.off = o.Failures < 0
	b.run = int64(o.Failures)
	if b.run == 0 {
		b.run = DefaultBreakerFailures
	}
	b.minCalls = int64(o.MinCalls)
	if b.minCalls <= 0 {
		b.minCalls = DefaultBreakerMinCalls
	}
	b.ratio = o.FailureRatio
	if b.ratio <= 0 {
		b.ratio = DefaultBreakerFailureRatio
	}
	w := o.Window
	if w <= 0 {
		w = DefaultBreakerWindow
	}
	b.width = max(int64(w)/breakerSlices, 1)
	b.interval = int64(o.ProbeInterval)
	if b.interval <= 0 {
		b.interval = int64(DefaultProbeInterval)
	}
	if now == nil {
		now, b.wall = time.Now, true
	}
	b.now = now
	b.start = now()
	b.log = log
}

// since returns the time since the breaker was made, by its clock.
func (b *breaker) since() int64 { return int64(b.now().Sub(b.start)) }

// at returns since() for an instant t of time.Now, without reading the
// clock again when the breaker's clock is time.Now.
func (b *breaker) at(t time.Time) int64 {
	if b.wall {
		return int64(t.Sub(b.start))
	}
	return b.since()
}

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

// count adds one ended call, failed or not, to the slice of now, and
// returns the slice's index.
func (b *breaker) count(now int64, failed bool) {
	e := now/b.width + 1
	s := &b.slices[e%breakerSlices]
	if s.epoch.Load() != e {
		b.turn.Lock()
		if s.epoch.Load() != e {
			s.calls.Store(0)
			s.fails.Store(0)
			s.epoch.Store(e)
		}
		b.turn.Unlock()
	}
	s.calls.Add(1)
	if failed {
		s.fails.Add(1)
	}
}

// rate returns the calls and the failures of the window that ends now.
func (b *breaker) rate(now int64) (calls, fails int64) {
	e := now/b.width + 1
	for i := range b.slices {
		s := &b.slices[i]
		if ep := s.epoch.Load(); ep > e-breakerSlices && ep <= e {
			calls += s.calls.Load()
			fails += s.fails.Load()
		}
	}
	return calls, fails
}

// quiet reports that the breaker is closed and no failure was recorded
// since the last success: a success that is not a probe and was not timed
// (end < 0) then changes nothing, and need not be recorded.
func (b *breaker) quiet() bool { return b.failures.Load() == 0 && !b.open.Load() }

// success records a store call that worked and ended at instant end (ns
// since start; negative: not read, and not counted in the failure rate, as
// for stores in this process, which skip the clock).
func (b *breaker) success(probe bool, end int64) {
	if b.failures.Load() != 0 {
		b.failures.Store(0)
		b.runFrom.Store(math.MaxInt64)
	}
	if end >= 0 && !b.off {
		b.count(end, false)
	}
	if b.open.Load() && b.open.CompareAndSwap(true, false) {
		b.forget()
		b.log.Info("limiter: store answers again, circuit breaker closed")
	}
	if probe {
		b.probing.Store(false)
	}
}

// failure records a store call, sent at instant sent (ns since start),
// that failed in the store.
func (b *breaker) failure(probe bool, sent int64) {
	if probe {
		b.probing.Store(false) // stays open until the next probe
		return
	}
	if b.off {
		return
	}
	now := b.since()
	b.count(now, true)
	run := b.failures.Add(1)
	from := b.runFrom.Load()
	for sent < from && !b.runFrom.CompareAndSwap(from, sent) {
		from = b.runFrom.Load()
	}
	why := ""
	if run >= b.run && sent-min(from, sent) >= b.span {
		why = "run"
	} else if calls, fails := b.rate(now); calls >= b.minCalls && float64(fails) >= b.ratio*float64(calls) {
		why = "rate"
	}
	if why != "" && b.open.CompareAndSwap(false, true) {
		b.nextProbe.Store(now + b.interval)
		b.opens.Add(1)
		calls, fails := b.rate(now)
		b.log.Warn("limiter: store failing, circuit breaker open", "rule", why,
			"failures_in_a_row", run, "window_calls", calls, "window_failures", fails)
	}
}

// forget clears the failure rate and the run, so that a store that
// answers again starts with a clean record.
func (b *breaker) forget() {
	b.turn.Lock()
	for i := range b.slices {
		b.slices[i].epoch.Store(0)
	}
	b.turn.Unlock()
	b.failures.Store(0)
	b.runFrom.Store(math.MaxInt64)
}

// release ends a call that said nothing about the store's health.
func (b *breaker) release(probe bool) {
	if probe {
		b.nextProbe.Store(b.since())
		b.probing.Store(false)
	}
}
