package algo

import (
	"fmt"

	"github.com/floodgate/floodgate"
)

// decideConcurrency limits the units in flight. State: Ext.Entries[C:]
// holds the leases in order of expiry (At = expiry, Weight = cost, ID =
// lease), A = the sum of their weights; the C entries before them are gone
// and wait to be compacted away. Expired leases (At ≤ now) no longer count.
//
// A request whose Lease is already held (and not 0) re-acquires it: the old
// lease is replaced by one with the new cost and a fresh expiry, so a
// retried acquire never takes a second slot. Lease 0 is anonymous: it can
// only expire.
//
// RetryAfter on a denial is a hint: the time until enough leases expire for
// the cost to fit, capped at one second, because holders normally release
// long before their leases expire.
func (p *Params) decideConcurrency(s *State, r Request, d *floodgate.Decision) error {
	d.Limit = p.max
	if r.Now > maxInstant-p.ttl {
		return ErrOverflow
	}
	entries, k := liveEntries(s)
	gone := int64(0)
	for k < len(entries) && entries[k].At <= r.Now {
		gone += entries[k].Weight
		k++
	}
	live := entries[k:]
	inflight := s.A - gone
	if len(live) == 0 {
		inflight = 0
	}
	held := -1 // index in live of the lease being re-acquired
	// B keeps the largest lease ID ever charged: a larger one (the usual
	// case, IDs from a counter) cannot be held, so no search is needed.
	if r.Lease != 0 && r.Lease <= uint64(s.B) {
		for i := range live {
			if live[i].ID == r.Lease {
				held = i
				inflight -= live[i].Weight
				break
			}
		}
	}
	d.Remaining = max(0, p.max-inflight)
	if len(live) > 0 {
		d.ResetAfter = dur(live[len(live)-1].At - r.Now)
	}
	if r.Cost > p.max {
		return floodgate.ErrNeverFits
	}
	if r.Cost > p.max-inflight {
		need, acc := inflight+r.Cost-p.max, int64(0)
		wait := int64(maxRetryHint)
		for i, e := range live {
			if i == held {
				continue
			}
			acc += e.Weight
			if acc >= need {
				wait = min(wait, e.At-r.Now)
				break
			}
		}
		d.RetryAfter = dur(wait)
		return nil
	}
	inflight += r.Cost
	d.Allowed = true
	d.Remaining = p.max - inflight
	d.ResetAfter = dur(p.ttl)
	if r.Peek {
		return nil
	}
	if held >= 0 {
		// Rare: close the gap the re-acquired lease leaves.
		i := k + held
		copy(entries[i:], entries[i+1:])
		entries[len(entries)-1] = Entry{}
		entries = entries[:len(entries)-1]
	}
	entries, k = compact(entries, k)
	entries = append(entries, Entry{At: r.Now + p.ttl, Weight: r.Cost, ID: r.Lease})
	if s.Ext == nil {
		s.Ext = &Ext{}
	}
	s.Ext.Entries = entries
	s.A, s.C, s.Last = inflight, int64(k), r.Now
	if r.Lease > uint64(s.B) {
		s.B = int64(r.Lease)
	}
	return nil
}

// Release ends the concurrency lease with the given ID at instant now,
// freeing its units. It is idempotent: releasing a lease that is unknown,
// already released or expired does nothing and is not an error. Expired
// leases are dropped on the way. Lease 0 (anonymous) is never released.
func (p *Params) Release(s *State, now int64, lease uint64) error {
	if p.alg != floodgate.Concurrency {
		return fmt.Errorf("algo: release: %w: %s is not a concurrency limit", floodgate.ErrInvalidLimit, p.alg)
	}
	if now < s.Last {
		return floodgate.ErrTimeBackwards
	}
	if s.Ext == nil {
		s.Last = now
		return nil
	}
	entries, head := liveEntries(s)
	n := 0
	var sum int64
	for _, e := range entries[head:] {
		if e.At <= now || (lease != 0 && e.ID == lease) {
			continue
		}
		entries[n] = e
		sum += e.Weight
		n++
	}
	clear(entries[n:])
	s.Ext.Entries = entries[:n]
	s.A, s.C, s.Last = sum, 0, now
	return nil
}
