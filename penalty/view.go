package penalty

import (
	"hash/maphash"
	"sync/atomic"
	"time"
)

// viewShards is how many parts the view of the bans is cut into: a ban
// added copies one part, about 1/viewShards of the bans (12 of 100,000),
// not all of them.
const viewShards = 8192

// view is the bans as a Box last read them, for Banned: reads take no
// lock and write nothing. Each part is an immutable map, replaced whole
// (copy on write) when a ban is added to it; the writers (add, and a
// refresh that builds a new view) hold Box.viewMu.
type view struct {
	seed  maphash.Seed
	parts [viewShards]atomic.Pointer[map[id]Ban]
	n     atomic.Int64 // bans held, ended ones included until their part is copied
}

func newView(seed maphash.Seed, bans []Ban) *view {
	v := &view{seed: seed}
	var parts [viewShards]map[id]Ban
	for _, ban := range bans {
		k := id{ban.Rule, ban.Key}
		p := v.part(k)
		if parts[p] == nil {
			parts[p] = map[id]Ban{}
		}
		parts[p][k] = ban
	}
	n := 0
	for i := range parts {
		if parts[i] != nil {
			v.parts[i].Store(&parts[i])
			n += len(parts[i])
		}
	}
	v.n.Store(int64(n))
	return v
}

func (v *view) part(k id) int {
	return int(maphash.Comparable(v.seed, k) % viewShards)
}

// get returns the ban of k, ended or not.
func (v *view) get(k id) (Ban, bool) {
	m := v.parts[v.part(k)].Load()
	if m == nil {
		return Ban{}, false
	}
	ban, ok := (*m)[k]
	return ban, ok
}

// add puts ban in its part, dropping the bans of that part that ended
// before now; a ban the part holds already (one this process made, read
// back from the store) copies nothing. The caller holds Box.viewMu.
func (v *view) add(ban Ban, now time.Time) {
	k := id{ban.Rule, ban.Key}
	if b, ok := v.get(k); ok && b.Strikes == ban.Strikes &&
		(b.end != 0 && b.end == ban.end || b.end == 0 && b.Until.Equal(ban.Until)) {
		return
	}
	v.replace(k, &ban, now)
}

// remove takes the ban of k out of its part, dropping the bans of that
// part that ended before now. The caller holds Box.viewMu.
func (v *view) remove(k id, now time.Time) {
	if _, ok := v.get(k); ok {
		v.replace(k, nil, now)
	}
}

// replace copies k's part without the bans that ended before now, with
// ban as k's (none when nil), and puts the copy in its place.
func (v *view) replace(k id, ban *Ban, now time.Time) {
	slot := &v.parts[v.part(k)]
	var old map[id]Ban
	if p := slot.Load(); p != nil {
		old = *p
	}
	m := make(map[id]Ban, len(old)+1)
	for j, b := range old {
		if j != k && b.Until.After(now) {
			m[j] = b
		}
	}
	if ban != nil {
		m[k] = *ban
	}
	slot.Store(&m)
	v.n.Add(int64(len(m) - len(old)))
}
