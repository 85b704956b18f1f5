package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/internal/percpu"
)

// The series counted on every request (decisions, 429s, the latencies,
// the upstreams' statuses) count per CPU (internal/percpu): a Prometheus
// counter or histogram is one set of atomics every CPU adds to, and on two
// or more CPUs each add first has to fetch the cache line from the CPU
// that added last. A family of such series is its Prometheus vector, for
// the series made the usual way and for the family's description, and
// beside it the series that count per CPU, made into constant metrics at
// each scrape.

// family is a vector whose series may also count per CPU.
type family struct {
	vec  prometheus.Collector // the usual series, and the description
	desc *prometheus.Desc

	mu       sync.Mutex // guards counters and hists
	counters []perCPUCounter
	hists    []*perCPUHistogram
}

// perCPUCounter is a counter series: counter i of cs.
type perCPUCounter struct {
	labels []string
	cs     *percpu.Counters
	i      int
}

// newFamily wraps vec, a *prometheus.CounterVec or *HistogramVec.
func newFamily(vec prometheus.Collector) *family {
	ch := make(chan *prometheus.Desc, 1)
	vec.Describe(ch)
	return &family{vec: vec, desc: <-ch}
}

// counter adds a counter series of the label values, counting in counter
// i of cs. A label set is given to one series only.
func (f *family) counter(cs *percpu.Counters, i int, labels ...string) {
	f.mu.Lock()
	f.counters = append(f.counters, perCPUCounter{labels: labels, cs: cs, i: i})
	f.mu.Unlock()
}

// histogram adds a histogram series of the label values.
func (f *family) histogram(buckets []float64, labels ...string) *perCPUHistogram {
	h := &perCPUHistogram{labels: labels, upper: buckets, cs: percpu.NewCounters(len(buckets) + 3)}
	f.mu.Lock()
	f.hists = append(f.hists, h)
	f.mu.Unlock()
	return h
}

// Describe sends the family's description.
func (f *family) Describe(ch chan<- *prometheus.Desc) { f.vec.Describe(ch) }

// Collect sends the usual series, then those counting per CPU.
func (f *family) Collect(ch chan<- prometheus.Metric) {
	f.vec.Collect(ch)
	f.mu.Lock()
	counters, hists := f.counters, f.hists
	f.mu.Unlock()
	for _, c := range counters {
		ch <- prometheus.MustNewConstMetric(f.desc, prometheus.CounterValue, float64(c.cs.Load(c.i)), c.labels...)
	}
	for _, h := range hists {
		ch <- h.metric(f.desc)
	}
}

// perCPUHistogram is a histogram of durations counting per CPU: counters
// 0 to len(upper) are the buckets (the last one past every bound), and
// the two after them the sum: its nanoseconds above the low sumBits (in
// units of 2^sumBits ns), then the low sumBits of each duration. One
// counter of nanoseconds would pass 2^63 (and read negative) within weeks
// on a busy gateway with long answers; split, the first lasts millions of
// years and the second 2^(64-sumBits) observations.
type perCPUHistogram struct {
	labels []string
	upper  []float64 // seconds, ascending
	cs     *percpu.Counters
}

// sumBits splits a histogram's sum in two counters (see perCPUHistogram).
const sumBits = 16

// observe counts d in slot (percpu.Slot).
func (h *perCPUHistogram) observe(slot int, d time.Duration) {
	d = max(d, 0)
	s := d.Seconds()
	b := 0
	for b < len(h.upper) && s > h.upper[b] {
		b++
	}
	h.cs.Add(slot, b, 1)
	h.cs.Add(slot, len(h.upper)+1, uint64(d)>>sumBits)
	h.cs.Add(slot, len(h.upper)+2, uint64(d)&(1<<sumBits-1))
}

// metric is the histogram as a constant metric: the count is the sum of
// the buckets read, so the two always agree.
func (h *perCPUHistogram) metric(desc *prometheus.Desc) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.upper))
	var n uint64
	for b, le := range h.upper {
		n += h.cs.Load(b)
		buckets[le] = n
	}
	n += h.cs.Load(len(h.upper))
	sum := (float64(h.cs.Load(len(h.upper)+1))*(1<<sumBits) + float64(h.cs.Load(len(h.upper)+2))) / 1e9
	return prometheus.MustNewConstHistogram(desc, n, sum, buckets, h.labels...)
}
