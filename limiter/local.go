package limiter

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/algo"
)

// localSlot keeps, on each rule, its local counterparts (a *localRules).
var localSlot = NewSlot()

// localRules holds a rule's local counterpart for the number of instances
// it was last asked for.
type localRules struct {
	last atomic.Pointer[localRule]
}

// localRule is a rule's local counterpart for a number of instances.
type localRule struct {
	instances int
	rule      *Rule // nil if the split limit is not valid
}

func newLocalRules(*Rule) any { return new(localRules) }

// scratch is reusable per-call space.
type scratch struct {
	out       []floodgate.Decision
	settled   []Settled
	flags     []HitFlags
	localOut  []floodgate.Decision
	localHits []Hit
	localIdx  []int
}

func (s *scratch) outFor(n int) []floodgate.Decision {
	if cap(s.out) < n {
		s.out = make([]floodgate.Decision, n)
	}
	return s.out[:n]
}

func (s *scratch) settledFor(n int) []Settled {
	if cap(s.settled) < n {
		s.settled = make([]Settled, n)
	}
	s.settled = s.settled[:n]
	clear(s.settled)
	return s.settled
}

func (s *scratch) flagsFor(n int) []HitFlags {
	if cap(s.flags) < n {
		s.flags = make([]HitFlags, n)
	}
	s.flags = s.flags[:n]
	clear(s.flags)
	return s.flags
}

func (s *scratch) localOutFor(n int) []floodgate.Decision {
	if cap(s.localOut) < n {
		s.localOut = make([]floodgate.Decision, n)
	}
	return s.localOut[:n]
}

// instances returns the number of instances sharing the store, at least 1.
func (l *Limiter) instances() int {
	n := l.opts.Instances
	if f := l.opts.InstancesFunc; f != nil {
		if v := f(); v >= 1 {
			n = v
		}
	}
	return max(n, 1)
}

// localRule returns r's local counterpart for the current number of
// instances, or nil if it cannot be made.
func (l *Limiter) localRule(r *Rule) *Rule {
	n := l.instances()
	rs := r.Prepared(localSlot, newLocalRules).(*localRules)
	if lr := rs.last.Load(); lr != nil && lr.instances == n {
		return lr.rule
	}
	rule, err := SplitRule(r, n)
	if err != nil {
		l.log.Warn("limiter: no local fallback for rule, failing open", "rule", r.ID(), "err", err)
	}
	rs.last.Store(&localRule{instances: n, rule: rule})
	return rule
}

// SplitRule returns the rule each of instances enforces on its own in
// place of r: rates, bursts, window and concurrency maxima and quotas
// divided by instances (algo.SplitLimit), each at least 1 where r's is.
// Durations, periods and the other settings stay as they are.
func SplitRule(r *Rule, instances int) (*Rule, error) {
	if r == nil {
		return nil, fmt.Errorf("limiter: split: nil rule")
	}
	split := func(v int64) int64 {
		if v <= 0 {
			return v
		}
		return max(1, algo.SplitLimit(v, instances))
	}
	l := r.Limit()
	if l.Algorithm.Family() == floodgate.FamilyRate {
		l.Rate = split(l.Rate)
		l.Burst = split(l.Burst)
		if l.Delay > 0 {
			l.Delay = split(l.Delay)
		}
	} else {
		l.Max = split(l.Max)
		if l.Offset > 0 {
			l.Offset = min(algo.SplitLimit(l.Offset, instances), l.Max-1)
		}
	}
	rule, err := NewRule(l, r.OnFailure(), r.Shadow())
	if err != nil {
		return nil, fmt.Errorf("limiter: split %s over %d instances: %w", r.ID(), instances, err)
	}
	return rule, nil
}

// decideByPolicy decides every hit by its rule's failure policy into out
// and flags: FailOpen allows, FailClosed denies, FailLocal asks the local
// store with the split rule. The local hits are charged only if the hits
// that FailClosed denied do not stop the request on their own (a group of
// hits stops it only when all of its hits deny: the local store sees the
// group's local hits, as the store would have seen them all).
func (l *Limiter) decideByPolicy(ctx context.Context, op storeOp, hits []Hit, out []floodgate.Decision, flags []HitFlags) {
	sc := l.scratch.Get().(*scratch)
	defer l.scratch.Put(sc)
	lh, idx := sc.localHits[:0], sc.localIdx[:0]
	var closed Verdict // the hits known to deny (FailClosed) and the others, taken to allow
	denied := false
	for i := range hits {
		h := &hits[i]
		flags[i] |= Degraded
		c := h.Rule.Params().Capacity()
		policy := h.Rule.OnFailure()
		var lr *Rule
		if policy == floodgate.FailLocal {
			switch {
			case l.opts.Local == nil:
				l.noLocal.Do(func() {
					l.log.Warn("limiter: no local store configured, floodgate.FailLocal rules fail open", "rule", h.Rule.ID())
				})
			case l.localRel == nil && h.Rule.Algorithm().Kind() == floodgate.KindConcurrency:
				// The local store keeps no leases: fail open.
			default:
				lr = l.localRule(h.Rule)
			}
			if lr == nil {
				policy = floodgate.FailOpen
			}
		}
		switch policy {
		case floodgate.FailClosed:
			out[i] = floodgate.Decision{Limit: c, RetryAfter: l.closedWait}
			closed.Add(h, false)
		case floodgate.FailLocal:
			if lc := lr.Params().Capacity(); h.Cost > lc {
				// Fits the global limit but not this instance's share.
				out[i] = floodgate.Decision{Limit: lc, RetryAfter: l.closedWait}
				closed.Add(h, false)
				continue
			}
			lh = append(lh, Hit{Rule: lr, Key: h.Key, Cost: h.Cost, Lease: h.Lease, Check: h.Check, Group: h.Group})
			idx = append(idx, i)
			closed.Add(h, true)
		default:
			out[i] = floodgate.Decision{Allowed: true, Limit: c, Remaining: c - h.Cost}
			closed.Add(h, true)
		}
	}
	denied = closed.Refused()
	if len(lh) > 0 {
		// The local store keeps no reservation: a reservation decided
		// while the store fails holds its estimate (a charge).
		peek := denied || op == opPeek
		lout := sc.localOutFor(len(lh))
		if err := l.opts.Local.Decide(ctx, lh, peek, lout); err != nil {
			l.log.Warn("limiter: local fallback failed, failing open", "err", err)
			for _, i := range idx {
				c := hits[i].Rule.Params().Capacity()
				out[i] = floodgate.Decision{Allowed: true, Limit: c, Remaining: c - hits[i].Cost}
			}
		} else {
			for j, i := range idx {
				out[i] = lout[j]
				out[i].Mark = 0 // counted by the local store: the store's refund cannot give it back
			}
		}
	}
	clear(lh) // drop the rule pointers
	sc.localHits, sc.localIdx = lh[:0], idx[:0]
	l.degraded.Add(uint64(len(hits)))
}
