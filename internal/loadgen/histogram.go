package loadgen

import (
	"math"
	"math/bits"
	"time"
)

// histogram counts latencies in log-linear buckets: 16 per power of two,
// so a quantile is within about 4% of the true value.
type histogram struct {
	counts [64 * 16]uint64
	n      uint64
}

func bucketOf(ns int64) int {
	if ns < 16 {
		return int(max(ns, 0))
	}
	e := bits.Len64(uint64(ns)) - 1 // 2^e ≤ ns < 2^(e+1), e ≥ 4
	m := int(uint64(ns)>>(e-4)) & 15
	return (e-3)*16 + m
}

// bucketMid returns the middle of bucket b in ns.
func bucketMid(b int) float64 {
	if b < 16 {
		return float64(b)
	}
	e := b/16 + 3
	m := b % 16
	lo := float64(uint64(16+m) << (e - 4))
	return lo + float64(uint64(1)<<(e-4))/2
}

func (h *histogram) add(d time.Duration) {
	h.counts[bucketOf(int64(d))]++
	h.n++
}

func (h *histogram) merge(o *histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// quantile returns the q-quantile in ns (0 when empty).
func (h *histogram) quantile(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank < 1 {
		rank = 1
	}
	var acc uint64
	for b, c := range h.counts {
		acc += c
		if acc >= rank {
			return bucketMid(b)
		}
	}
	return bucketMid(len(h.counts) - 1)
}
