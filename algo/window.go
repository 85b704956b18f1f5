package algo

import (
	"math"
	"math/bits"

	"github.com/floodgate/floodgate"
)

// decideFixed counts per clock window aligned to the Unix epoch (window
// index ⌊now/W⌋). State: A = window index, B = units counted in it.
func (p *Params) decideFixed(s *State, r Request, d *floodgate.Decision) error {
	d.Limit = p.max
	if r.Now < 0 {
		return ErrOverflow
	}
	idx := r.Now / p.window
	left := p.window - r.Now%p.window // until the window ends
	count := s.B
	if s.A != idx {
		count = 0
	}
	d.Remaining = max(0, p.max-count)
	d.ResetAfter = dur(left)
	if r.Cost > p.max {
		return floodgate.ErrNeverFits
	}
	if r.Cost > p.max-count {
		d.RetryAfter = dur(left)
		return nil
	}
	count += r.Cost
	d.Allowed = true
	d.Remaining = p.max - count
	if !r.Peek {
		s.A, s.B, s.Last = idx, count, r.Now
	}
	return nil
}

// decideLog is the exact sliding window log. State: Ext.Entries[C:] holds
// the admitted arrivals in time order (At = instant, Weight = cost; arrivals
// at the same instant share one entry), A = the sum of their weights; the C
// entries before them have left the window and wait to be compacted away.
// An entry counts while At > now − W.
func (p *Params) decideLog(s *State, r Request, d *floodgate.Decision) error {
	d.Limit = p.max
	entries, k := liveEntries(s)
	cut := r.Now - p.window // entries at or before cut have left the window
	gone := int64(0)
	for k < len(entries) && entries[k].At <= cut {
		gone += entries[k].Weight
		k++
	}
	live := entries[k:]
	sum := s.A - gone
	if len(live) == 0 {
		sum = 0
	}
	d.Remaining = max(0, p.max-sum)
	if len(live) > 0 {
		d.ResetAfter = dur(p.window - (r.Now - live[len(live)-1].At))
	}
	if r.Cost > p.max {
		return floodgate.ErrNeverFits
	}
	if r.Cost > p.max-sum {
		// The same cost fits once the oldest entries holding at least
		// sum + cost − max units have left the window.
		need, acc := sum+r.Cost-p.max, int64(0)
		for _, e := range live {
			acc += e.Weight
			if acc >= need {
				d.RetryAfter = dur(p.window - (r.Now - e.At))
				break
			}
		}
		return nil
	}
	sum += r.Cost
	d.Allowed = true
	d.Remaining = p.max - sum
	d.ResetAfter = dur(p.window)
	if r.Peek {
		return nil
	}
	entries, k = compact(entries, k)
	if n := len(entries); n > k && entries[n-1].At == r.Now {
		entries[n-1].Weight += r.Cost
	} else {
		entries = append(entries, Entry{At: r.Now, Weight: r.Cost})
	}
	if s.Ext == nil {
		s.Ext = &Ext{}
	}
	s.Ext.Entries = entries
	s.A, s.C, s.Last = sum, int64(k), r.Now
	return nil
}

// liveEntries returns the state's entries and the index of the first one
// still in use (State.C, clamped to the slice).
func liveEntries(s *State) ([]Entry, int) {
	if s.Ext == nil {
		return nil, 0
	}
	e := s.Ext.Entries
	return e, int(min(max(s.C, 0), int64(len(e))))
}

// compact moves the entries from index head on to the front of the slice
// once the dropped ones take half of it or it is full, so that dropping is
// amortized O(1) and the slice stays at most twice the live entries. It
// returns the slice and the new head.
func compact(entries []Entry, head int) ([]Entry, int) {
	if head == 0 || (2*head < len(entries) && len(entries) < cap(entries)) {
		return entries, head
	}
	n := copy(entries, entries[head:])
	clear(entries[n:])
	return entries[:n], 0
}

// decideCounter is Cloudflare's sliding window counter: windows aligned to
// the epoch, est = prev·(W−e)/W + curr with e the time elapsed in the
// current window, allow iff est + n ≤ L, compared exactly in 128 bits.
// State: A = current window index, B = curr, C = prev.
func (p *Params) decideCounter(s *State, r Request, d *floodgate.Decision) error {
	d.Limit = p.max
	if r.Now < 0 {
		return ErrOverflow
	}
	w := uint64(p.window)
	idx := r.Now / p.window
	e := uint64(r.Now % p.window)
	var curr, prev int64
	switch idx {
	case s.A:
		curr, prev = s.B, s.C
	case s.A + 1:
		prev = s.B
	}
	curr, prev = max(curr, 0), max(prev, 0)
	// pw = prev·(W−e), the previous window's weight times W.
	pwHi, pwLo := bits.Mul64(uint64(prev), w-e)
	weighted := ceilDiv128(pwHi, pwLo, w) // ⌈prev·(W−e)/W⌉ ≤ prev
	d.Remaining = max(0, p.max-curr-weighted)
	d.ResetAfter = dur(int64(w - e))
	if curr > 0 {
		d.ResetAfter = dur(satAdd(int64(w-e), p.window))
	}
	if r.Cost > p.max {
		return floodgate.ErrNeverFits
	}
	// allow iff prev·(W−e) + (curr+n)·W ≤ L·W
	ok := uint64(curr)+uint64(r.Cost) <= uint64(p.max)
	if ok {
		cHi, cLo := bits.Mul64(uint64(curr+r.Cost), w)
		lo, carry := bits.Add64(pwLo, cLo, 0)
		hi, over := bits.Add64(pwHi, cHi, carry)
		lHi, lLo := bits.Mul64(uint64(p.max), w)
		ok = over == 0 && (hi < lHi || (hi == lHi && lo <= lLo))
	}
	if !ok {
		if curr <= p.max-r.Cost { // curr+n ≤ L without overflow (n ≤ L here)
			// Wait for the previous window's weight to decay:
			// t = ⌈(prev·(W−e) − (L−curr−n)·W) / prev⌉.
			bHi, bLo := bits.Mul64(uint64(p.max-curr-r.Cost), w)
			lo, borrow := bits.Sub64(pwLo, bLo, 0)
			hi, _ := bits.Sub64(pwHi, bHi, borrow)
			d.RetryAfter = dur(ceilDiv128(hi, lo, uint64(prev)))
		} else {
			// Wait for the next window, then for curr (now its previous
			// window) to decay: (W−e) + ⌈(curr−(L−n))·W / curr⌉.
			hi, lo := bits.Mul64(uint64(curr-(p.max-r.Cost)), w)
			d.RetryAfter = dur(satAdd(int64(w-e), ceilDiv128(hi, lo, uint64(curr))))
		}
		return nil
	}
	curr += r.Cost
	d.Allowed = true
	d.Remaining = max(0, p.max-curr-weighted)
	d.ResetAfter = dur(satAdd(int64(w-e), p.window))
	if !r.Peek {
		s.A, s.B, s.C, s.Last = idx, curr, prev, r.Now
	}
	return nil
}

// ceilDiv128 returns ⌈(hi·2⁶⁴+lo)/d⌉, saturating at MaxInt64.
func ceilDiv128(hi, lo, d uint64) int64 {
	if hi >= d {
		return math.MaxInt64
	}
	q, rem := bits.Div64(hi, lo, d)
	if rem > 0 {
		q++
	}
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// satAdd returns a+b for non-negative a and b, saturating at MaxInt64.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
