package client

import "time"

// counts is a sliding window of two counters kept in buckets, the pure
// core of AdaptiveThrottle and RetryBudget: time is passed in, and a time
// earlier than one already seen counts in the newest bucket (time never
// goes back).
type counts struct {
	width  time.Duration // of one bucket
	origin time.Time     // the first instant seen
	last   int64         // the newest bucket seen, counted from origin
	ring   []bucket      // bucket i lives at ring[i % len(ring)]
}

// bucket holds the counts of one bucket of time.
type bucket struct {
	at   int64 // the bucket's number
	a, b int64
}

// newCounts returns a window of length window in n buckets.
func newCounts(window time.Duration, n int) counts {
	w := window / time.Duration(n)
	if w <= 0 {
		w = 1
	}
	return counts{width: w, ring: make([]bucket, n)}
}

// index returns the number of the bucket now falls in.
func (c *counts) index(now time.Time) int64 {
	if c.origin.IsZero() {
		c.origin = now
	}
	i := int64(now.Sub(c.origin) / c.width)
	if i < c.last {
		i = c.last
	}
	c.last = i
	return i
}

// add counts da and db at now, and returns the bucket they went to.
func (c *counts) add(now time.Time, da, db int64) int64 {
	i := c.index(now)
	s := &c.ring[i%int64(len(c.ring))]
	if s.at != i {
		*s = bucket{at: i}
	}
	s.a += da
	s.b += db
	return i
}

// remove takes da and db back from bucket i, where add counted them,
// unless the ring holds another bucket in its place now (i has left the
// window).
func (c *counts) remove(i, da, db int64) {
	s := &c.ring[i%int64(len(c.ring))]
	if s.at == i {
		s.a -= da
		s.b -= db
	}
}

// sums returns the counts of the window that ends with now's bucket.
func (c *counts) sums(now time.Time) (a, b int64) {
	i := c.index(now)
	n := int64(len(c.ring))
	for _, s := range c.ring {
		if s.at <= i && s.at > i-n {
			a += s.a
			b += s.b
		}
	}
	return a, b
}
