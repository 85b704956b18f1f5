package memstore

import (
	"fmt"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/limiter"
)

// DefaultMaxReservations is the default of Options.MaxReservations.
const DefaultMaxReservations = 1 << 18

// resKey names a reservation's settle record in its shard: the hash of
// its (rule, key) and the reservation's ID.
type resKey struct {
	h, id uint64
}

// reservation is the settle record of one reserved hit: what it charged,
// and when (which window or period), until it is settled or expires.
type reservation struct {
	rule string // the rule's ID, to tell hash collisions apart
	key  string
	cost int64 // the estimate charged
	at   int64 // the instant it was charged at (the wall clock's, for quotas)
	exp  int64 // when it expires and settles at its estimate (monotonic)
}

// reserve keeps a settle record for every hit marked Reserve that decide
// just charged: when the request went ahead (limiter.Verdict: a group of
// hits stops it only when all of them deny), each reserved hit that
// allowed. The hits' shards are locked.
func (s *Store) reserve(w []work, hits []limiter.Hit, out []floodgate.Decision, now int64) {
	var verdict limiter.Verdict
	for i := range hits {
		verdict.Add(&hits[i], out[i].Allowed)
	}
	if verdict.Refused() {
		return // denied: nothing was charged
	}
	for i := range hits {
		hit := &hits[i]
		if !hit.Reserve || !out[i].Allowed {
			continue
		}
		ttl := int64(hit.TTL)
		if ttl <= 0 {
			ttl = int64(floodgate.DefaultReservationTTL)
		}
		sh := &s.shards[w[i].sh]
		k := resKey{w[i].h, hit.Lease}
		if r, ok := sh.res[k]; ok && r.rule == hit.Rule.ID() && r.key == hit.Key {
			// The same limit and key twice in one reservation.
			r.cost += hit.Cost
			sh.res[k] = r
			continue
		}
		if sh.res == nil {
			sh.res = make(map[resKey]reservation)
		}
		for old := range sh.res {
			if len(sh.res) < s.maxRes {
				break
			}
			// Full: one reservation, any, settles at its estimate now.
			delete(sh.res, old)
			sh.resEvictions++
		}
		sh.res[k] = reservation{rule: hit.Rule.ID(), key: hit.Key, cost: hit.Cost, at: w[i].at, exp: satAdd(now, ttl)}
		sh.writes++
	}
}

// settle ends the reservations named by hits with their actual costs (see
// limiter.Reserver). The hits' shards are locked.
func (s *Store) settle(w []work, hits []limiter.Hit, out []limiter.Settled, now int64) error {
	// A settle is applied whole or not at all: when the record of a hit
	// that is not a shadow one is missing (settled already, expired,
	// dropped, never made), nothing is settled and every hit is answered
	// not found, so that the engine's "unknown reservation" never follows
	// units given back.
	for i := range hits {
		hit := &hits[i]
		if hit.Rule.Shadow() {
			continue
		}
		sh, k := &s.shards[w[i].sh], resKey{w[i].h, hit.Lease}
		r, ok := sh.res[k]
		if ok && r.exp <= now {
			delete(sh.res, k) // it settled at its estimate
			ok = false
		}
		if !ok || r.rule != hit.Rule.ID() || r.key != hit.Key {
			clear(out)
			return nil
		}
	}
	for i := range hits {
		hit, wk := &hits[i], &w[i]
		p := hit.Rule.Params()
		sh := &s.shards[wk.sh]
		k := resKey{wk.h, hit.Lease}
		r, ok := sh.res[k]
		if ok && r.exp <= now {
			delete(sh.res, k)
			ok = false
		}
		if !ok || r.rule != hit.Rule.ID() || r.key != hit.Key {
			out[i] = limiter.Settled{}
			continue
		}
		delete(sh.res, k)
		sh.writes++
		var st algo.State
		var e *entry
		old := int64(0)
		if wk.idx = sh.find(wk.h, hit.Rule, hit.Key); wk.idx >= 0 {
			e = sh.at(wk.idx)
			if e.exp > now {
				st = e.st
			}
			old = extCost(e.st.Ext)
		}
		t, wall := s.instant(p, now)
		if t < st.Last {
			t = st.Last
			sh.clamps++
		}
		var err error
		var overrun int64
		changed := true
		switch diff := hit.Cost - r.cost; {
		case p.Algorithm().Kind() == floodgate.KindConcurrency:
			err = p.Release(&st, t, hit.Lease)
		case diff < 0:
			err = p.RefundAt(&st, t, r.at, -diff)
		case diff > 0:
			var n int64
			n, err = p.ChargeUpTo(&st, t, diff)
			overrun, changed = diff-n, n > 0
		default:
			changed = false
		}
		if err != nil {
			return fmt.Errorf("memstore: %s: settle: %w", hit.Rule.ID(), err)
		}
		d, free, err := peekFree(hit, &st, t)
		if err != nil {
			return err
		}
		out[i] = limiter.Settled{Found: true, Remaining: free, Overrun: overrun}
		if !changed {
			continue
		}
		exp := expiry(hit.Rule, &st, &d, expiryBase(t, now, wall))
		if e != nil {
			e.st, e.exp, e.rule, e.deny = st, exp, hit.Rule, 0
			sh.regrow(old, extCost(st.Ext))
		} else {
			wk.idx = s.insert(sh, wk.h, hit.Rule, hit.Key, st, exp, now, pins{one: -1, w: w, sh: wk.sh})
		}
		sh.writes++
	}
	for i := range w {
		if sh := &s.shards[w[i].sh]; sh.over() {
			s.trim(sh, pins{one: -1, w: w, sh: w[i].sh}, now)
		}
	}
	return nil
}

// sweepReservations drops the expired settle records of sh (locked): their
// reservations settle at their estimates.
func sweepReservations(sh *shard, now int64) {
	for k, r := range sh.res {
		if r.exp <= now {
			delete(sh.res, k)
			sh.resExpired++
		}
	}
}
