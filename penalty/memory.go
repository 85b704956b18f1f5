package penalty

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/floodgate/floodgate/config"
)

// Memory keeps offences and bans in this process.
type Memory struct {
	max int
	now func() time.Time

	mu       sync.Mutex // guards everything below
	offences map[id]offences
	bans     map[id]memBan
	version  int64
	// While the bans are full, they are swept for ended ones at most
	// once a second (nextSweep), not on every new key's ban: a flood of
	// keys would otherwise pay a scan of every ban for each of its bans.
	nextSweep time.Time
	sweeps    int // sweeps of the bans made, for tests
	// offenceSweeps counts the sweeps of the offence counters, for tests.
	offenceSweeps int
}

// sweepEvery is how often at most a full memory backend sweeps its bans.
const sweepEvery = time.Second

type offences struct {
	n     int64
	after int64     // the rule's After: the sweep ranks n/after
	end   time.Time // the window's end
}

// progress is how near o is to its ban, in levels: n/after of levels
// (0 to levels-1, as n < after), so that the sweep keeps the counters
// nearest a ban whatever the After of their rules.
func (o offences) progress() int {
	if o.after <= 0 || o.n >= o.after {
		return levels - 1
	}
	return int(o.n * levels / o.after)
}

type memBan struct {
	Ban
	forget time.Time // the strikes are forgotten then
}

// NewMemory returns a backend in this process that keeps at most max bans
// and as many offence counters (0: DefaultMaxBans); now is its clock
// (default time.Now).
func NewMemory(max int, now func() time.Time) *Memory {
	if max <= 0 {
		max = DefaultMaxBans
	}
	if now == nil {
		now = time.Now
	}
	return &Memory{max: max, now: now, offences: map[id]offences{}, bans: map[id]memBan{}}
}

// Offend counts an offence and bans the key at the rule's After-th.
func (m *Memory) Offend(_ context.Context, r *config.Ban, key string) (*Ban, error) {
	now := m.now()
	k := id{r.Name, key}
	m.mu.Lock()
	defer m.mu.Unlock()
	if b, ok := m.bans[k]; ok && b.Until.After(now) {
		return nil, nil // banned already: its requests are not served
	}
	o, ok := m.offences[k]
	if !ok || !now.Before(o.end) {
		if !ok && len(m.offences) >= m.max {
			m.sweepOffences(now)
		}
		o = offences{end: now.Add(r.Within)}
	}
	o.n++
	o.after = r.After
	if o.n < r.After {
		m.offences[k] = o
		return nil, nil
	}
	delete(m.offences, k)
	strikes := 0
	if b, ok := m.bans[k]; ok && b.forget.After(now) {
		strikes = b.Strikes
	} else if !ok && len(m.bans) >= m.max {
		if now.Before(m.nextSweep) {
			return nil, nil // full, and swept less than a second ago
		}
		m.sweepBans(now)
		if len(m.bans) >= m.max {
			return nil, nil
		}
	}
	d := banFor(r, strikes)
	b := memBan{Ban: Ban{Rule: r.Name, Key: key, Kind: r.Key, Until: now.Add(d), Strikes: strikes + 1}}
	b.forget = b.Until.Add(r.MaxBan)
	m.bans[k] = b
	m.version++
	ban := b.Ban
	return &ban, nil
}

// banFor is the length of a key's ban after strikes earlier ones.
func banFor(r *config.Ban, strikes int) time.Duration {
	d := r.Ban
	for i := 0; i < strikes && d < r.MaxBan; i++ {
		if d > r.MaxBan/time.Duration(max(r.Growth, 1)) {
			return r.MaxBan
		}
		d *= time.Duration(r.Growth)
	}
	return min(d, r.MaxBan)
}

// sweepBans drops the bans whose strikes are forgotten and, when that
// leaves less than an eighth of the bound free, bans that have ended,
// those of the fewest strikes first, until an eighth is free: a ban kept
// only for its strikes (for MaxBan after its end) never keeps a key that
// offends now from being banned, so a flood of short bans cannot hold the
// box full. Only bans in force fill it. The next sweep of full bans waits
// a second.
func (m *Memory) sweepBans(now time.Time) {
	m.sweeps++
	m.nextSweep = now.Add(sweepEvery)
	var ended [levels]int // bans of levels-1 strikes or more share the last
	for k, b := range m.bans {
		switch {
		case !b.forget.After(now):
			delete(m.bans, k)
		case !b.Until.After(now):
			ended[min(b.Strikes, levels-1)]++
		}
	}
	excess := len(m.bans) - (m.max - max(m.max/8, 1))
	if excess <= 0 {
		return
	}
	least, excess := dropLevel(&ended, excess)
	for k, b := range m.bans {
		if b.Until.After(now) {
			continue
		}
		switch n := min(b.Strikes, levels-1); {
		case n < least:
			delete(m.bans, k)
		case n == least && excess > 0:
			delete(m.bans, k)
			excess--
		}
	}
}

// levels is how many strike counts, or steps of an offence counter's
// progress toward its ban, the sweeps tell apart: strikes of levels-1 or
// more are alike.
const levels = 64

// dropLevel returns which entries a sweep drops to remove excess of them,
// the lowest levels first, given how many there are at each level: every
// one below least, and rest of those at least.
func dropLevel(counts *[levels]int, excess int) (least, rest int) {
	for least < levels-1 && excess > counts[least] {
		excess -= counts[least]
		least++
	}
	return least, excess
}

// sweepOffences drops the counters whose window passed and, when that
// leaves less than an eighth of the bound free (a flood of keys), those
// furthest from a ban (their offences over their rule's After) until an
// eighth is free: the counters closest to a ban are kept, whatever the
// rule, so that a flood of offences under a rule of a high After cannot
// push out a key near its ban under a rule of a low one (2 of 3 outranks
// 99 of 200, and ties 66 of 100); and the next sweep waits for an eighth
// of the bound of new keys, so that a steady flood pays for one sweep per
// max/8 new keys, not for one per key.
func (m *Memory) sweepOffences(now time.Time) {
	m.offenceSweeps++
	var held [levels]int // counters by progress
	for k, o := range m.offences {
		if !o.end.After(now) {
			delete(m.offences, k)
			continue
		}
		held[o.progress()]++
	}
	excess := len(m.offences) - (m.max - max(m.max/8, 1))
	if excess <= 0 {
		return
	}
	least, excess := dropLevel(&held, excess)
	for k, o := range m.offences {
		switch n := o.progress(); {
		case n < least:
			delete(m.offences, k)
		case n == least && excess > 0:
			delete(m.offences, k)
			excess--
		}
	}
}

// Bans returns the bans in force.
func (m *Memory) Bans(context.Context) ([]Ban, string, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Ban
	for _, b := range m.bans {
		if b.Until.After(now) {
			out = append(out, b.Ban)
		}
	}
	return out, strconv.FormatInt(m.version, 10), nil
}

// Version returns the bans' version.
func (m *Memory) Version(context.Context) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return strconv.FormatInt(m.version, 10), nil
}

// Lift ends a ban and forgets its strikes.
func (m *Memory) Lift(_ context.Context, rule, key string) (bool, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.bans[id{rule, key}]
	delete(m.bans, id{rule, key})
	m.version++
	return ok && b.Until.After(now), nil
}
