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
//
// For a store that implements Partitioner (a Redis Cluster store) the
// engine keeps one breaker per server, made on first use from these
// options, and a store call goes through the breakers of the servers its
// hits touch: it is refused only when one of them is open (and the call
// is not its probe), a success counts on each of them, and a failure on
// the server the store's error names (PartitionError), else on each of
// them. A server that fails (a stopped Cluster node) thus opens its own
// breaker and costs only the calls that touch it, however much of the
// traffic it carries, while the calls whose servers all answer go on,
// those that span several of them too. The shared breaker judges the
// calls to other stores, and the hits whose server the store cannot tell
// (before it read the Cluster's slot map, say). Stats.BreakerOpen
// reports whether any breaker is open, but a server's breaker that no
// call met for a whole Window (the server left the Cluster's slot map
// after a failover, say) counts as closed: with so few calls, each is a
// probe anyway; so does the shared one of such a store (it opened while
// the slot map was not known, say, and the calls now go to the servers'
// own). At most 256 servers get a breaker of their own; past that, a new
// one takes the place of one that saw no call for a Window, or else uses
// the shared breaker.
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

// Partitioner is implemented by stores whose hits are served by several
// servers that fail apart from each other: the nodes of a Redis Cluster.
// The engine then keeps a circuit breaker per server (see
// BreakerOptions), so that one that fails costs only the calls that touch
// it. A hit whose server Partition cannot tell goes through the engine's
// shared breaker.
type Partitioner interface {
	// Partition returns the name of the server that serves all of hits
	// (a Cluster node's address), and false when they span several
	// servers or the store cannot tell. Names are compared as they are:
	// a server renamed (a failover to another address) gets a breaker of
	// its own. The engine calls it before every store call, for all of
	// its hits and, when they span several servers, for each hit alone;
	// it must be cheap (it should not allocate) and safe for concurrent
	// use.
	Partition(hits []Hit) (part string, ok bool)
}

// PartitionError is the error of a store call that failed on one server
// of a Partitioner: Partition names it as Partitioner.Partition does. A
// failed call whose hits touch several servers counts then against that
// server's breaker alone (the others answered, or were not asked), not
// against each of them.
type PartitionError struct {
	Partition string
	Err       error
}

// Error returns the text of e.Err.
func (e *PartitionError) Error() string { return e.Err.Error() }

// Unwrap returns e.Err.
func (e *PartitionError) Unwrap() error { return e.Err }

// maxPartitions bounds the breakers kept per partition (Partitioner).
// Past it, a new partition takes the place of an idle one, or else shares
// the engine's breaker.
const maxPartitions = 256

// partitions keeps the breakers of the store's partitions.
type partitions struct {
	m    atomic.Pointer[map[string]*breaker] // replaced whole, never written in place
	mu   sync.Mutex                          // serializes the replacements of m
	gone atomic.Uint64                       // the openings of breakers dropped to make room
}

// get returns the breaker of part, made from shared on first use (nil:
// none could be kept).
func (p *partitions) get(part string, shared *breaker) *breaker {
	if m := p.m.Load(); m != nil {
		if b := (*m)[part]; b != nil {
			return b
		}
	}
	return p.add(part, shared)
}

// add makes the breaker of part, dropping an idle one when maxPartitions
// are kept already; nil when none is idle.
func (p *partitions) add(part string, shared *breaker) *breaker {
	p.mu.Lock()
	defer p.mu.Unlock()
	var old map[string]*breaker
	if m := p.m.Load(); m != nil {
		old = *m
	}
	if b := old[part]; b != nil {
		return b
	}
	now := shared.since()
	drop := ""
	if len(old) >= maxPartitions {
		for k, b := range old {
			if b.idle(now) {
				drop = k
				break
			}
		}
		if drop == "" {
			return nil
		}
	}
	m := make(map[string]*breaker, len(old)+1)
	for k, b := range old {
		if k != drop {
			m[k] = b
		}
	}
	if drop != "" {
		p.gone.Add(old[drop].opens.Load())
	}
	b := shared.clone(part, now)
	m[part] = b
	p.m.Store(&m)
	return b
}

// state returns whether any partition's breaker is open at now (one
// forsaken counts as closed), and how often they opened, those dropped
// included.
func (p *partitions) state(now int64) (open bool, opens uint64) {
	opens = p.gone.Load()
	if m := p.m.Load(); m != nil {
		for _, b := range *m {
			open = open || b.open.Load() && !b.forsaken(now)
			opens += b.opens.Load()
		}
	}
	return open, opens
}

// gateInline is the number of breakers a gate holds without allocating.
const gateInline = 8

// gated is one breaker of a gate, and whether the call is its probe.
type gated struct {
	b     *breaker
	probe bool
}

// gate is the set of breakers a store call goes through: those of the
// partitions its hits touch (Partitioner), the shared one for hits whose
// partition is not known, each once.
type gate struct {
	n    int
	in   [gateInline]gated
	more []gated // past gateInline
}

// at returns the i-th breaker of g.
func (g *gate) at(i int) *gated {
	if i < gateInline {
		return &g.in[i]
	}
	return &g.more[i-gateInline]
}

// add adds b to g, unless it holds it already.
func (g *gate) add(b *breaker) {
	for i := range g.n {
		if g.at(i).b == b {
			return
		}
	}
	if g.n < gateInline {
		g.in[g.n] = gated{b: b}
	} else {
		g.more = append(g.more, gated{b: b})
	}
	g.n++
}

// find returns the breaker of g that judges part, or nil.
func (g *gate) find(part string, shared *breaker) *breaker {
	for i := range g.n {
		if b := g.at(i).b; b != shared && b.part == part {
			return b
		}
	}
	return nil
}

// allow reports whether to call the store: whether each breaker of g lets
// the call through, noting the call as the probe of those that are open.
// When one does not, the probes the others gave are handed back.
func (g *gate) allow() bool {
	for i := range g.n {
		e := g.at(i)
		call, probe := e.b.allow()
		if !call {
			for j := range i {
				f := g.at(j)
				f.b.release(f.probe)
				f.probe = false
			}
			return false
		}
		e.probe = probe
	}
	return true
}

// quiet reports that the call is no probe and that every breaker of g is
// quiet (see breaker.quiet).
func (g *gate) quiet() bool {
	for i := range g.n {
		if e := g.at(i); e.probe || !e.b.quiet() {
			return false
		}
	}
	return true
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
	part     string // the partition judged ("": the engine's shared breaker)
	made     int64  // when it was made (ns since start)

	slices [breakerSlices]windowSlice
	turn   sync.Mutex // guards the reset of a slice that starts counting a new span

	failures  atomic.Int64 // in the current run
	runFrom   atomic.Int64 // the earliest send of the run's calls (ns since start)
	open      atomic.Bool
	probing   atomic.Bool  // a probe is in flight
	nextProbe atomic.Int64 // ns since start
	opens     atomic.Uint64
	asked     atomic.Int64 // while open: about when a call last met it (ns since start, within a slice)
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

// clone returns a new closed breaker for part, made at now, with b's
// options, clock and time base (instants on one breaker's clock are
// instants on the other's).
func (b *breaker) clone(part string, now int64) *breaker {
	c := &breaker{off: b.off, minCalls: b.minCalls, ratio: b.ratio, run: b.run, span: b.span, width: b.width,
		interval: b.interval, now: b.now, wall: b.wall, start: b.start, log: b.log, part: part, made: now}
	c.runFrom.Store(math.MaxInt64)
	return c
}

// idle reports that the breaker may be dropped at now: no call met it
// within the window, nor was it made within it; and it is either
// forsaken (see forsaken) or closed with no failure recorded since the
// last success.
func (b *breaker) idle(now int64) bool {
	if b.probing.Load() || now-b.made < b.width*breakerSlices {
		return false
	}
	if b.forsaken(now) {
		return true
	}
	if !b.quiet() {
		return false
	}
	calls, _ := b.rate(now)
	return calls == 0
}

// forsaken reports that the breaker is open and no call met it within the
// window that ends at now.
func (b *breaker) forsaken(now int64) bool {
	return b.open.Load() && now-b.asked.Load() >= b.width*breakerSlices
}

// since returns the time since the engine's shared breaker was made (the
// time base of every breaker of the engine), by the breaker's clock.
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
	if now-b.asked.Load() >= b.width {
		b.asked.Store(now)
	}
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
		if b.part != "" {
			b.log.Info("limiter: store answers again, circuit breaker closed", "partition", b.part)
		} else {
			b.log.Info("limiter: store answers again, circuit breaker closed")
		}
	}
	if probe {
		b.probing.Store(false)
	}
}

// failure records a store call, sent at instant sent (ns since start),
// that failed in the store with err. The warning of a breaker that opens
// names err, so that the log says why the store fails (a Redis that is
// full, a replica, down), not only that it does.
func (b *breaker) failure(probe bool, sent int64, err error) {
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
		b.asked.Store(now)
		b.nextProbe.Store(now + b.interval)
		b.opens.Add(1)
		calls, fails := b.rate(now)
		args := []any{"rule", why, "failures_in_a_row", run, "window_calls", calls, "window_failures", fails}
		if b.part != "" {
			args = append(args, "partition", b.part)
		}
		if err != nil {
			args = append(args, "err", err)
		}
		b.log.Warn("limiter: store failing, circuit breaker open", args...)
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
