package algo

// Design note: the adaptive concurrency limit.
//
// Windows. A window measures the requests admitted during its span (at
// least Window and ten no-load latencies, from the end of the window
// before, so under one limit) and ends when they have answered: four mean
// latencies after the span, and once it holds MinSamples requests. Counting
// by admission, not by answer, keeps the slow answers of late requests in
// the mean (a window cut off at a fixed instant keeps only the fast ones).
// Its mean latency over the no-load latency is r; it queues if r exceeds
// Tolerance and the excess is more than three standard errors (of the
// window's mean and of the estimate), so a small window does not cut on
// noise.
//
// Rule (the gradient rule of Netflix's Gradient2 and Envoy's controller,
// aimed below the knee instead of above it):
//
//   - a window that does not queue grows the limit by Growth (at least
//     one), if it used at least half of it or refused a request for it;
//     past the limit of the last window that queued (or dropped), after
//     six growing windows in a row the step doubles each window, so a
//     limit far below a knee that moved up (an upstream that recovered)
//     gets there in a few windows. Below that limit the step stays
//     Growth: regrowing after a cut towards the knee just found, doubling
//     steps would overshoot it and cut deep again.
//   - a window that queues cuts the limit. An upstream that serves c
//     requests at once answers L > c in flight in L/c times its no-load
//     latency, so L/r is the knee, the most in flight it takes without
//     queueing. The limit is cut to Backoff·L/r, below the knee, and never
//     below half of L in one window, so one bad window cannot empty it.
//   - a window with more than DropRatio of its requests dropped
//     (timeouts, and errors the caller counts as overload) cuts to
//     Backoff·L or lower. When the caller names each request's source (a
//     tenant: SampleFrom) and the window's requests came from more than
//     one, the drops of the source with the most are left out of the
//     ratio, theirs and its requests': an upstream that refuses one client
//     (its own rate limit answering 503) shows that client's drops alone,
//     and must not cut the limit of the others, while an overloaded
//     upstream drops every source's requests and still cuts. The sources
//     with the most drops are counted in dropSources slots (the
//     space-saving count: exact up to that many dropping sources, over by
//     at most a dropSources-th of the drops past it).
//
// So on a steady upstream the limit saws between about Backoff·knee and
// Tolerance·knee plus a growth step, and a cut lands below the knee
// whatever the overshoot.
//
// No probe dips. Envoy's gradient controller measures its minimum latency
// by dropping the limit to a few requests at every interval, refusing most
// traffic while it measures; Vegas forgets its minimum at random to learn
// it again; Gradient2 compares with a long average that follows the
// latency up under sustained load, so its limit drifts up. Here the
// no-load latency is the lower quartile of the mean latencies of the last
// 32 windows that did not queue, each weighing the inverse of its squared
// standard error (windows of many requests count more). The rule itself
// visits the region below the knee on every cycle (the window after a
// cut), so nothing lowers the limit to measure. The lower quartile also
// pulls down an estimate that is too high: the cuts then land above the
// knee, their windows' latencies fall below the estimate, and the quartile
// follows them. The estimate moves on evidence the rule produces anyway:
//
//   - at the start it is the first window's latency, which may queue, and
//     is not trusted: growth is by half per window. When a growth queues,
//     a latency that rose clearly less than the limit did (elasticity below
//     0.9, by three standard errors) puts the knee inside that step: the
//     estimate is trusted and the normal cut applies. Otherwise the limit
//     halves; a halving that halves the latency shows the limit still above
//     the knee and halves again, and the first that does not (elasticity
//     below 0.8) shows its window below the knee: its latency becomes the
//     trusted estimate, and the limit goes to Backoff times the knee the
//     last queueing window shows.
//   - a cut to three quarters of the limit or less after which the
//     latency did not fall (elasticity below 0.5, where queueing predicts
//     1) shows an upstream that became slower, not one that queues: the
//     cut is undone and the new latency becomes the estimate. The window
//     after checks the undo: if the latency rose with the restored limit
//     after all (elasticity 0.5 or more), the old estimate comes back.
//   - an estimate trusted on a noisy start decision may still hold
//     queueing (a small upstream, whose windows are noisy, behind a
//     limit that started above its knee): the limit then saws around a
//     multiple of the knee, and each cut lowers the latency in proportion
//     to what is in flight. The last four cuts' elasticity, pooled (the
//     latency's falls summed over what is in flight's), of 1 or more shows
//     it (a cut that lands below the knee shows less): the estimate is no
//     longer trusted and the limit halves, as at the start, until the
//     latency stops following it. This is no probe: it follows only cuts
//     that showed queueing throughout.
//   - three windows in a row below the estimate by more than Tolerance
//     and the noise show an upstream that became faster: the lowest of
//     them becomes the estimate.
//   - four queueing windows in a row at Min, where nothing can be cut,
//     make their latency the estimate: at Min, the upstream's latency is
//     the best it offers.
//   - a window at least four times as noisy as a new one (in squared
//     relative error) leaves the estimate, so the small windows of a quiet
//     start give way to those of a busy upstream.
//
// Elasticity is (1 − rtt₂/rtt₁) / (1 − n₂/n₁) across a change of the
// limit after which the mean in flight went from n₁ to n₂ (not the limits:
// under criticality tiers the limit is not all used): 1 when all the
// latency was queueing, 0 when none was. A change of less than 5% in flight
// teaches nothing.
//
// What it does not do: a single window cannot tell an upstream that became
// slower from one that queues, so a slowdown costs one window at half the
// limit before the undo; and below a knee of about 20 the integer limit
// and small windows make the saw wider than ±20%.

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/floodgate/floodgate"
)

// Outcome is how a request sent to the upstream ended, as an Adaptive
// limit learns from it.
type Outcome uint8

const (
	// OutcomeOK is an answer: its latency is a sample.
	OutcomeOK Outcome = iota
	// OutcomeDropped is a request that shows overload: it timed out, the
	// upstream refused it (503) or the connection failed. Its latency is
	// not a sample; a window with too many drops cuts the limit.
	OutcomeDropped
	// OutcomeIgnored is a request that teaches nothing, such as one its
	// client abandoned: it frees its slot and nothing else.
	OutcomeIgnored
)

// AdaptiveOptions configures an Adaptive limit. The zero value of every
// field is a useful default.
type AdaptiveOptions struct {
	// Min is the lowest the limit goes; 0 means 1.
	Min int
	// Max is the highest the limit goes; 0 means 1000 (or Min if higher).
	Max int
	// Initial is the limit at the start; 0 means 20, clamped to [Min, Max].
	Initial int
	// Tolerance is the ratio of a window's mean latency to the no-load
	// latency above which the upstream is taken to be queueing; 0 means
	// 1.05. It must be above 1.
	Tolerance float64
	// Backoff is the share of the estimated knee a cut lands on, and the
	// factor a window with drops cuts by; 0 means 0.95. It must be in
	// (0, 1).
	Backoff float64
	// Growth is the share the limit grows by after a window without
	// queueing (at least 1 each time); 0 means 0.05. It must be in (0, 1].
	Growth float64
	// Window is the shortest span during which a window admits the
	// requests it measures; 0 means 500ms. The span also lasts at least ten
	// no-load latencies, and the window ends when its requests have
	// answered (four mean latencies later) and number MinSamples.
	Window time.Duration
	// MinSamples is the fewest requests a window measures; 0 means 100.
	MinSamples int
	// DropRatio is the share of a window's requests that may be dropped
	// before the window counts as overload; 0 means 0.01. It must be in
	// (0, 1].
	DropRatio float64
}

// Adaptive is a concurrency limit that learns from the upstream's latency
// (see the design note at the top of adaptive.go). It is a pure state
// machine: time is passed in, nothing is read from a clock, and no method
// allocates. It is not safe for concurrent use; callers hold a lock.
type Adaptive struct {
	o AdaptiveOptions // with the defaults filled in

	limit    float64 // in [Min, Max]
	inflight int     // admitted by Acquire and not yet released
	seen     bool    // an instant was seen: last is valid
	last     int64   // the latest instant seen

	// The window being measured: the requests admitted in its span,
	// [spanStart, spanStart+span), which began when the last window ended.
	spanStart int64
	span      uint64  // the span's length, ns
	tail      uint64  // how long after the span the window ends, ns
	n, drops  int     // answered and dropped requests
	sum       float64 // of the answered latencies, in ns
	sumSq     float64
	level     float64 // the sum of the answered requests' in flight at admission
	peak      int     // the most in flight seen
	refused   bool    // a request was refused for the limit
	// The window's sources (SampleFrom): the first one seen, whether
	// another was, and the sources with the most drops.
	src0    uint64
	srcSeen bool
	mixed   bool
	dropSrc [dropSources]srcDrops

	// The no-load latency: the lower quartile of the windows in est.
	est     estimate
	base    float64 // est's lower quartile, cached
	baseSE2 float64 // its squared standard error, roughly
	trusted bool

	// The estimate before an undo, while the window after it checks it.
	verify bool
	saved  estimate

	// The window before, for the elasticity of a cut.
	prevLimit, prevRTT  float64
	prevLevel           float64 // the window's mean in flight
	prevSE2             float64
	prevCut, prevQueued bool

	atMin                int     // queueing windows in a row at Min
	grew                 int     // windows in a row that grew the limit
	overAt               float64 // the limit of the last window that queued or dropped; 0 before
	faster               int     // windows in a row well below the estimate
	fasterMin, fasterSE2 float64 // the lowest latency among them
	qLimit, qRTT, qLevel float64 // the last window that queued before the estimate was trusted
	// The last cuts' experiments since the estimate was trusted: the share
	// the latency fell by and the share what was in flight fell by.
	cutFall, cutDrop [queueingCuts]float64
	cuts             int

	lastRTT float64 // the mean latency of the last window, in ns
}

const (
	adaptiveRing     = 32
	windowBaseRTTs   = 10   // a window admits for at least this many no-load latencies
	tailRTTs         = 4    // and waits this many latencies for their answers
	noiseErrors      = 3.0  // standard errors an excess must pass to count
	maxCutPerWindow  = 0.5  // a cut keeps at least this share of the limit
	startGrowth      = 1.5  // growth per window until the estimate is trusted
	stillQueueing    = 0.8  // elasticity from which a starting halving continues
	proportional     = 0.9  // elasticity of a starting growth that shows queueing throughout
	slowerUpstream   = 0.5  // elasticity below which a cut is undone
	undoableCut      = 0.75 // only a cut to this share or less is undone
	minExperiment    = 0.05 // a change of in flight smaller than this share teaches nothing
	accelerateAfter  = 6    // growing windows in a row before growth speeds up
	fasterWindows    = 3
	noisierWindow    = 4 // squared error ratio at which an older window leaves the estimate
	stuckAtMinWindow = 4
	queueingCuts     = 4 // cuts whose pooled elasticity shows an estimate that queues
	dropSources      = 4 // the sources with the most drops a window counts
)

// srcDrops is one source's drops in a window (Adaptive.dropSrc).
type srcDrops struct {
	src   uint64
	drops int
}

// ErrNotAcquired reports a Release with nothing in flight.
var ErrNotAcquired = errors.New("algo: adaptive: release without an acquire")

// NewAdaptive returns an Adaptive limit at o.Initial, or an error wrapping
// floodgate.ErrInvalidLimit if an option is out of range.
func NewAdaptive(o AdaptiveOptions) (*Adaptive, error) {
	bad := func(format string, args ...any) (*Adaptive, error) {
		return nil, fmt.Errorf("algo: adaptive: %w: "+format, append([]any{floodgate.ErrInvalidLimit}, args...)...)
	}
	switch {
	case o.Min < 0:
		return bad("min %d is negative", o.Min)
	case o.Max < 0:
		return bad("max %d is negative", o.Max)
	case o.Initial < 0:
		return bad("initial %d is negative", o.Initial)
	case o.MinSamples < 0:
		return bad("min samples %d is negative", o.MinSamples)
	case o.Window < 0:
		return bad("window %v is negative", o.Window)
	case o.Tolerance != 0 && !(o.Tolerance > 1 && o.Tolerance <= 100):
		return bad("tolerance %v is not in (1, 100]", o.Tolerance)
	case o.Backoff != 0 && !(o.Backoff > 0 && o.Backoff < 1):
		return bad("backoff %v is not in (0, 1)", o.Backoff)
	case o.Growth != 0 && !(o.Growth > 0 && o.Growth <= 1):
		return bad("growth %v is not in (0, 1]", o.Growth)
	case o.DropRatio != 0 && !(o.DropRatio > 0 && o.DropRatio <= 1):
		return bad("drop ratio %v is not in (0, 1]", o.DropRatio)
	}
	if o.Min == 0 {
		o.Min = 1
	}
	if o.Max == 0 {
		o.Max = max(1000, o.Min)
	}
	if o.Max < o.Min {
		return bad("max %d is below min %d", o.Max, o.Min)
	}
	if o.Initial == 0 {
		o.Initial = min(max(20, o.Min), o.Max)
	}
	if o.Initial < o.Min || o.Initial > o.Max {
		return bad("initial %d is outside [%d, %d]", o.Initial, o.Min, o.Max)
	}
	if o.Tolerance == 0 {
		o.Tolerance = 1.05
	}
	if o.Backoff == 0 {
		o.Backoff = 0.95
	}
	if o.Growth == 0 {
		o.Growth = 0.05
	}
	if o.Window == 0 {
		o.Window = 500 * time.Millisecond
	}
	if o.MinSamples == 0 {
		o.MinSamples = 100
	}
	if o.DropRatio == 0 {
		o.DropRatio = 0.01
	}
	return &Adaptive{o: o, limit: float64(o.Initial)}, nil
}

// Options returns the options in use, with the defaults filled in.
func (a *Adaptive) Options() AdaptiveOptions { return a.o }

// Retune puts the options o in force and keeps what the limit learnt: the
// limit (brought within o's Min and Max; o.Initial is not used), the
// estimate of the no-load latency and whether it is trusted. The window
// being measured is dropped and the next begins with the next request
// answered, so that the answers counted under the old options and limit
// never end a window under the new ones. A new Adaptive would start
// again: its first window's latency not trusted, its limit growing by half
// a window until a window queues, then halving, so a change of options
// under load would send half as many again to an upstream whose knee the
// limit had found, then cut deep. It returns an error wrapping
// floodgate.ErrInvalidLimit, changing nothing, if an option is out of
// range (as NewAdaptive).
func (a *Adaptive) Retune(o AdaptiveOptions) error {
	n, err := NewAdaptive(o)
	if err != nil {
		return err
	}
	if n.o.Min != a.o.Min {
		a.atMin = 0 // the windows in a row at the old Min
	}
	a.o = n.o
	a.limit = min(max(a.limit, float64(a.o.Min)), float64(a.o.Max))
	// A window of its own from the next answer (see sample), the limit's
	// history (the last window's latency, its cuts) kept.
	a.n, a.drops, a.sum, a.sumSq, a.level, a.peak, a.refused = 0, 0, 0, 0, 0, a.inflight, false
	a.srcSeen, a.mixed, a.dropSrc = false, false, [dropSources]srcDrops{}
	a.seen = false
	return nil
}

// Limit returns the current limit: the most requests the upstream should
// have in flight. It is always within [Min, Max].
func (a *Adaptive) Limit() int { return int(a.limit) }

// Inflight returns the requests admitted by Acquire and not yet released.
func (a *Adaptive) Inflight() int { return a.inflight }

// NoLoadLatency returns the current estimate of the upstream's latency
// without queueing, or 0 before the first window ends.
func (a *Adaptive) NoLoadLatency() time.Duration { return time.Duration(a.base) }

// Latency returns the mean latency of the last window that ended, or 0
// before the first.
func (a *Adaptive) Latency() time.Duration { return time.Duration(a.lastRTT) }

// Acquire admits a request if fewer than Limit are in flight, counting it
// until its Release.
func (a *Adaptive) Acquire() bool {
	if a.inflight >= int(a.limit) {
		a.refused = true
		return false
	}
	a.inflight++
	a.peak = max(a.peak, a.inflight)
	return true
}

// Refused tells the limit that a request was refused because of it, for
// callers that admit against Limit themselves (Acquire knows). A window in
// which the limit refused a request may grow the limit even if less than
// half of it was in flight, as under criticality tiers, whose ceilings
// keep part of the limit for the tiers above.
func (a *Adaptive) Refused() { a.refused = true }

// Release ends a request admitted by Acquire: it ended at instant now
// (Unix nanoseconds) after rtt, with outcome o. The slot is freed in every
// case; the sample is refused with floodgate.ErrTimeBackwards for a now
// before one already seen and with an error for a negative rtt. Releasing
// with nothing in flight is ErrNotAcquired and changes nothing.
func (a *Adaptive) Release(now int64, rtt time.Duration, o Outcome) error {
	if a.inflight <= 0 {
		return ErrNotAcquired
	}
	a.inflight--
	return a.sample(now, rtt, a.inflight+1, o, 0)
}

// Sample teaches the limit one request's outcome, for callers that count
// the requests in flight themselves (and admit against Limit): it ended at
// now (Unix nanoseconds) after rtt, and inflight requests were in flight
// when it was admitted, itself included. It returns
// floodgate.ErrTimeBackwards for a now before one already seen, and an
// error for a negative rtt or inflight; then it changes nothing.
func (a *Adaptive) Sample(now int64, rtt time.Duration, inflight int, o Outcome) error {
	return a.SampleFrom(now, rtt, inflight, o, 0)
}

// SampleFrom is Sample for a request of source, a name of the caller's
// choice for whoever sent it (a tenant's hash): in a window with requests
// of more than one source, the drops of the source with the most are left
// out of the window's drop ratio (see the design note). The requests of
// Sample and Release are of source 0.
func (a *Adaptive) SampleFrom(now int64, rtt time.Duration, inflight int, o Outcome, source uint64) error {
	if inflight < 0 {
		return fmt.Errorf("algo: adaptive: in flight %d is negative", inflight)
	}
	return a.sample(now, rtt, inflight, o, source)
}

func (a *Adaptive) sample(now int64, rtt time.Duration, inflight int, o Outcome, source uint64) error {
	if a.seen && now < a.last {
		return floodgate.ErrTimeBackwards
	}
	if rtt < 0 {
		return fmt.Errorf("algo: adaptive: latency %v is negative", rtt)
	}
	if !a.seen {
		// The first window begins when its first request was admitted.
		a.seen = true
		a.spanStart = math.MinInt64
		if now >= math.MinInt64+int64(rtt) {
			a.spanStart = now - int64(rtt)
		}
		a.span, a.tail = a.spanLen()
	}
	a.last = now
	// Differences of instants in uint64: exact for any now ≥ then.
	since := uint64(now) - uint64(a.spanStart) // now ≥ last ≥ spanStart
	if o == OutcomeIgnored || since < uint64(rtt) {
		// Admitted before the window began, under another limit.
		return nil
	}
	if since-uint64(rtt) >= a.span && a.n+a.drops >= a.o.MinSamples {
		// Admitted after the span: counting it would count the fast
		// answers of the late requests and not their slow ones.
		if since >= a.span+a.waitFor() {
			a.endWindow(now)
		}
		return nil
	}
	a.peak = max(a.peak, inflight)
	switch {
	case !a.srcSeen:
		a.src0, a.srcSeen = source, true
	case source != a.src0:
		a.mixed = true
	}
	if o == OutcomeDropped {
		a.drops++
		a.countDrop(source)
	} else {
		x := float64(rtt)
		a.n++
		a.sum += x
		a.sumSq += x * x
		a.level += float64(inflight)
	}
	if a.n+a.drops >= a.o.MinSamples && since >= a.span+a.waitFor() {
		a.endWindow(now)
	}
	return nil
}

// countDrop counts a drop of source in the window's slots: its own if it
// has one, else an empty one, else the least counted one, which it takes
// over with that count and one more (the space-saving count).
func (a *Adaptive) countDrop(source uint64) {
	least := 0
	for i := range a.dropSrc {
		d := &a.dropSrc[i]
		if d.drops > 0 && d.src == source {
			d.drops++
			return
		}
		if d.drops < a.dropSrc[least].drops {
			least = i
		}
	}
	d := &a.dropSrc[least]
	d.src, d.drops = source, d.drops+1
}

// countedDrops returns the window's drops and requests as its drop ratio
// counts them: all of them from one source, else without the drops of the
// source with the most.
func (a *Adaptive) countedDrops(n, drops int) (counted, total int) {
	if !a.mixed {
		return drops, n + drops
	}
	top := 0
	for _, d := range a.dropSrc {
		top = max(top, d.drops)
	}
	top = min(top, drops)
	return drops - top, n + drops - top
}

// waitFor returns how long after its span the window waits for answers:
// the tail, or four times its own mean latency if longer.
func (a *Adaptive) waitFor() uint64 {
	if a.n == 0 {
		return a.tail
	}
	return max(a.tail, uint64(min(tailRTTs*a.sum/float64(a.n), math.MaxInt64/4)))
}

// spanLen returns how long a window admits the requests it measures (at
// least Window and ten no-load latencies) and how long after that it
// waits for their answers (four latencies, of the estimate or of the last
// window, whichever is longer: all but about 2% of the answers of an
// upstream that does not queue), in ns.
func (a *Adaptive) spanLen() (span, tail uint64) {
	const most = math.MaxInt64 / 4
	span = uint64(max(float64(a.o.Window), min(windowBaseRTTs*a.base, most)))
	tail = uint64(min(tailRTTs*max(a.base, a.lastRTT), most))
	return span, tail
}

// endWindow applies the rule to the window that ends at now and starts the
// next one.
func (a *Adaptive) endWindow(now int64) {
	limit := a.limit
	n, drops, sum, sumSq, level, peak := a.n, a.drops, a.sum, a.sumSq, a.level, a.peak
	drops, total := a.countedDrops(n, drops)
	a.srcSeen, a.mixed, a.dropSrc = false, false, [dropSources]srcDrops{}
	if a.refused {
		peak = max(peak, int(limit)) // the limit was binding
	}
	a.n, a.drops, a.sum, a.sumSq, a.level, a.peak, a.refused = 0, 0, 0, 0, 0, a.inflight, false
	defer func() {
		a.spanStart = now
		a.span, a.tail = a.spanLen()
	}()

	next := limit
	queued, latencyCut := false, false
	if n > 0 {
		rtt, lv := sum/float64(n), level/float64(n)
		if lv <= 0 {
			lv = limit // a caller that does not tell
		}
		next, queued, latencyCut = a.judge(limit, lv, rtt, sumSq, n, peak)
		a.prevRTT, a.prevSE2, a.prevLevel = rtt, max(0, sumSq/float64(n)-rtt*rtt)/float64(n), lv
	}
	if drops > 0 && float64(drops) > a.o.DropRatio*float64(total) {
		next = min(next, limit*a.o.Backoff)
		a.overAt = limit
	}
	if queued {
		a.overAt = limit
	}
	next = min(max(next, float64(a.o.Min)), float64(a.o.Max))
	a.prevLimit, a.prevQueued = limit, queued
	a.prevCut = latencyCut && next < limit
	if next > limit {
		a.grew++
	} else {
		a.grew = 0
	}
	a.limit = next
}

// judge applies the rule to a window at limit whose n answers had mean
// latency rtt (and sum of squares sumSq), with level in flight on average
// at their admission and at most peak. It returns the next limit, whether
// the window queued, and whether the next limit is a cut for latency.
//
// Elasticities compare in flight, not limits: the latency follows what is
// in flight, which a limit need not fill (tiers keep reserves idle).
func (a *Adaptive) judge(limit, level, rtt, sumSq float64, n, peak int) (next float64, queued, cut bool) {
	se2 := max(0, sumSq/float64(n)-rtt*rtt) / float64(n) // squared standard error
	a.lastRTT = rtt
	if a.est.n == 0 {
		a.resetBase(rtt, se2)
	}
	if a.verify {
		// The window after an undo: if the latency rose with the restored
		// limit, it was queueing after all, and the old estimate comes
		// back.
		a.verify = false
		if level > a.prevLevel*(1+minExperiment) && a.prevRTT > 0 && (rtt/a.prevRTT-1)/(level/a.prevLevel-1) >= slowerUpstream {
			a.est = a.saved
			a.base, a.baseSE2 = a.est.quartile()
		}
	}
	r := rtt / max(a.base, 1)
	noise := noiseErrors * math.Sqrt(se2+a.baseSE2)
	if r*a.o.Tolerance < 1 && a.base-rtt > noise {
		if a.faster == 0 || rtt < a.fasterMin {
			a.fasterMin, a.fasterSE2 = rtt, se2
		}
		if a.faster++; a.faster >= fasterWindows {
			// A faster upstream: the estimate restarts from the lowest
			// of those windows, and this one is judged against it.
			a.resetBase(a.fasterMin, a.fasterSE2)
			a.faster = 0
			r = rtt / max(a.base, 1)
			noise = noiseErrors * math.Sqrt(se2+a.baseSE2)
		}
	} else {
		a.faster = 0
	}
	queued = r > a.o.Tolerance && rtt-a.base > noise
	if !queued {
		a.atMin = 0
	}
	// A cut that lowered what is in flight is an experiment: its
	// elasticity says how much of the latency was queueing.
	afterCut := a.prevCut && level < a.prevLevel*(1-minExperiment) && a.prevRTT > 0
	e := 0.0
	if afterCut {
		e = (1 - rtt/a.prevRTT) / (1 - level/a.prevLevel)
	}
	minimum := float64(a.o.Min)

	if !a.trusted {
		if queued {
			a.qLimit, a.qRTT, a.qLevel = limit, rtt, level
		}
		switch {
		case afterCut && e >= stillQueueing && limit > minimum:
			// Halving the limit halved the latency: still queueing.
			return limit * maxCutPerWindow, queued, true
		case afterCut || (queued && limit <= minimum):
			// The latency stopped following the limit (or cannot be
			// cut): this window is below the knee. The last window that
			// queued shows where the knee is.
			a.resetBase(rtt, se2)
			a.trusted, a.cuts = true, 0
			if !afterCut || a.qRTT <= 0 {
				return limit, false, false
			}
			// The knee in flight, and the limit that held about as much.
			knee := a.qLevel * rtt / a.qRTT
			return min(max(a.o.Backoff*knee*a.qLimit/a.qLevel, limit), a.qLimit), false, false
		case queued && a.prevLevel > 0 && level > a.prevLevel*(1+minExperiment) && !a.prevQueued && a.prevRTT > 0 &&
			a.risesLess(level, rtt, se2):
			// The latency rose less than the limit did across the last
			// growth: the knee lies within that step and the estimate,
			// from below it, is right. The normal cut applies.
			a.trusted, a.cuts = true, 0
			return max(limit*maxCutPerWindow, a.o.Backoff*limit/r), true, true
		case queued:
			return limit * maxCutPerWindow, true, true
		}
		a.addBase(rtt, se2)
		if 2*peak >= int(limit) {
			return max(limit*startGrowth, limit+1), false, false
		}
		return limit, false, false
	}

	undo := queued && afterCut && a.prevQueued && level <= undoableCut*a.prevLevel && e < slowerUpstream
	if afterCut && !undo && a.cutsQueue(rtt, level) {
		// The latency has fallen with what is in flight across the last
		// cuts, as if it were all queueing: the windows after the cuts
		// were above the knee, so the estimate holds queueing (learnt
		// from windows that queued). It is not trusted any more: the
		// limit halves, as at the start, until the latency stops
		// following it.
		a.trusted = false
		a.qLimit, a.qRTT, a.qLevel = limit, rtt, level
		return limit * maxCutPerWindow, false, true
	}
	switch {
	case undo:
		// The cut did not lower the latency: the upstream is slower, not
		// queueing. Undo the cut and learn the new latency; the next
		// window checks it.
		a.saved = a.est
		a.resetBase(rtt, se2)
		a.verify = true
		return a.prevLimit, false, false
	case queued && limit <= minimum:
		if a.atMin++; a.atMin >= stuckAtMinWindow {
			a.resetBase(rtt, se2)
			a.atMin = 0
			return limit, false, false
		}
		return limit, true, false
	case queued:
		return max(limit*maxCutPerWindow, a.o.Backoff*limit/r), true, true
	}
	a.addBase(rtt, se2)
	if 2*peak < int(limit) {
		return limit, false, false // not using the limit: nothing learnt about it
	}
	step := max(1, a.o.Growth*limit)
	if a.grew >= accelerateAfter && limit > a.overAt {
		step *= math.Exp2(float64(min(a.grew-accelerateAfter+1, 20)))
	}
	return limit + min(step, limit), false, false
}

// cutsQueue records the experiment of the cut before this window (level
// in flight, of mean latency rtt) and reports whether the last
// queueingCuts of them, pooled, show a latency that fell at least in
// proportion to what was in flight (elasticity 1 or more, where a cut
// that lands below the knee shows less). It then forgets them.
func (a *Adaptive) cutsQueue(rtt, level float64) bool {
	i := a.cuts % queueingCuts
	a.cutFall[i], a.cutDrop[i] = 1-rtt/a.prevRTT, 1-level/a.prevLevel
	if a.cuts++; a.cuts < queueingCuts {
		return false
	}
	var fall, drop float64
	for i := range a.cutFall {
		fall += a.cutFall[i]
		drop += a.cutDrop[i]
	}
	if fall < drop {
		return false
	}
	a.cuts = 0
	return true
}

// estimate holds the mean latencies of the last windows that did not
// queue, oldest first, with their squared standard errors.
type estimate struct {
	rtt, se2 [adaptiveRing]float64
	n        int
}

// risesLess reports whether, across the growth from the window before to
// this one (level in flight, of mean latency rtt with squared standard
// error se2), the latency rose clearly less than in proportion to what is
// in flight:
// elasticity below 0.9 and a shortfall of more than three standard errors
// of the latencies' ratio.
func (a *Adaptive) risesLess(level, rtt, se2 float64) bool {
	grow, rise := level/a.prevLevel-1, rtt/a.prevRTT-1
	rel2 := se2/(rtt*rtt) + a.prevSE2/(a.prevRTT*a.prevRTT)
	return rise < proportional*grow && grow-rise > noiseErrors*(1+rise)*math.Sqrt(rel2)
}

// resetBase makes x, with squared standard error se2, the only no-load
// latency known.
func (a *Adaptive) resetBase(x, se2 float64) {
	a.est.rtt[0], a.est.se2[0], a.est.n = x, se2, 1
	a.base, a.baseSE2 = x, se2
}

// addBase adds the mean latency of a window that did not queue (x, with
// squared standard error se2) and updates the estimate. Windows at least
// four times as noisy (in squared relative error) leave: an estimate from
// a quiet start gives way to the larger windows of a busy upstream.
func (a *Adaptive) addBase(x, se2 float64) {
	e := &a.est
	k := 0
	for i := range e.n {
		// se2[i]/rtt[i]² < noisierWindow·se2/x², without dividing.
		if e.se2[i]*x*x < noisierWindow*se2*e.rtt[i]*e.rtt[i] || se2 == 0 {
			e.rtt[k], e.se2[k] = e.rtt[i], e.se2[i]
			k++
		}
	}
	if k == adaptiveRing {
		copy(e.rtt[:], e.rtt[1:])
		copy(e.se2[:], e.se2[1:])
		k--
	}
	e.rtt[k], e.se2[k], e.n = x, se2, k+1
	a.base, a.baseSE2 = e.quartile()
}

// quartile returns the lower quartile of the windows' latencies, each
// window weighing the inverse of its squared standard error (a window of
// many requests counts more than one of few), and the quartile's squared
// standard error: about 1.86 over the sum of the weights (the variance of
// a sample quartile is about 1.86 σ²/k for k windows of variance σ²),
// never more than the mean squared error of the windows.
func (e *estimate) quartile() (q, se2 float64) {
	var idx [adaptiveRing]int8
	v := idx[:e.n]
	var total, mean float64
	for i := range v {
		v[i] = int8(i)
		total += weight(e.se2[i])
		mean += e.se2[i]
	}
	for i := 1; i < len(v); i++ { // insertion sort: 32 values, once a window
		for j := i; j > 0 && e.rtt[v[j]] < e.rtt[v[j-1]]; j-- {
			v[j], v[j-1] = v[j-1], v[j]
		}
	}
	acc := 0.0
	for _, i := range v {
		if acc += weight(e.se2[i]); acc >= total/4 {
			q = e.rtt[i]
			break
		}
	}
	return q, min(mean/float64(e.n), 1.86/total)
}

// weight is the weight of a window of squared standard error se2.
func weight(se2 float64) float64 { return 1 / max(se2, 1) }
