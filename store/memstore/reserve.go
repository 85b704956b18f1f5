package memstore

import (
	"cmp"
	"fmt"
	"slices"
	"unsafe"

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
	cost int64  // the estimate charged
	at   int64  // the instant it was charged at (the wall clock's, for quotas)
	exp  int64  // when it expires and settles at its estimate (monotonic)
	seq  uint64 // the order it was made in, in its shard (see resFIFO)
}

// settledRes is what the settle of one reserved hit did: the actual cost
// it was settled at and its answer, kept for limiter.SettledTTL, so that the same settle sent again (its answer lost on the way) is
// answered as it was and changes nothing, while a settle at another cost
// is refused as before.
type settledRes struct {
	rule   string
	key    string
	actual int64
	exp    int64
	out    limiter.Settled
}

// resRecordBytes is what a settle record takes beside its key's bytes:
// its map entry in a map that may have grown to twice its entries, and
// its entries in the two queues that order the records (each holds at
// most about two a record), and the key's string header and rounding.
const resRecordBytes = 2*int64(unsafe.Sizeof(resKey{})+unsafe.Sizeof(reservation{})+1) +
	2*int64(unsafe.Sizeof(resDue{})+unsafe.Sizeof(resMade{})) + 16

// resBytes returns what the settle record of a reservation of key takes,
// counted as the keys are (their bytes half as much again).
func resBytes(key string) int64 {
	return resRecordBytes + int64(len(key))*3/2
}

// resShare is the part of a shard's byte budget (MaxBytes) that its
// settle records may take: 1/resShare.
const resShare = 8

// dropRes drops the settle record k of sh (locked).
func dropRes(sh *shard, k resKey) {
	if r, ok := sh.res[k]; ok {
		sh.resBytes -= resBytes(r.key)
		delete(sh.res, k)
	}
}

// settledRecordBytes is what a kept settle takes beside its key's bytes:
// its map entry (key and value) in a map that may have grown to twice its
// entries, and the key's string header and allocation rounding.
const settledRecordBytes = 2*int64(unsafe.Sizeof(resKey{})+unsafe.Sizeof(settledRes{})+1) + 16

// settledBytes returns what the kept settle d takes, counted as the keys
// are (their bytes half as much again for the allocator's rounding).
func settledBytes(d *settledRes) int64 {
	return settledRecordBytes + int64(len(d.key))*3/2
}

// settledShare is the part of a shard's byte budget (MaxBytes) that the
// settles it keeps may take: 1/settledShare.
const settledShare = 16

// dropSettled drops the kept settle k of sh (locked).
func dropSettled(sh *shard, k resKey) {
	if d, ok := sh.settled[k]; ok {
		sh.settledBytes -= settledBytes(&d)
		delete(sh.settled, k)
	}
}

// settledOf returns what the settle of hit's reservation did, when it was
// settled at hit.Cost within its TTL. The shard sh is locked.
func settledOf(sh *shard, k resKey, hit *limiter.Hit, now int64) (limiter.Settled, bool) {
	d, ok := sh.settled[k]
	if ok && d.exp <= now {
		dropSettled(sh, k)
		return limiter.Settled{}, false
	}
	if !ok || d.rule != hit.Rule.ID() || d.key != hit.Key || d.actual != hit.Cost {
		return limiter.Settled{}, false
	}
	return d.out, true
}

// keepSettled keeps d, the settle of the record k of sh (locked). A full
// shard drops one past its TTL, else another (a settle of that
// reservation sent again is then refused, as it was before any was kept):
// the kept settles never outnumber the reservations a shard holds, nor,
// with MaxBytes, take more than a sixteenth of the shard's byte budget.
func (s *Store) keepSettled(sh *shard, k resKey, d settledRes, now int64) {
	if sh.settled == nil {
		sh.settled = make(map[resKey]settledRes)
	}
	dropSettled(sh, k)
	b := settledBytes(&d)
	for len(sh.settled) > 0 && (len(sh.settled) >= s.maxRes ||
		(sh.budget > 0 && sh.settledBytes+b > sh.budget/settledShare)) {
		n, last := 0, min(len(sh.settled), 8)
		for j, v := range sh.settled {
			n++
			if v.exp <= now || n >= last {
				dropSettled(sh, j)
				break
			}
		}
	}
	if sh.budget > 0 && b > sh.budget/settledShare {
		return // larger than the share on its own
	}
	sh.settled[k] = d
	sh.settledBytes += b
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
		b := resBytes(hit.Key)
		for len(sh.res) >= s.maxRes || (sh.budget > 0 && len(sh.res) > 0 && sh.resBytes+b > sh.budget/resShare) {
			// Full: a record past its TTL goes first (it has settled
			// at its estimate already), else the oldest (it settles at
			// its estimate now). A flood of reservations left hanging
			// is older than the requests that come and settle after
			// it, and goes before them, whatever ttl it asked for: a
			// record that expires first would be the newest request's
			// when the flood asked for a longer ttl than it.
			dropOldest(sh, now)
		}
		exp := satAdd(now, ttl)
		sh.resSeq++
		sh.res[k] = reservation{rule: hit.Rule.ID(), key: hit.Key, cost: hit.Cost, at: w[i].at, exp: exp, seq: sh.resSeq}
		sh.resBytes += b
		sh.resDue.add(k, exp, sh.res)
		sh.resMade.add(k, sh.resSeq, sh.res)
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
	// units given back. A settle sent again at the same costs, every
	// such hit settled by it, is answered as it was and changes nothing.
	open, again := 0, 0
	for i := range hits {
		hit := &hits[i]
		if hit.Rule.Shadow() {
			continue
		}
		sh, k := &s.shards[w[i].sh], resKey{w[i].h, hit.Lease}
		r, ok := sh.res[k]
		if ok && r.exp <= now {
			dropRes(sh, k) // it settled at its estimate
			ok = false
		}
		switch {
		case ok && r.rule == hit.Rule.ID() && r.key == hit.Key:
			open++
		case !ok:
			if _, done := settledOf(sh, k, hit, now); done {
				again++
				continue
			}
			fallthrough
		default:
			clear(out)
			return nil
		}
	}
	if again > 0 {
		clear(out)
		if open == 0 {
			for i := range hits {
				out[i], _ = settledOf(&s.shards[w[i].sh], resKey{w[i].h, hits[i].Lease}, &hits[i], now)
			}
		}
		return nil
	}
	for i := range hits {
		hit, wk := &hits[i], &w[i]
		p := hit.Rule.Params()
		sh := &s.shards[wk.sh]
		k := resKey{wk.h, hit.Lease}
		r, ok := sh.res[k]
		if ok && r.exp <= now {
			dropRes(sh, k)
			ok = false
		}
		if !ok || r.rule != hit.Rule.ID() || r.key != hit.Key {
			out[i] = limiter.Settled{}
			continue
		}
		dropRes(sh, k)
		sh.writes++
		var st algo.State
		var e *entry
		old := int64(0)
		if wk.idx = sh.find(wk.h, hit.Rule, hit.Key); wk.idx >= 0 {
			e = sh.at(wk.idx)
			if s.live(e, now) {
				st = e.st
			}
			old = extCost(e.st.Ext)
		}
		t, wall := s.instant(p, now)
		read := t
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
		onWall(&d, wall, t-read)
		out[i] = limiter.Settled{Found: true, Remaining: free, Overrun: overrun}
		s.keepSettled(sh, k, settledRes{rule: r.rule, key: r.key, actual: hit.Cost, exp: satAdd(now, int64(limiter.SettledTTL)), out: out[i]}, now)
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
// reservations settle at their estimates. It drops the settles kept past
// limiter.SettledTTL too.
func sweepReservations(sh *shard, now int64) {
	for k, d := range sh.settled {
		if d.exp <= now {
			dropSettled(sh, k)
		}
	}
	for {
		d, ok := sh.resDue.first()
		if !ok || d.exp > now {
			return
		}
		sh.resDue.pop()
		if r, ok := sh.res[d.k]; ok && r.exp == d.exp {
			dropRes(sh, d.k)
			sh.resExpired++
		}
	}
}

// dropOldest drops a settle record of sh (locked) to make room: one past
// its TTL when there is one (counted as expired), else the one made first
// (counted as evicted).
func dropOldest(sh *shard, now int64) {
	for {
		d, ok := sh.resDue.first()
		if !ok || d.exp > now {
			break
		}
		sh.resDue.pop()
		if r, ok := sh.res[d.k]; ok && r.exp == d.exp {
			dropRes(sh, d.k)
			sh.resExpired++
			return
		}
	}
	if k, ok := sh.resMade.oldest(sh.res); ok {
		dropRes(sh, k)
		sh.resEvictions++
		return
	}
	// Every record has an entry in the queue; should one be missing,
	// any record goes, so that the bound holds all the same.
	for k := range sh.res {
		dropRes(sh, k)
		sh.resEvictions++
		return
	}
}

// resFIFO orders a shard's settle records by the order they were made
// in, oldest first. A record settled or dropped by another way leaves its
// entry behind, told apart from a live one by its seq, until it comes to
// the head or the queue is rebuilt from the records, which add does once
// the entries outnumber the records twice over.
type resFIFO struct {
	q    []resMade
	head int
}

// resMade is one entry of a resFIFO.
type resMade struct {
	seq uint64
	k   resKey
}

// add queues the record k, made as seq, of records (which holds it).
func (f *resFIFO) add(k resKey, seq uint64, records map[resKey]reservation) {
	if len(f.q)-f.head >= 2*len(records)+64 {
		f.q, f.head = f.q[:0], 0
		for k, r := range records {
			f.q = append(f.q, resMade{r.seq, k})
		}
		slices.SortFunc(f.q, func(a, b resMade) int { return cmp.Compare(a.seq, b.seq) })
		return // k is in records, so it is queued
	}
	if f.head > 0 && f.head >= len(f.q)/2 {
		n := copy(f.q, f.q[f.head:])
		clear(f.q[n:])
		f.q, f.head = f.q[:n], 0
	}
	f.q = append(f.q, resMade{seq, k})
}

// oldest removes and returns the oldest record of records that the queue
// holds; false when it holds none.
func (f *resFIFO) oldest(records map[resKey]reservation) (resKey, bool) {
	for f.head < len(f.q) {
		e := f.q[f.head]
		f.q[f.head] = resMade{}
		f.head++
		if r, ok := records[e.k]; ok && r.seq == e.seq {
			return e.k, true
		}
	}
	return resKey{}, false
}

// resQueue orders a shard's settle records by expiry, earliest first: a
// binary min-heap of (expiry, record). A record settled or dropped by
// another way leaves its entry behind, told apart from a live one by its
// expiry, until it comes to the top or the queue is rebuilt from the
// records, which add does once the entries outnumber the records twice
// over: the queue holds at most about two entries a record.
type resQueue []resDue

// resDue is one entry of a resQueue.
type resDue struct {
	exp int64
	k   resKey
}

// add queues the record k, expiring at exp, of records (which holds it).
func (q *resQueue) add(k resKey, exp int64, records map[resKey]reservation) {
	if len(*q) >= 2*len(records)+64 {
		*q = (*q)[:0]
		for k, r := range records {
			*q = append(*q, resDue{r.exp, k})
		}
		for i := len(*q)/2 - 1; i >= 0; i-- {
			q.down(i)
		}
		return // k is in records, so it is queued
	}
	*q = append(*q, resDue{exp, k})
	q.up(len(*q) - 1)
}

// first returns the entry that expires first.
func (q resQueue) first() (resDue, bool) {
	if len(q) == 0 {
		return resDue{}, false
	}
	return q[0], true
}

// pop removes the entry that expires first.
func (q *resQueue) pop() {
	h := *q
	n := len(h) - 1
	h[0] = h[n]
	*q = h[:n]
	if n > 0 {
		q.down(0)
	}
}

func (q resQueue) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if q[p].exp <= q[i].exp {
			return
		}
		q[p], q[i] = q[i], q[p]
		i = p
	}
}

func (q resQueue) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(q) {
			return
		}
		m := l
		if r := l + 1; r < len(q) && q[r].exp < q[l].exp {
			m = r
		}
		if q[i].exp <= q[m].exp {
			return
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
}
