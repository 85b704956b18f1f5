package algo

import (
	"errors"

	"github.com/floodgate/floodgate"
)

// RefundAt gives back cost units that an earlier Decide charged to s at
// the instant at, as a reservation settled below its estimate does. It
// undoes exactly what that charge did, where the charge still counts:
//
//   - rate algorithms: as Refund (the arrival time moves back by cost·T,
//     never before now);
//   - fixed and sliding window counters: the count of the window that
//     holds at, if it is still the current or (sliding) the previous one;
//   - sliding log: the weight of the entry at at, if it is still in the log;
//   - quota: the count of the period that holds at, if it is still current.
//
// A window, entry or period that has passed since is left alone: its
// charge no longer counts. Concurrency leases are ended by Release, not
// here. Last is not moved.
func (p *Params) RefundAt(s *State, now, at, cost int64) error {
	if cost < 1 {
		return floodgate.ErrInvalidCost
	}
	switch p.alg.Family() {
	case floodgate.FamilyRate:
		return p.Refund(s, now, cost)
	case floodgate.FamilyQuota:
		if s.C != 0 && at >= s.B && at < s.C {
			s.A = max(0, s.A-cost)
		}
		return nil
	}
	switch p.alg {
	case floodgate.FixedWindow:
		if at >= 0 && s.A == at/p.window {
			s.B = max(0, s.B-cost)
		}
	case floodgate.SlidingWindow:
		if at < 0 {
			return nil
		}
		switch idx := at / p.window; s.A {
		case idx:
			s.B = max(0, s.B-cost)
		case idx + 1:
			s.C = max(0, s.C-cost)
		}
	case floodgate.SlidingLog:
		entries, k := liveEntries(s)
		for i := k; i < len(entries); i++ {
			e := &entries[i]
			if e.At < at {
				continue
			}
			if e.At > at {
				break
			}
			take := min(e.Weight, cost)
			e.Weight -= take
			s.A = max(0, s.A-take)
			if e.Weight == 0 {
				copy(entries[i:], entries[i+1:])
				entries[len(entries)-1] = Entry{}
				s.Ext.Entries = entries[:len(entries)-1]
			}
			break
		}
	}
	return nil
}

// maxChargeTries bounds ChargeUpTo's search for the largest cost that
// fits; the first try fits unless an algorithm's Remaining is rounded.
const maxChargeTries = 64

// ChargeUpTo charges s as much of cost as the limit admits at now, never
// more than is free (no negative credit), and returns the units charged:
// cost when all of it fits, fewer (maybe 0) when the limit runs out. A
// reservation settled above its estimate charges its excess this way; the
// units left over are its overrun. Concurrency limits charge nothing here.
func (p *Params) ChargeUpTo(s *State, now, cost int64) (int64, error) {
	if cost < 1 {
		return 0, floodgate.ErrInvalidCost
	}
	if p.alg.Kind() == floodgate.KindConcurrency {
		return 0, nil
	}
	k := min(cost, p.cap)
	var d floodgate.Decision
	for try := 0; k > 0 && try < maxChargeTries; try++ {
		err := p.DecideInto(s, Request{Now: now, Cost: k, Peek: true}, &d)
		if err != nil && !errors.Is(err, floodgate.ErrNeverFits) {
			return 0, err
		}
		if d.Allowed {
			if err := p.DecideInto(s, Request{Now: now, Cost: k}, &d); err != nil {
				return 0, err
			}
			return k, nil
		}
		// On a denial Remaining is what fits now (rounded down, or for
		// a few algorithms a little less); try that, then less.
		k = min(k-1, d.Remaining)
	}
	return 0, nil
}
