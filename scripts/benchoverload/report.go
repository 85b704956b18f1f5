package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

var nan = math.NaN()

// capStep sets the upstream's active workers at an offset into a case.
type capStep struct {
	at      time.Duration
	workers int
}

// caseSpec is one case: its load, how long it runs, and when the
// upstream's capacity changes.
type caseSpec struct {
	name     string
	duration time.Duration
	warmup   time.Duration // left out of the case's totals
	tenants  []string
	streams  []stream
	schedule []capStep // from 0 on; empty: all workers throughout
	heavy    int       // the heavy tenant's index, or -1
}

// workersAt is the number of active workers at t (all when the schedule
// does not say).
func (c *caseSpec) workersAt(t time.Duration, all int) int {
	w := all
	for _, s := range c.schedule {
		if s.at <= t {
			w = s.workers
		}
	}
	return w
}

// offered is the case's offered load in requests a second.
func (c *caseSpec) offered() float64 {
	var r float64
	for _, s := range c.streams {
		r += s.rate
	}
	return r
}

// caseResult is one case run with one configuration.
type caseResult struct {
	spec    *caseSpec
	config  string
	recs    []record
	samples []sample
	shedBy  map[string]float64 // floodgate_overload_shed_total at the end
	lag     time.Duration      // the most a request left after its instant
}

// calibration is what the bench measured before the cases.
type calibration struct {
	workers     int
	service     time.Duration // nominal
	meanService time.Duration // measured
	p50, p99    time.Duration // no-load latency through the gateway
	samples     int
}

// capacity is the upstream's capacity with all workers, in requests a
// second.
func (c *calibration) capacity() float64 {
	return float64(c.workers) / c.meanService.Seconds()
}

// capacityAt is the capacity with w workers.
func (c *calibration) capacityAt(w int) float64 {
	return float64(w) / c.meanService.Seconds()
}

// objective is the latency within which a 2xx answer counts as goodput.
func (c *calibration) objective() time.Duration { return 4 * c.p99 }

// summary is a case's totals over a window.
type summary struct {
	seconds                        float64
	sent, unsent, ok, good         int
	shed, shedNoRetry              int
	timeouts, upstreamFull, other  int
	sentByTier, okByTier, shedTier [numTiers]int
	sentByTenant, goodByTenant     []int
	shedByTenant                   []int
	p50, p99                       time.Duration // of admitted requests
	admitted                       int           // requests whose latency p50 and p99 count
}

// goodput is good answers a second.
func (s *summary) goodput() float64 { return float64(s.good) / s.seconds }

// percentile is the nearest-rank p-quantile (0 < p ≤ 1) of sorted, or 0
// when it is empty.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// summarize totals the records sent in [from, to). A good answer is a 2xx
// within objective. The latency of admitted requests (p50, p99) is that of
// the requests the gateway did not refuse, answered or given up after the
// timeout, but for those the upstream refused at once because its queue
// was full: counted, they would make an upstream in collapse look fast.
func summarize(recs []record, from, to, objective time.Duration, tenants int) summary {
	s := summary{
		seconds:      (to - from).Seconds(),
		sentByTenant: make([]int, tenants),
		goodByTenant: make([]int, tenants),
		shedByTenant: make([]int, tenants),
	}
	var lat []time.Duration
	for i := range recs {
		r := &recs[i]
		if r.sent < from || r.sent >= to {
			continue
		}
		if r.unsent {
			s.unsent++
			continue
		}
		s.sent++
		s.sentByTier[r.tier]++
		s.sentByTenant[r.tenant]++
		switch {
		case r.shed():
			s.shed++
			s.shedTier[r.tier]++
			s.shedByTenant[r.tenant]++
			if !r.retry {
				s.shedNoRetry++
			}
			continue
		case r.ok():
			s.ok++
			s.okByTier[r.tier]++
			if r.latency <= objective {
				s.good++
				s.goodByTenant[r.tenant]++
			}
		case r.status == 0:
			s.timeouts++
		case r.upstream && r.status == 503:
			s.upstreamFull++
			continue
		default:
			s.other++
		}
		lat = append(lat, r.latency)
	}
	slices.Sort(lat)
	s.admitted = len(lat)
	s.p50 = percentile(lat, 0.50)
	s.p99 = percentile(lat, 0.99)
	return s
}

// perSecond gives, for each whole second of d, the good answers among the
// requests sent in it and the p99 latency of those admitted, as summarize
// counts it (NaN when none was).
func perSecond(recs []record, d, objective time.Duration) (goodput, p99 []float64) {
	n := int(d / time.Second)
	goodput = make([]float64, n)
	p99 = make([]float64, n)
	lat := make([][]time.Duration, n)
	for i := range recs {
		r := &recs[i]
		k := int(r.sent / time.Second)
		if r.unsent || k < 0 || k >= n || r.shed() || (r.upstream && r.status == 503) {
			continue
		}
		lat[k] = append(lat[k], r.latency)
		if r.ok() && r.latency <= objective {
			goodput[k]++
		}
	}
	for k := range n {
		if len(lat[k]) == 0 {
			p99[k] = nan
			continue
		}
		slices.Sort(lat[k])
		p99[k] = ms(percentile(lat[k], 0.99))
	}
	return goodput, p99
}

// settle is how long after from the limit took to come within best×(1±tol)
// and stay there until to: the first sample from which on every sample
// before to is within. ok is false when the last sample is outside.
func settle(samples []sample, from, to time.Duration, best, tol float64) (time.Duration, bool) {
	lo, hi := best*(1-tol), best*(1+tol)
	var at time.Duration
	in := false
	for _, s := range samples {
		if s.at < from || s.at >= to || math.IsNaN(s.limit) {
			continue
		}
		within := s.limit >= lo && s.limit <= hi
		switch {
		case within && !in:
			at, in = s.at, true
		case !within:
			in = false
		}
	}
	if !in {
		return 0, false
	}
	return at - from, true
}

// minAfterReach is the lowest limit in [from, to) from the first sample
// at or above level on; reached is false when no sample got there.
func minAfterReach(samples []sample, from, to time.Duration, level float64) (low float64, reached bool) {
	low = math.Inf(1)
	for _, s := range samples {
		if s.at < from || s.at >= to || math.IsNaN(s.limit) {
			continue
		}
		if !reached && s.limit >= level {
			reached = true
		}
		if reached {
			low = min(low, s.limit)
		}
	}
	return low, reached
}

// meanLimit is the mean limit over the samples in [from, to), or NaN.
func meanLimit(samples []sample, from, to time.Duration) float64 {
	var sum float64
	n := 0
	for _, s := range samples {
		if s.at >= from && s.at < to && !math.IsNaN(s.limit) {
			sum += s.limit
			n++
		}
	}
	if n == 0 {
		return nan
	}
	return sum / float64(n)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// results are a whole run.
type results struct {
	cal   calibration
	cases []*caseResult
	// tolerance for the adaptive limit after a step, and the floor on a
	// steady upstream, as fractions of the best limit.
	tol, floor float64
	settleMax  time.Duration
	warmup     time.Duration // left out of the load and tenant cases' totals
}

func (r *results) find(name, config string) *caseResult {
	for _, c := range r.cases {
		if c.spec.name == name && c.config == config {
			return c
		}
	}
	return nil
}

// window is the part of a case its totals count.
func window(c *caseResult) (time.Duration, time.Duration) {
	return c.spec.warmup, c.spec.duration
}

// meanCapacity is the upstream's mean capacity over [from, to) of c.
func (r *results) meanCapacity(c *caseSpec, from, to time.Duration) float64 {
	var sum float64
	n := 0
	for t := from; t < to; t += 100 * time.Millisecond {
		sum += r.cal.capacityAt(c.workersAt(t, r.cal.workers))
		n++
	}
	if n == 0 {
		return r.cal.capacity()
	}
	return sum / float64(n)
}

func (r *results) summary(c *caseResult) summary {
	from, to := window(c)
	return summarize(c.recs, from, to, r.cal.objective(), len(c.spec.tenants))
}

// goal is one of the goals, checked for one configuration.
type goal struct {
	what, config, measured string
	met                    bool
}

// goals checks the goals on what the run measured; a goal whose
// case did not run is left out.
func (r *results) goals() []goal {
	var out []goal
	noLoad := r.cal.p99
	for _, cfg := range []string{configFixed, configAdaptive, configNone} {
		c := r.find("3x", cfg)
		if c == nil {
			continue
		}
		s := r.summary(c)
		from, to := window(c)
		frac := s.goodput() / r.meanCapacity(c.spec, from, to)
		out = append(out, goal{"3x: goodput ≥ 90% of capacity", cfg, pct(frac), frac >= 0.9})
		out = append(out, goal{"3x: admitted p99 ≤ 2× no-load p99", cfg,
			fmt.Sprintf("%.0f ms (%.1f×)", ms(s.p99), float64(s.p99)/float64(noLoad)), s.p99 <= 2*noLoad})
	}
	if c := r.find("step", configAdaptive); c != nil {
		half := c.spec.schedule
		if len(half) >= 2 {
			for i, st := range half {
				end := c.spec.duration
				if i+1 < len(half) {
					end = half[i+1].at
				}
				if st.at == 0 {
					continue
				}
				d, ok := settle(c.samples, st.at, end, float64(st.workers), r.tol)
				what := fmt.Sprintf("step: limit within ±%.0f%% of %d within %s of the change at %s", r.tol*100, st.workers, r.settleMax, st.at)
				m := "never"
				if ok {
					m = fmt.Sprintf("%.1f s", d.Seconds())
				}
				out = append(out, goal{what, configAdaptive, m, ok && d <= r.settleMax})
			}
		}
	}
	var lows []string
	steadyMet, steadyRan := true, false
	for _, name := range []string{"1x", "2x", "3x", "step"} {
		c := r.find(name, configAdaptive)
		if c == nil {
			continue
		}
		// The step case is steady until its first change.
		end := c.spec.duration
		for _, st := range c.spec.schedule {
			if st.at > 0 {
				end = st.at
				name += " (before the halving)"
				break
			}
		}
		steadyRan = true
		best := float64(r.cal.workers)
		low, reached := minAfterReach(c.samples, 0, end, r.floor*best)
		switch {
		case math.IsNaN(meanLimit(c.samples, 0, end)):
			lows = append(lows, name+": no floodgate_overload_limit")
			steadyMet = false
		case !reached:
			lows = append(lows, name+": never reached")
			steadyMet = false
		default:
			lows = append(lows, fmt.Sprintf("%s: min %.0f", name, low))
			if low < r.floor*best {
				steadyMet = false
			}
		}
	}
	if steadyRan {
		out = append(out, goal{fmt.Sprintf("steady: limit never below %.0f%% of %d once there", r.floor*100, r.cal.workers),
			configAdaptive, strings.Join(lows, ", "), steadyMet})
	}
	for _, cfg := range []string{configFixed, configAdaptive, configNone} {
		c := r.find("2x", cfg)
		if c == nil {
			continue
		}
		s := r.summary(c)
		crit := frac(s.okByTier[tierCritical], s.sentByTier[tierCritical])
		out = append(out, goal{"2x: critical succeed ≥ 99.9%", cfg, pct(crit), crit >= 0.999})
		lowest := lowestTier(s.sentByTier)
		higher := 0
		for t := range lowest {
			higher += s.shedTier[t]
		}
		m := fmt.Sprintf("%d of %d refusals above %s", higher, s.shed, tierNames[lowest])
		if s.shed == 0 {
			m = "no refusals"
		}
		out = append(out, goal{"2x: every refusal in the lowest tier with traffic", cfg, m, higher == 0})
	}
	for _, cfg := range []string{configFixed, configAdaptive, configNone} {
		alone, heavy := r.find("tenant-alone", cfg), r.find("tenant-heavy", cfg)
		if alone == nil || heavy == nil {
			continue
		}
		a, h := r.othersGoodput(alone), r.othersGoodput(heavy)
		ratio := h / a
		out = append(out, goal{"tenant: others' goodput within 10% of alone", cfg,
			fmt.Sprintf("%.0f/s vs %.0f/s alone (%s)", h, a, pct(ratio)), ratio >= 0.9})
	}
	return out
}

// othersGoodput is the goodput of every tenant but the heavy one.
func (r *results) othersGoodput(c *caseResult) float64 {
	s := r.summary(c)
	good := 0
	for i, g := range s.goodByTenant {
		if i != c.spec.heavy {
			good += g
		}
	}
	return float64(good) / s.seconds
}

// lowestTier is the lowest tier that sent anything.
func lowestTier(sent [numTiers]int) int {
	for t := numTiers - 1; t > 0; t-- {
		if sent[t] > 0 {
			return t
		}
	}
	return 0
}

func frac(a, b int) float64 {
	if b == 0 {
		return nan
	}
	return float64(a) / float64(b)
}

func pct(f float64) string {
	if math.IsNaN(f) {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", f*100)
}

// writeReport writes the run's tables in Markdown.
func (r *results) writeReport(w io.Writer) {
	cal := &r.cal
	fmt.Fprintf(w, "Upstream: %d workers × %s service time (measured %.1f ms), capacity %.0f requests/s. "+
		"No-load latency through the gateway (%d requests at a fifth of capacity): p50 %.1f ms, p99 %.1f ms; "+
		"objective (4× no-load p99) %.0f ms.\n\n",
		cal.workers, cal.service, ms(cal.meanService), cal.capacity(), cal.samples, ms(cal.p50), ms(cal.p99), ms(cal.objective()))

	fmt.Fprintf(w, "Totals leave out the first %s of the load and tenant cases. p50 and p99 are of the requests the gateway admitted, "+
		"answered or given up after the timeout (the upstream's immediate 503s when its queue is full are left out); "+
		"refused: the gateway's own 503s.\n\n", r.warmup)
	fmt.Fprintln(w, "| case | config | offered/s | goodput/s | of capacity | p50 ms | p99 ms | refused (crit/def/shed) | by tenant | critical ok | timeouts | upstream full |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, c := range r.cases {
		s := r.summary(c)
		from, to := window(c)
		capa := r.meanCapacity(c.spec, from, to)
		var byTenant []string
		for i, n := range s.shedByTenant {
			byTenant = append(byTenant, fmt.Sprintf("%s %d", c.spec.tenants[i], n))
		}
		fmt.Fprintf(w, "| %s | %s | %.0f | %.0f | %s | %.0f | %.0f | %d (%d/%d/%d) | %s | %s | %d | %d |\n",
			c.spec.name, c.config, c.spec.offered(), s.goodput(), pct(s.goodput()/capa), ms(s.p50), ms(s.p99),
			s.shed, s.shedTier[0], s.shedTier[1], s.shedTier[2], strings.Join(byTenant, ", "),
			pct(frac(s.okByTier[tierCritical], s.sentByTier[tierCritical])), s.timeouts, s.upstreamFull)
		if s.unsent > 0 || s.shedNoRetry > 0 {
			fmt.Fprintf(w, "|  | (%d not sent: the generator had too many in flight; %d refusals without Retry-After) |||||||||||\n", s.unsent, s.shedNoRetry)
		}
	}
	fmt.Fprintln(w)
	var lags []string
	for _, c := range r.cases {
		if c.lag > 20*time.Millisecond {
			lags = append(lags, fmt.Sprintf("%s %s %.0f ms", c.spec.name, c.config, ms(c.lag)))
		}
	}
	if len(lags) > 0 {
		fmt.Fprintf(w, "The generator left requests late (the most, where over 20 ms): %s.\n\n", strings.Join(lags, ", "))
	}

	var reasons []string
	for _, c := range r.cases {
		if by := shedReasons(c.shedBy); by != "" {
			reasons = append(reasons, fmt.Sprintf("| %s | %s | %s |", c.spec.name, c.config, by))
		}
	}
	if len(reasons) > 0 {
		fmt.Fprintln(w, "| case | config | refusals by reason and tier over the whole case, warm-up included (floodgate_overload_shed_total) |")
		fmt.Fprintln(w, "|---|---|---|")
		for _, l := range reasons {
			fmt.Fprintln(w, l)
		}
		fmt.Fprintln(w)
	}

	var limitRows []string
	for _, c := range r.cases {
		if c.config == configNone {
			continue
		}
		from, to := window(c)
		if len(c.spec.schedule) > 1 {
			var phases []string
			for i, st := range c.spec.schedule {
				end := c.spec.duration
				if i+1 < len(c.spec.schedule) {
					end = c.spec.schedule[i+1].at
				}
				m := "-"
				if v := meanLimit(c.samples, st.at, end); !math.IsNaN(v) {
					m = fmt.Sprintf("%.1f", v)
				}
				phases = append(phases, fmt.Sprintf("%s (best %d)", m, st.workers))
			}
			limitRows = append(limitRows, fmt.Sprintf("| %s | %s | %s |", c.spec.name, c.config, strings.Join(phases, " → ")))
			continue
		}
		low, reached := minAfterReach(c.samples, 0, c.spec.duration, r.floor*float64(cal.workers))
		lowS := "never reached"
		if reached {
			lowS = fmt.Sprintf("min %.0f once at %.0f%%", low, r.floor*100)
		}
		mean := meanLimit(c.samples, from, to)
		if math.IsNaN(mean) {
			limitRows = append(limitRows, fmt.Sprintf("| %s | %s | no floodgate_overload_limit |", c.spec.name, c.config))
			continue
		}
		limitRows = append(limitRows, fmt.Sprintf("| %s | %s | %.1f (best %d), %s |", c.spec.name, c.config, mean, cal.workers, lowS))
	}
	if len(limitRows) > 0 {
		fmt.Fprintln(w, "| case | config | mean limit (scraped every 250 ms) |")
		fmt.Fprintln(w, "|---|---|---|")
		for _, l := range limitRows {
			fmt.Fprintln(w, l)
		}
		fmt.Fprintln(w)
	}

	gs := r.goals()
	if len(gs) > 0 {
		fmt.Fprintln(w, "| goal | config | measured | met |")
		fmt.Fprintln(w, "|---|---|---|---|")
		for _, g := range gs {
			met := "no"
			if g.met {
				met = "yes"
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s |\n", g.what, g.config, g.measured, met)
		}
	}
}

// shedReasons sums floodgate_overload_shed_total by reason and tier:
// "reason (tier) n, ...", in a stable order; "" when nothing was shed.
func shedReasons(m map[string]float64) string {
	sums := map[string]float64{}
	for k, v := range m {
		if v == 0 || !strings.HasPrefix(k, "floodgate_overload_shed_total{") {
			continue
		}
		sums[fmt.Sprintf("%s (%s)", label(k, "reason"), label(k, "tier"))] += v
	}
	keys := make([]string, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []string
	for _, k := range keys {
		out = append(out, fmt.Sprintf("%s %.0f", k, sums[k]))
	}
	return strings.Join(out, ", ")
}

// label is the value of label name in a sample's name{labels}, or "".
func label(sample, name string) string {
	for from := 0; ; {
		i := strings.Index(sample[from:], name+`="`)
		if i < 0 {
			return ""
		}
		i += from
		if i > 0 && (sample[i-1] == '{' || sample[i-1] == ',') {
			v := sample[i+len(name)+2:]
			if j := strings.IndexByte(v, '"'); j >= 0 {
				return v[:j]
			}
			return ""
		}
		from = i + 1
	}
}
