package limiter

import (
	"context"
	"fmt"

	"github.com/floodgate/floodgate"
)

// checkUnreserved decides a charge some of whose hits are reservations, on
// a store that keeps none: every hit is checked first (one peek), and only
// when all allow are the other hits charged; the reserved ones are charged
// by settleUnreserved.
func (l *Limiter) checkUnreserved(ctx context.Context, hits []Hit, reserved int, r *Result) error {
	if err := l.step(ctx, opPeek, hits, r.Decisions, r.Flags, r); err != nil {
		return err
	}
	for i := range hits {
		if !r.Decisions[i].Allowed && !hits[i].Rule.Shadow() {
			return nil // denied: nothing to charge
		}
	}
	if reserved == len(hits) {
		return nil
	}
	sc := l.scratch.Get().(*scratch)
	defer l.scratch.Put(sc)
	sub, idx := sc.localHits[:0], sc.localIdx[:0]
	for i := range hits {
		if !hits[i].Reserve {
			sub = append(sub, hits[i])
			idx = append(idx, i)
		}
	}
	out, flags := sc.outFor(len(sub)), sc.flagsFor(len(sub))
	err := l.step(ctx, opCharge, sub, out, flags, r)
	if err == nil {
		for k, i := range idx {
			r.Decisions[i], r.Flags[i] = out[k], r.Flags[i]|flags[k]
		}
	}
	for k, i := range idx {
		hits[i].Lease = sub[k].Lease
	}
	clear(sub)
	sc.localHits, sc.localIdx = sub[:0], idx[:0]
	return err
}

// settleUnreserved charges the actual costs of the reserved hits, on a
// store that keeps no reservations: as far as each limit allows now, all
// or nothing across the hits (a charge that does not fit is reported as
// the hit's overrun).
func (l *Limiter) settleUnreserved(ctx context.Context, req *Request, actual []int64, res *Result) error {
	sub := make([]Hit, 0, len(req.Hits))
	idx := make([]int, 0, len(req.Hits))
	for i, h := range req.Hits {
		if !h.Reserve || actual[i] == 0 || h.Rule.Algorithm().Kind() == floodgate.KindConcurrency {
			continue
		}
		h.Reserve, h.Lease = false, 0
		h.Cost = min(actual[i], h.Rule.Params().Capacity())
		sub = append(sub, h)
		idx = append(idx, i)
	}
	res.Allowed = true
	if len(sub) == 0 {
		return nil
	}
	var r Result
	if err := l.run(ctx, opCharge, &Request{Front: req.Front, Hits: sub}, &r); err != nil {
		return fmt.Errorf("limiter: settle: %w", err)
	}
	for k, i := range idx {
		res.Decisions[i] = r.Decisions[k]
		res.Decisions[i].Allowed = true
		if !r.Allowed {
			res.Decisions[i].Overrun = sub[k].Cost
		}
	}
	return nil
}
