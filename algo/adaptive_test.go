package algo

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
)

const simSecond = int64(time.Second)

// The simulated upstream of these tests (adaptive_sim_test.go) serves c
// requests at once with 10ms of mean service time, so its best limit is c:
// the most in flight it takes without queueing, the fewest that keep it
// busy. Offered load is 3 times its capacity unless said otherwise.
const simService = 10 * time.Millisecond

func newAdaptive(t testing.TB, o AdaptiveOptions) *Adaptive {
	t.Helper()
	a, err := NewAdaptive(o)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func runSim(t testing.TB, s *sim, end int64) {
	t.Helper()
	if err := s.run(end); err != nil {
		t.Fatal(err)
	}
}

// within checks that the limit entered [lo, hi]·best within by of from and
// stayed there until to; it returns when it entered.
func within(t *testing.T, s *sim, name string, from, to int64, best int, lo, hi float64, by time.Duration) time.Duration {
	t.Helper()
	d := s.settled(from, to, lo*float64(best), hi*float64(best))
	min, max := s.between(from+int64(max(d, 0)), to)
	switch {
	case d < 0:
		t.Errorf("%s: the limit never stayed within [%.2f, %.2f]·%d; it was in [%d, %d] at the end", name, lo, hi, best, min, max)
	case d > by:
		t.Errorf("%s: the limit stayed within [%.2f, %.2f]·%d only %v after the start, want %v", name, lo, hi, best, d, by)
	}
	return d
}

// The limit converges on a stationary upstream from below and from above:
// within ±20% of the best limit within 5 simulated seconds (15 from a
// start at 1, whose first windows hold only 100 requests), and stays
// there.
func TestAdaptiveConverges(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		c, initial int
		load       float64
	}{
		{50, 1, 3}, {50, 10, 3}, {50, 150, 3}, {50, 20, 1.5},
		{200, 20, 3}, {200, 600, 1.5},
	} {
		for seed := uint64(1); seed <= 2; seed++ {
			a := newAdaptive(t, AdaptiveOptions{Initial: tc.initial})
			s := newSim(seed, a, tc.c, simService, tc.load)
			runSim(t, s, 30*simSecond)
			by := 5 * time.Second
			if tc.initial == 1 {
				by = 15 * time.Second
			}
			d := within(t, s, "converge", 0, 30*simSecond, tc.c, 0.8, 1.2, by)
			lo, hi := s.between(int64(d), 30*simSecond)
			t.Logf("c=%d initial=%d load=%v seed=%d: within ±20%% after %v, then in [%d, %d]", tc.c, tc.initial, tc.load, seed, d, lo, hi)
		}
	}
}

// The limit follows a step of the capacity: halved, it is within ±20% of
// the new best within 3 seconds; restored, back within ±20% of the old one
// within 10 seconds; and stays there. (A best limit of 100, so that the
// halved upstream's windows still hold about 2500 requests.)
func TestAdaptiveStep(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		c    int
		seed uint64
	}{{100, 1}, {100, 2}, {200, 3}} {
		a := newAdaptive(t, AdaptiveOptions{})
		s := newSim(tc.seed, a, tc.c, simService, 3)
		runSim(t, s, 30*simSecond)
		s.setServers(tc.c / 2)
		runSim(t, s, 60*simSecond)
		s.setServers(tc.c)
		runSim(t, s, 90*simSecond)
		down := within(t, s, "halved", 30*simSecond, 60*simSecond, tc.c/2, 0.8, 1.2, 3*time.Second)
		up := within(t, s, "restored", 60*simSecond, 90*simSecond, tc.c, 0.8, 1.2, 10*time.Second)
		t.Logf("c=%d seed=%d: within ±20%% %v after the halving, %v after the restore", tc.c, tc.seed, down, up)
	}
}

// A small upstream (8 workers) behind a limit that starts above its knee,
// so that the first windows already queue in the upstream's own queue:
// an estimate of the no-load latency learnt from them holds queueing, and
// the limit built on it settled at twice the knee or more. The cuts show
// it (the latency falls with what is in flight, as queueing predicts) and
// the limit finds the knee again: from every start, over the last 30 of
// 60 simulated seconds (some 40 windows after the start) the limit is on
// average within [0.75, 1.5]·8, and the estimate within 30% of the
// service time. Fed as Release does and as the gateway does (Sample with
// what was in flight at admission).
func TestAdaptiveSmallKneeFromAbove(t *testing.T) {
	t.Parallel()
	const c = 8
	for _, load := range []float64{1.5, 3} {
		for _, initial := range []int{0, 16, 32, 64} {
			for _, admission := range []bool{false, true} {
				for seed := uint64(1); seed <= 3; seed++ {
					a := newAdaptive(t, AdaptiveOptions{Initial: initial})
					s := newSim(seed, a, c, simService, load)
					if admission {
						s.withTiers(Tiers{}, 1)
					}
					runSim(t, s, 60*simSecond)
					sum, n := 0, 0
					for _, p := range s.trace {
						if p.at >= 30*simSecond {
							sum, n = sum+p.limit, n+1
						}
					}
					mean := float64(sum) / float64(n)
					lo, hi := s.between(30*simSecond, 60*simSecond)
					est := float64(a.NoLoadLatency()) / float64(simService)
					if mean < 0.75*c || mean > 1.5*c || est > 1.3 || est < 0.7 {
						t.Errorf("load %v, initial %d, admission %v, seed %d: limit %.1f on average in the last 30 s (in [%d, %d]), no-load estimate %.2f × the service time; want within [0.75, 1.5]·%d and 1 ± 0.3",
							load, initial, admission, seed, mean, lo, hi, est, c)
					}
				}
			}
		}
	}
}

// On a steady upstream the limit never dips below 70% of the best: there
// is no probing. Started at the best limit, it stays above 0.7·best for
// two simulated minutes, and above 0.8·best almost always.
func TestAdaptiveNoDips(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		c    int
		load float64
	}{{50, 3}, {50, 1.5}, {200, 3}} {
		a := newAdaptive(t, AdaptiveOptions{Initial: tc.c})
		s := newSim(7, a, tc.c, simService, tc.load)
		runSim(t, s, 120*simSecond)
		lo, hi := s.between(0, 120*simSecond)
		below := 0
		for _, p := range s.trace {
			if float64(p.limit) < 0.8*float64(tc.c) {
				below++
			}
		}
		if float64(lo) < 0.7*float64(tc.c) {
			t.Errorf("c=%d load=%v: the limit dipped to %d, below 70%% of %d", tc.c, tc.load, lo, tc.c)
		}
		if share := float64(below) / float64(len(s.trace)); share > 0.01 {
			t.Errorf("c=%d load=%v: the limit was below 80%% of the best %.1f%% of the time", tc.c, tc.load, 100*share)
		}
		t.Logf("c=%d load=%v: limit in [%d, %d] over 120 s, below 0.8·best %d of %d traced instants, goodput %.3f of capacity",
			tc.c, tc.load, lo, hi, below, len(s.trace), float64(s.served)/120/(float64(tc.c)/simService.Seconds()))
	}
}

// An upstream that becomes slower at the same concurrency (its service
// time doubles) keeps its best limit: the limit is cut for at most one
// window (the one rule that tells slower from queueing is a cut and its
// answer), then undone, and is within ±20% of the best within 3 seconds.
// When the upstream is fast again, the limit is back within 6 seconds.
func TestAdaptiveSlowerUpstream(t *testing.T) {
	t.Parallel()
	const c = 100
	for seed := uint64(1); seed <= 3; seed++ {
		a := newAdaptive(t, AdaptiveOptions{})
		s := newSim(seed, a, c, simService, 3)
		runSim(t, s, 30*simSecond)
		s.setService(2 * simService)
		runSim(t, s, 50*simSecond)
		s.setService(simService)
		runSim(t, s, 70*simSecond)
		low := time.Duration(0)
		for _, p := range s.trace {
			if p.at >= 30*simSecond && p.at < 50*simSecond && float64(p.limit) < 0.7*c {
				low += time.Duration(simTraceStep)
			}
		}
		if low > 600*time.Millisecond {
			t.Errorf("seed %d: the limit was below 70%% of the best for %v after the upstream slowed, want at most one window", seed, low)
		}
		slow := within(t, s, "slower", 30*simSecond, 50*simSecond, c, 0.8, 1.2, 3*time.Second)
		fast := within(t, s, "faster", 50*simSecond, 70*simSecond, c, 0.8, 1.2, 6*time.Second)
		t.Logf("seed %d: below 0.7·best for %v; within ±20%% %v after slowing, %v after speeding up", seed, low, slow, fast)
	}
}

// At half its capacity the upstream never queues much and the limit
// refuses nothing once it has grown past the start.
func TestAdaptiveHalfLoad(t *testing.T) {
	t.Parallel()
	a := newAdaptive(t, AdaptiveOptions{})
	s := newSim(3, a, 50, simService, 0.5)
	runSim(t, s, 5*simSecond)
	offered, admitted := s.offered, s.admitted
	runSim(t, s, 60*simSecond)
	if refused := (s.offered - offered) - (s.admitted - admitted); refused != 0 {
		t.Errorf("the limit refused %d of %d requests at half load", refused, s.offered-offered)
	}
}

// The limit never leaves [Min, Max], whatever the options and the samples:
// random options, random latencies (from 0 to hours), outcomes, gaps and
// in-flight counts, and simulated upstreams whose best limit is outside
// the bounds.
func TestAdaptiveBounds(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(11, 13))
	for i := range 300 {
		o := AdaptiveOptions{
			Min:        rng.IntN(20),
			Tolerance:  []float64{0, 1.0001, 1.05, 1.5, 3}[rng.IntN(5)],
			Backoff:    []float64{0, 0.01, 0.5, 0.95, 0.9999}[rng.IntN(5)],
			Growth:     []float64{0, 0.001, 0.05, 1}[rng.IntN(4)],
			Window:     time.Duration(rng.IntN(3)) * time.Duration(rng.Int64N(int64(time.Second))),
			MinSamples: rng.IntN(50),
			DropRatio:  []float64{0, 0.001, 0.5, 1}[rng.IntN(4)],
		}
		o.Max = o.Min + rng.IntN(200)
		if o.Max == 0 && rng.IntN(2) == 0 {
			o.Max = 1
		}
		a := newAdaptive(t, o)
		lo, hi := a.Options().Min, a.Options().Max
		check := func(step int) {
			if l := a.Limit(); l < lo || l > hi || math.IsNaN(a.limit) {
				t.Fatalf("case %d (%+v) step %d: limit %d (%v) outside [%d, %d]", i, o, step, l, a.limit, lo, hi)
			}
		}
		check(-1)
		now := rng.Int64N(1 << 62)
		for step := range 3000 {
			now += rng.Int64N(int64(50 * time.Millisecond))
			var rtt time.Duration
			switch rng.IntN(8) {
			case 0:
				rtt = 0
			case 1:
				rtt = time.Duration(rng.Int64N(int64(time.Hour)))
			default:
				rtt = time.Duration(rng.ExpFloat64() * float64(time.Duration(1+rng.IntN(4))*10*time.Millisecond) * (1 + float64(a.Limit())/10))
			}
			outcome := Outcome(rng.IntN(10) / 8) // mostly OK, some dropped
			if rng.IntN(50) == 0 {
				outcome = OutcomeIgnored
			}
			if rng.IntN(2) == 0 && a.Acquire() {
				if err := a.Release(now, rtt, outcome); err != nil {
					t.Fatal(err)
				}
			} else if err := a.Sample(now, rtt, rng.IntN(2*a.Limit()+1), outcome); err != nil {
				t.Fatal(err)
			}
			check(step)
		}
	}
	// Upstreams whose best limit (50) is above Max or below Min.
	for _, o := range []AdaptiveOptions{{Max: 20}, {Min: 100, Initial: 100}, {Min: 40, Max: 45}} {
		a := newAdaptive(t, o)
		s := newSim(5, a, 50, simService, 3)
		runSim(t, s, 30*simSecond)
		lo, hi := s.between(0, 30*simSecond)
		if lo < a.Options().Min || hi > a.Options().Max {
			t.Errorf("%+v: the limit went to [%d, %d]", o, lo, hi)
		}
	}
}

// feed gives one window: n answers of latency rtt and dropped drops,
// admitted evenly over the window's span, then one answer admitted after
// it that ends the window. It returns the limit after the window.
func feed(t *testing.T, a *Adaptive, n int, rtt time.Duration, dropped int) int {
	t.Helper()
	return feedFrom(t, a, n, rtt, dropped, func(int, bool) uint64 { return 0 })
}

// feedFrom is feed with the source of each request: src(i, dropped) for
// the i-th of the window.
func feedFrom(t *testing.T, a *Adaptive, n int, rtt time.Duration, dropped int, src func(i int, dropped bool) uint64) int {
	t.Helper()
	start := a.spanStart
	if !a.seen {
		start = 0
	}
	total := n + dropped
	step := int64(max(a.span, uint64(a.Options().Window))) / int64(total)
	for i := range total {
		o := OutcomeOK
		if i >= n {
			o = OutcomeDropped
		}
		if err := a.SampleFrom(start+int64(i)*step+int64(rtt), rtt, a.Limit(), o, src(i, o == OutcomeDropped)); err != nil {
			t.Fatal(err)
		}
	}
	end := start + int64(a.span+a.waitFor()) + int64(rtt) + 1
	if err := a.Sample(end, rtt, a.Limit(), OutcomeOK); err != nil {
		t.Fatal(err)
	}
	if a.spanStart != end {
		t.Fatalf("the window did not end")
	}
	return a.Limit()
}

// The rule, window by window, on exact latencies (no noise, so the
// queueing test is the tolerance alone).
func TestAdaptiveRule(t *testing.T) {
	a := newAdaptive(t, AdaptiveOptions{Initial: 100})
	ms := time.Millisecond
	for i, w := range []struct {
		rtt  time.Duration
		want int
		why  string
	}{
		{10 * ms, 150, "the first window sets the estimate (not trusted); growth by half"},
		{20 * ms, 75, "queueing before the estimate is trusted: halve"},
		{10 * ms, 37, "the latency halved with the limit: still queueing, halve again"},
		{10 * ms, 71, "the latency stopped following: trusted at 10ms; the last queueing window (150 at 20ms) puts the knee at 75, the limit goes to 0.95 × 75"},
		{20 * ms, 35, "twice the no-load latency: cut to 0.95 × 71.25/2, no lower than half"},
		{10 * ms, 37, "no queueing: grow by 5%"},
		{10400 * time.Microsecond, 39, "1.04 × no-load latency is within the tolerance: grow"},
		{10600 * time.Microsecond, 35, "1.06 × queues: cut to 0.95 × 39.28/1.06"},
	} {
		if got := feed(t, a, 100, w.rtt, 0); got != w.want {
			t.Fatalf("window %d (%v): limit %d, want %d: %s", i+1, w.rtt, got, w.want, w.why)
		}
	}
	if got := a.NoLoadLatency(); got != 10*ms {
		t.Errorf("no-load latency %v, want 10ms", got)
	}
}

// Retune keeps what the limit learnt: its limit and its trusted estimate
// of the no-load latency, so the next window grows by Growth, not by half
// as a new limit's first windows do; the new options are in force (a
// latency under the new tolerance does not cut), the limit is brought
// within new bounds, and options out of range change nothing.
func TestAdaptiveRetuneKeepsWhatItLearnt(t *testing.T) {
	ms := time.Millisecond
	a := newAdaptive(t, AdaptiveOptions{Initial: 100})
	for _, rtt := range []time.Duration{10 * ms, 20 * ms, 10 * ms, 10 * ms, 20 * ms, 10 * ms} {
		feed(t, a, 100, rtt, 0)
	}
	learnt := a.Limit()
	if !a.trusted || a.NoLoadLatency() != 10*ms {
		t.Fatalf("before the retune: trusted %v, no-load %v; want trusted at 10ms", a.trusted, a.NoLoadLatency())
	}
	if err := a.Retune(AdaptiveOptions{Initial: 100, Tolerance: 1.5}); err != nil {
		t.Fatal(err)
	}
	if a.Limit() != learnt || !a.trusted || a.NoLoadLatency() != 10*ms {
		t.Fatalf("after the retune: limit %d, trusted %v, no-load %v; want %d, trusted at 10ms", a.Limit(), a.trusted, a.NoLoadLatency(), learnt)
	}
	grown := feed(t, a, 100, 10*ms, 0)
	if grown < learnt+1 || grown > learnt+max(1, learnt/20)+1 {
		t.Errorf("a window at the no-load latency after the retune: limit %d → %d; want a growth by 5%% (a new limit grows by half)", learnt, grown)
	}
	if got := feed(t, a, 100, 14*ms, 0); got <= grown {
		t.Errorf("1.4 × the no-load latency under a tolerance of 1.5: limit %d → %d; want no cut", grown, got)
	}
	if err := a.Retune(AdaptiveOptions{Min: 60, Max: 80}); err != nil || a.Limit() != 60 {
		t.Errorf("a retune to min 60: %v, limit %d; want 60", err, a.Limit())
	}
	if err := a.Retune(AdaptiveOptions{Max: 20, Initial: 20}); err != nil || a.Limit() != 20 {
		t.Errorf("a retune to max 20: %v, limit %d; want 20", err, a.Limit())
	}
	before := a.Options()
	if err := a.Retune(AdaptiveOptions{Min: 5, Max: 4}); !errors.Is(err, floodgate.ErrInvalidLimit) || a.Options() != before || a.Limit() != 20 {
		t.Errorf("a retune out of range: %v, options %+v, limit %d; want ErrInvalidLimit and nothing changed", err, a.Options(), a.Limit())
	}
}

// At the start, a growth whose latency rises clearly less than the limit
// puts the knee inside the step: the estimate is trusted at once and the
// gradient cut applies, with no halving.
func TestAdaptiveStartKneeInStep(t *testing.T) {
	a := newAdaptive(t, AdaptiveOptions{Initial: 100})
	if got := feed(t, a, 100, 10*time.Millisecond, 0); got != 150 {
		t.Fatalf("limit %d after the first window, want 150", got)
	}
	// ×1.5 the limit, ×1.2 the latency: the knee is at 150/1.2 = 125, the
	// cut to 0.95 × 125 = 118.75.
	if got, want := feed(t, a, 100, 12*time.Millisecond, 0), 118; got != want || !a.trusted {
		t.Errorf("limit %d (trusted %v), want %d, trusted", got, a.trusted, want)
	}
}

// A window with more than DropRatio of its requests dropped cuts the limit
// by Backoff; one with DropRatio or less does not.
func TestAdaptiveDrops(t *testing.T) {
	a := newAdaptive(t, AdaptiveOptions{Initial: 100})
	ms := time.Millisecond
	if got := feed(t, a, 99, 10*ms, 1); got != 150 {
		t.Errorf("1%% dropped: limit %d, want 150 (growth)", got)
	}
	if got := feed(t, a, 95, 10*ms, 5); got != 142 {
		t.Errorf("5%% dropped: limit %d, want 142 (0.95 × 150)", got)
	}
	if got := feed(t, a, 0, 10*ms, 100); got != 135 {
		t.Errorf("only drops: limit %d, want 135 (0.95 × 142.5)", got)
	}
}

// The drops of one source among several do not cut the limit: an
// upstream that refuses one client (503 from its own rate limit) shows
// that client's drops alone. Every source's drops still cut, and so do a
// lone source's (it is the window's whole traffic); the sources that
// drop past the counted slots are counted, each slot over by at most a
// fourth of the drops.
func TestAdaptiveDropsOfOneSource(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		name     string
		n, drops int
		src      func(i int, dropped bool) uint64
		want     int
	}{
		{"one source of two drops, 50%", 50, 50, func(_ int, d bool) uint64 { return map[bool]uint64{false: 1, true: 2}[d] }, 150},
		{"one source of many drops 90%, the others 1%", 99, 900, func(i int, d bool) uint64 {
			if d && i < 998 {
				return 7
			}
			return uint64(i%10 + 100)
		}, 150},
		{"every source drops 5%", 95, 5, func(i int, _ bool) uint64 { return uint64(i % 5) }, 95},
		{"two sources drop 3% each", 94, 6, func(i int, d bool) uint64 {
			if d {
				return uint64(1 + i%2)
			}
			return uint64(i % 3)
		}, 95},
		{"a lone source drops 50%", 50, 50, func(int, bool) uint64 { return 9 }, 95},
		{"fifty sources drop 2 each", 900, 100, func(i int, d bool) uint64 {
			if d {
				return uint64(1000 + i%50)
			}
			return uint64(i % 50)
		}, 95},
	} {
		a := newAdaptive(t, AdaptiveOptions{Initial: 100})
		if got := feedFrom(t, a, c.n, 10*ms, c.drops, c.src); got != c.want {
			t.Errorf("%s: limit %d, want %d", c.name, got, c.want)
		}
		// The sources are the window's own: the next window starts
		// afresh.
		if a.mixed || a.srcSeen || a.dropSrc != ([dropSources]srcDrops{}) {
			t.Errorf("%s: the window's sources were kept: %v %v %v", c.name, a.mixed, a.srcSeen, a.dropSrc)
		}
	}
}

func TestAdaptiveErrors(t *testing.T) {
	a := newAdaptive(t, AdaptiveOptions{})
	if err := a.Release(0, time.Millisecond, OutcomeOK); !errors.Is(err, ErrNotAcquired) {
		t.Errorf("release with nothing in flight: %v", err)
	}
	if err := a.Sample(100, time.Millisecond, 1, OutcomeOK); err != nil {
		t.Fatal(err)
	}
	before := *a
	if err := a.Sample(99, time.Millisecond, 1, OutcomeOK); !errors.Is(err, floodgate.ErrTimeBackwards) {
		t.Errorf("time backwards: %v", err)
	}
	if err := a.Sample(200, -time.Millisecond, 1, OutcomeOK); err == nil || !strings.HasPrefix(err.Error(), "algo: adaptive: ") {
		t.Errorf("negative latency: %v", err)
	}
	if err := a.Sample(200, time.Millisecond, -1, OutcomeOK); err == nil || !strings.HasPrefix(err.Error(), "algo: adaptive: ") {
		t.Errorf("negative in flight: %v", err)
	}
	if *a != before {
		t.Error("a refused sample changed the state")
	}
	// A refused sample still frees its slot.
	if !a.Acquire() {
		t.Fatal("acquire refused")
	}
	if err := a.Release(50, time.Millisecond, OutcomeOK); !errors.Is(err, floodgate.ErrTimeBackwards) {
		t.Errorf("release back in time: %v", err)
	}
	if a.Inflight() != 0 {
		t.Errorf("in flight %d after a release refused for its instant", a.Inflight())
	}

	for _, o := range []AdaptiveOptions{
		{Min: -1}, {Max: -1}, {Initial: -1}, {MinSamples: -1}, {Window: -1},
		{Min: 10, Max: 5}, {Initial: 2000}, {Min: 5, Initial: 3},
		{Tolerance: 1}, {Tolerance: 0.5}, {Tolerance: math.NaN()}, {Tolerance: math.Inf(1)},
		{Backoff: 1}, {Backoff: -0.5}, {Backoff: math.NaN()},
		{Growth: 1.5}, {Growth: -1}, {DropRatio: 2}, {DropRatio: math.NaN()},
	} {
		_, err := NewAdaptive(o)
		if !errors.Is(err, floodgate.ErrInvalidLimit) || !strings.HasPrefix(err.Error(), "algo: adaptive: ") {
			t.Errorf("%+v: %v", o, err)
		}
	}
	a, _ = NewAdaptive(AdaptiveOptions{Min: 5000})
	if o := a.Options(); o.Max != 5000 || o.Initial != 5000 || o.Tolerance != 1.05 || o.Backoff != 0.95 ||
		o.Growth != 0.05 || o.Window != 500*time.Millisecond || o.MinSamples != 100 || o.DropRatio != 0.01 {
		t.Errorf("defaults: %+v", o)
	}
}

// An ignored outcome frees its slot and teaches nothing.
func TestAdaptiveIgnored(t *testing.T) {
	a := newAdaptive(t, AdaptiveOptions{MinSamples: 1})
	now := int64(0)
	for range 1000 {
		now += int64(time.Millisecond)
		if !a.Acquire() {
			t.Fatal("refused")
		}
		if err := a.Release(now, time.Hour, OutcomeIgnored); err != nil {
			t.Fatal(err)
		}
	}
	if a.Limit() != 20 || a.NoLoadLatency() != 0 || a.Inflight() != 0 {
		t.Errorf("after ignored outcomes: limit %d, no-load latency %v, in flight %d", a.Limit(), a.NoLoadLatency(), a.Inflight())
	}
}

func TestAdaptiveNoAllocs(t *testing.T) {
	a := newAdaptive(t, AdaptiveOptions{MinSamples: 10, Window: time.Millisecond})
	now, i := int64(0), 0
	allocs := testing.AllocsPerRun(10000, func() {
		now += int64(100 * time.Microsecond)
		i++
		if a.Acquire() {
			_ = a.Release(now, time.Duration(5+i%10)*time.Millisecond, OutcomeOK)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per request", allocs)
	}
}

// BenchmarkAdaptive measures the cost on the request path: one Acquire and
// one Release, windows closing every 100 requests.
func BenchmarkAdaptive(b *testing.B) {
	a, _ := NewAdaptive(AdaptiveOptions{MinSamples: 100, Window: time.Millisecond})
	now, i := int64(1_700_000_000)*simSecond, 0
	b.ReportAllocs()
	for b.Loop() {
		now += int64(10 * time.Microsecond)
		i++
		if a.Acquire() {
			_ = a.Release(now, time.Duration(9_000_000+i%2_000_000), OutcomeOK)
		}
	}
}

// Growth speeds up only past the limit at which the upstream last queued:
// regrowing after a cut, the limit climbs by Growth a window up to that
// limit (no doubling steps that overshoot the knee it just found and cut
// deep again), and past it speeds up after six windows, so a recovered
// upstream is still found in a few windows.
func TestAdaptiveRegrowsSlowlyToTheLastKnee(t *testing.T) {
	a := newAdaptive(t, AdaptiveOptions{Initial: 100})
	ms := time.Millisecond
	for _, rtt := range []time.Duration{10 * ms, 20 * ms, 10 * ms, 10 * ms} { // trusted at 10ms, limit 71
		feed(t, a, 100, rtt, 0)
	}
	knee := a.Limit()
	if got := feed(t, a, 100, 20*ms, 0); got != 35 {
		t.Fatalf("limit %d after a queueing window at %d, want 35", got, knee)
	}
	prev, sped := a.Limit(), false
	for i := range 40 {
		got := feed(t, a, 100, 10*ms, 0)
		step := float64(got - prev)
		if prev <= knee && step > max(1, 0.05*float64(prev))+1 {
			t.Fatalf("window %d after the cut: the limit went from %d to %d below the last knee %d, want a step of 5%%", i+1, prev, got, knee)
		}
		if prev > knee && step > 2*max(1, 0.05*float64(prev)) {
			sped = true
		}
		prev = got
	}
	if !sped {
		t.Errorf("the growth never sped up past the last knee %d (limit %d after 40 windows)", knee, prev)
	}
}

// TestAdaptiveRetuneStartsAWindow: the answers a window counted before a
// retune do not end a window under the new options: twelve drops counted
// under min_samples 12 whose span has not passed, then a retune to
// min_samples 13 and one more drop, long after: the limit stays where the
// retune put it, as a new window needs 13 answers of its own.
func TestAdaptiveRetuneStartsAWindow(t *testing.T) {
	a, err := NewAdaptive(AdaptiveOptions{Min: 1, Max: 32, Initial: 4, Window: 20 * time.Millisecond, MinSamples: 12})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 12 {
		if err := a.Sample(int64(i+1)*int64(time.Millisecond), time.Millisecond, 4, OutcomeDropped); err != nil {
			t.Fatal(err)
		}
	}
	if a.Limit() != 4 {
		t.Fatalf("limit %d before the window's span passed, want 4", a.Limit())
	}
	if err := a.Retune(AdaptiveOptions{Min: 1, Max: 3, Initial: 2, Window: 20 * time.Millisecond, MinSamples: 13}); err != nil {
		t.Fatal(err)
	}
	if err := a.Sample(int64(500*time.Millisecond), time.Millisecond, 1, OutcomeDropped); err != nil {
		t.Fatal(err)
	}
	if a.Limit() != 3 {
		t.Errorf("limit %d after a retune to max 3 and one answer, want 3: the answers counted before the retune ended a window", a.Limit())
	}
}
