package dashboard

import (
	"sync"
	"sync/atomic"

	"github.com/floodgate/floodgate/internal/percpu"
	"github.com/floodgate/floodgate/limiter"
)

// Window is how many one-second slots a series keeps: the last hour.
const Window = 3600

// MaxSeries is how many limits have a series of their own at once;
// decisions of further limits are counted under "other". A series that
// counted nothing for a Window (it shows nothing but zeros) is freed, and
// its room goes to the next limit without one.
const MaxSeries = 128

// slot is one second of one series.
type slot struct {
	decisions atomic.Uint64
	denied    atomic.Uint64
}

// series counts one limit's decisions and 429s per second. Decisions are
// counted per CPU (internal/percpu: every CPU adding to one slot's
// atomics would have them move between the CPUs' caches on every
// decision) as totals since the start; Tick moves what they grew by into
// the slot of the second that ended.
//
// A rule keeps its series on itself (ruleSeries) and checks stale before
// each decision: a limit's series idle for a Window is marked stale by
// Tick and freed by the next Tick unless a rule asks for it again
// (seriesOf) or it counts again; "other" is marked stale when a series is
// freed, so that the rules counted there ask for a series of their own.
type series struct {
	name   string
	counts *percpu.Counters // sDecisions, sDenied
	folded [2]atomic.Uint64 // the totals at the last Tick
	stale  atomic.Bool      // the rules keeping it are to ask seriesOf again

	// slots holds the seconds; nil once the series is freed, so that a
	// rule still keeping it holds only its counters. Written by Tick
	// under Recorder.mu, read by Tick and under Recorder.mu.
	slots *[Window]slot
	// last is the last second the series counted something in: written
	// by Tick, and by seriesOf before the series is in byName.
	last int64
}

// The counters of a series' counts.
const (
	sDecisions = iota
	sDenied
)

// newSeries returns an empty series.
func newSeries(name string) *series {
	return &series{name: name, counts: percpu.NewCounters(2), slots: new([Window]slot)}
}

// fold moves what the series' totals grew by since the last fold into
// slot i, and reports whether they grew. The fold is noted before the
// slot grows: a reader of the current second may miss what is being
// folded, never count it twice.
func (s *series) fold(i int64) bool {
	d := grown(s.counts, sDecisions, &s.folded[sDecisions])
	x := grown(s.counts, sDenied, &s.folded[sDenied])
	s.slots[i].decisions.Add(d)
	s.slots[i].denied.Add(x)
	return d != 0 || x != 0
}

// grown returns what counter c of cs grew by since folded, and moves
// folded to its total.
func grown(cs *percpu.Counters, c int, folded *atomic.Uint64) uint64 {
	total := cs.Load(c)
	return total - folded.Swap(total)
}

// current returns what the series counted since the last fold (in the
// current second).
func (s *series) current() Point {
	return Point{Decisions: s.counts.Load(sDecisions) - s.folded[sDecisions].Load(),
		Denied: s.counts.Load(sDenied) - s.folded[sDenied].Load()}
}

// health counts the store's answers per second: the sum and number of
// latencies and the degraded decisions per CPU (hLatencySum, hLatencyN,
// hDegraded: totals, folded into the slots by Tick, as a series' are),
// the largest latency in the slot of its second.
type health struct {
	counts     *percpu.Counters
	folded     [3]atomic.Uint64
	latencySum [Window]atomic.Int64 // ns
	latencyN   [Window]atomic.Uint64
	latencyMax [Window]atomic.Int64
	degraded   [Window]atomic.Uint64
}

// The counters of health.counts.
const (
	hLatencySum = iota
	hLatencyN
	hDegraded
)

// fold moves what the health totals grew by into slot i.
func (h *health) fold(i int64) {
	h.latencySum[i].Add(int64(grown(h.counts, hLatencySum, &h.folded[hLatencySum])))
	h.latencyN[i].Add(grown(h.counts, hLatencyN, &h.folded[hLatencyN]))
	h.degraded[i].Add(grown(h.counts, hDegraded, &h.folded[hDegraded]))
}

// Recorder is the limiter.Observer that feeds the dashboard.
type Recorder struct {
	// sec is the current Unix second, advanced by Tick: decisions read it
	// instead of the clock.
	sec    atomic.Int64
	stamps [Window]atomic.Int64 // the second each slot holds

	total   *series
	health  health
	hitters *Hitters

	// mu guards byName, overload, inUse and the slots pointers of the
	// series (Tick, their one writer, reads them without it).
	mu       sync.Mutex
	byName   map[string]*series         // at most MaxSeries
	overload map[string]*overloadSeries // by route
	other    *series
	inUse    bool // other has counted something

	// refused holds each route's answers refused before any limit, by
	// route; copied on write under mu.
	refused atomic.Pointer[map[string]*refusalSeries]
}

// NewRecorder returns a recorder whose clock starts at the Unix second
// now; call Tick at least every second.
func NewRecorder(now int64) *Recorder {
	r := &Recorder{byName: map[string]*series{}, overload: map[string]*overloadSeries{}, hitters: NewHitters(DefaultHitters)}
	r.total = newSeries("all")
	r.other = newSeries("other")
	r.health.counts = percpu.NewCounters(3)
	r.refused.Store(&map[string]*refusalSeries{})
	r.sec.Store(now)
	r.stamps[now%Window].Store(now)
	return r
}

// Tick advances the recorder's clock to the Unix second now: what was
// counted since the last Tick goes to the second that ends (the one the
// clock was at), and the slots of the seconds it enters are cleared. A
// limit's series that counted nothing for a Window is freed (see sweep).
// Call it from one goroutine, at least every second.
func (r *Recorder) Tick(now int64) {
	old := r.sec.Load()
	if now <= old {
		return
	}
	from := old + 1
	if now-from >= Window {
		from = now - Window + 1
	}
	r.mu.Lock()
	all := make([]*series, 0, len(r.byName)+2)
	all = append(all, r.total, r.other)
	for _, s := range r.byName {
		all = append(all, s)
	}
	r.mu.Unlock()
	for _, s := range all {
		if s.fold(old % Window) {
			s.last = old
		}
	}
	r.health.fold(old % Window)
	for t := from; t <= now; t++ {
		i := t % Window
		for _, s := range all {
			s.slots[i].decisions.Store(0)
			s.slots[i].denied.Store(0)
		}
		r.health.latencySum[i].Store(0)
		r.health.latencyN[i].Store(0)
		r.health.latencyMax[i].Store(0)
		r.health.degraded[i].Store(0)
		r.clearRefusals(i)
		r.stamps[i].Store(t)
	}
	r.sec.Store(now)
	r.sweep(now)
}

// sweep frees the limits' series that counted nothing in the Window
// ending at now. It takes two Ticks, so that a decision is not lost to a
// freed series: an idle series is marked stale, and a rule keeping it
// asks seriesOf, which unmarks it; one still marked and idle at the next
// sweep leaves byName and lets its slots go (a decision that saw it
// unmarked has been folded by then, unless it was held up for a whole
// second between that look and its count: then it is in "all" only).
// Room made marks "other" stale, so that the rules counted there ask for
// a series of their own. Only Tick calls it.
func (r *Recorder) sweep(now int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	freed := false
	for name, s := range r.byName {
		switch {
		case s.last > now-Window:
			if s.stale.Load() {
				s.stale.Store(false)
			}
		case !s.stale.Load():
			s.stale.Store(true)
		default:
			delete(r.byName, name)
			s.slots = nil
			freed = true
		}
	}
	if freed {
		r.other.stale.Store(true)
	}
}

// Now returns the recorder's current second.
func (r *Recorder) Now() int64 { return r.sec.Load() }

// ObserveDecision counts one decision: for every hit's limit, and as a 429
// of the binding limit when denied. Peeks are not counted.
func (r *Recorder) ObserveDecision(req *limiter.Request, res *limiter.Result) {
	if req.Peek {
		return
	}
	slot := percpu.Slot()
	r.total.counts.Add(slot, sDecisions, 1)
	if !res.Allowed {
		r.total.counts.Add(slot, sDenied, 1)
	}
	if res.Degraded != limiter.NotDegraded {
		r.health.counts.Add(slot, hDegraded, 1)
	}
	if lat := int64(res.StoreLatency); lat > 0 {
		r.health.counts.Add(slot, hLatencySum, uint64(lat))
		r.health.counts.Add(slot, hLatencyN, 1)
		mx := &r.health.latencyMax[r.sec.Load()%Window]
		for m := mx.Load(); lat > m && !mx.CompareAndSwap(m, lat); m = mx.Load() {
		}
	}
	for h := range req.Hits {
		hit := &req.Hits[h]
		s := r.ruleSeries(hit.Rule)
		s.counts.Add(slot, sDecisions, 1)
		if !res.Allowed && res.Binding == h {
			s.counts.Add(slot, sDenied, 1)
			r.hitters.addAt(slot, s.name, hit.Key)
		}
	}
}

// seriesSlot keeps, on each rule, its series (a *ruleSeries) in the first
// Recorder that counted it.
var seriesSlot = limiter.NewSlot()

// ruleSeries is a rule's series in one Recorder.
type ruleSeries struct {
	r *Recorder
	s atomic.Pointer[series]
}

// ruleSeries returns the series of a rule, kept on the rule
// (limiter.Rule.Prepared) so that it goes with it; a second Recorder
// counting the same rule finds its series by name. A series marked stale
// is replaced by the one seriesOf finds or makes.
func (r *Recorder) ruleSeries(rule *limiter.Rule) *series {
	rs := rule.Prepared(seriesSlot, func(rule *limiter.Rule) any {
		rs := &ruleSeries{r: r}
		rs.s.Store(r.seriesOf(rule))
		return rs
	}).(*ruleSeries)
	if rs.r != r {
		return r.seriesOf(rule)
	}
	s := rs.s.Load()
	if s.stale.Load() {
		s = r.seriesOf(rule)
		rs.s.Store(s)
	}
	return s
}

// seriesOf finds or makes the series of a rule's name (the slow path: once
// per rule, and once after its series was marked stale). A series found
// marked is unmarked: it is in use again. While MaxSeries series are
// live, a new name gets "other".
func (r *Recorder) seriesOf(rule *limiter.Rule) *series {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.byName[rule.Name()]; s != nil {
		if s.stale.Load() {
			s.stale.Store(false)
		}
		return s
	}
	if len(r.byName) >= MaxSeries {
		r.inUse = true
		if r.other.stale.Load() {
			r.other.stale.Store(false) // only sweep makes room, and marks it again
		}
		return r.other
	}
	s := newSeries(rule.Name())
	s.last = r.sec.Load()
	r.byName[s.name] = s
	return s
}

// Point is one second of a series.
type Point struct {
	Decisions uint64 `json:"d"`
	Denied    uint64 `json:"x"`
}

// Counts returns, for every series, the points of the seconds from since+1
// to until (at most the last hour), oldest first, in the map under the
// limit's name ("all" for every decision). The current second's point is
// what was counted so far.
func (r *Recorder) Counts(since, until int64) map[string][]Point {
	type view struct {
		s     *series
		slots *[Window]slot
	}
	now := r.sec.Load()
	r.mu.Lock()
	all := make([]view, 0, len(r.byName)+2)
	all = append(all, view{r.total, r.total.slots})
	for _, s := range r.byName {
		all = append(all, view{s, s.slots})
	}
	if r.inUse {
		all = append(all, view{r.other, r.other.slots})
	}
	r.mu.Unlock()
	from := max(since+1, until-Window+1)
	out := make(map[string][]Point, len(all))
	for _, v := range all {
		s := v.s
		pts := make([]Point, 0, max(until-from+1, 0))
		for t := from; t <= until; t++ {
			i := t % Window
			if r.stamps[i].Load() != t {
				pts = append(pts, Point{})
				continue
			}
			p := Point{Decisions: v.slots[i].decisions.Load(), Denied: v.slots[i].denied.Load()}
			if t == now {
				c := s.current()
				p.Decisions += c.Decisions
				p.Denied += c.Denied
			}
			pts = append(pts, p)
		}
		out[s.name] = pts
	}
	return out
}

// Health is the store's health over some seconds.
type Health struct {
	// LatencyAvgMs and LatencyMaxMs are of the store calls (0 for the
	// memory store, which is not timed).
	LatencyAvgMs float64 `json:"latency_avg_ms"`
	LatencyMaxMs float64 `json:"latency_max_ms"`
	// Calls is how many store calls were timed.
	Calls uint64 `json:"calls"`
	// Degraded counts decisions made by the failure policy.
	Degraded uint64 `json:"degraded"`
}

// HealthOver sums the store's health over the seconds from since+1 to
// until; the current second is not in it until it ends.
func (r *Recorder) HealthOver(since, until int64) Health {
	var h Health
	var sum, mx int64
	for t := max(since+1, until-Window+1); t <= until; t++ {
		i := t % Window
		if r.stamps[i].Load() != t {
			continue
		}
		sum += r.health.latencySum[i].Load()
		h.Calls += r.health.latencyN[i].Load()
		mx = max(mx, r.health.latencyMax[i].Load())
		h.Degraded += r.health.degraded[i].Load()
	}
	if h.Calls > 0 {
		h.LatencyAvgMs = float64(sum) / float64(h.Calls) / 1e6
	}
	h.LatencyMaxMs = float64(mx) / 1e6
	return h
}

// Hitters returns the recorder's heavy-hitters sketch.
func (r *Recorder) Hitters() *Hitters { return r.hitters }

// HealthPoint is the store's health in one second.
type HealthPoint struct {
	// AvgMs is the mean latency of the timed store calls (0 when none).
	AvgMs float64 `json:"avg_ms"`
	// Degraded counts decisions made by the failure policy.
	Degraded uint64 `json:"degraded"`
}

// HealthPoints returns the store's health for each second from since+1 to
// until, oldest first (the current second's once it ends).
func (r *Recorder) HealthPoints(since, until int64) []HealthPoint {
	from := max(since+1, until-Window+1)
	out := make([]HealthPoint, 0, max(until-from+1, 0))
	for t := from; t <= until; t++ {
		i := t % Window
		var p HealthPoint
		if r.stamps[i].Load() == t {
			if n := r.health.latencyN[i].Load(); n > 0 {
				p.AvgMs = float64(r.health.latencySum[i].Load()) / float64(n) / 1e6
			}
			p.Degraded = r.health.degraded[i].Load()
		}
		out = append(out, p)
	}
	return out
}
