package replay

import "time"

// maxBuckets bounds a timeline: past it, buckets are merged two by two and
// their width doubles, so a long log costs no more than a short one.
const maxBuckets = 4096

// Timeline counts requests and refusals per bucket of time (a minute, or
// more for long logs).
type Timeline struct {
	// Start is the start of the first bucket; Width the span of each.
	Start time.Time `json:"start"`
	Width Duration  `json:"width"`
	// Requests and Denied count per bucket; Limits, parallel to the
	// report's limits, counts each limit's own refusals (shadow limits
	// included) per bucket.
	Requests []int64   `json:"requests"`
	Denied   []int64   `json:"denied"`
	Limits   [][]int64 `json:"limits"`

	start, width int64
}

func newTimeline(limits int) *Timeline {
	return &Timeline{Limits: make([][]int64, limits), width: int64(time.Minute)}
}

// bucket returns the index of t's bucket, growing or coarsening the
// timeline as needed.
func (tl *Timeline) bucket(t int64) int {
	if len(tl.Requests) == 0 && tl.start == 0 {
		tl.start = t - ((t%tl.width)+tl.width)%tl.width
	}
	if t < tl.start {
		t = tl.start // a late record: counted in the first bucket
	}
	i := int((t - tl.start) / tl.width)
	for i >= maxBuckets {
		tl.coarsen()
		i = int((t - tl.start) / tl.width)
	}
	for len(tl.Requests) <= i {
		tl.Requests = append(tl.Requests, 0)
		tl.Denied = append(tl.Denied, 0)
		for l := range tl.Limits {
			tl.Limits[l] = append(tl.Limits[l], 0)
		}
	}
	return i
}

// coarsen doubles the width, merging buckets two by two.
func (tl *Timeline) coarsen() {
	merge := func(s []int64) []int64 {
		n := (len(s) + 1) / 2
		for i := 0; i < n; i++ {
			v := s[2*i]
			if 2*i+1 < len(s) {
				v += s[2*i+1]
			}
			s[i] = v
		}
		return s[:n]
	}
	tl.Requests = merge(tl.Requests)
	tl.Denied = merge(tl.Denied)
	for l := range tl.Limits {
		tl.Limits[l] = merge(tl.Limits[l])
	}
	tl.width *= 2
}

func (tl *Timeline) finish() {
	tl.Start = time.Unix(0, tl.start).UTC()
	tl.Width = Duration(tl.width)
}
