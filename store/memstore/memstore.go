package memstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/limiter"
)

// Defaults for the zero Options.
const (
	DefaultShards           = 64
	DefaultSnapshotInterval = time.Second
	DefaultSweepInterval    = 10 * time.Second
)

// Options configure a Store. The zero value is a store with 64 shards, no
// key cap, the system clock and no state file.
type Options struct {
	// Shards is the number of shards, rounded up to a power of two
	// (0: DefaultShards, at most 65536).
	Shards int
	// MaxKeys caps the number of keys (0: no cap). Each shard keeps at
	// most MaxKeys/Shards of them and evicts its own keys to make room, by
	// value: idle keys first, then those that hold least of their limits,
	// denying keys last (see the package documentation). A cap below 64
	// keys per shard lowers the number of shards.
	MaxKeys int
	// MaxBytes caps the memory of the keys (0: no cap), as the Go
	// allocator hands it out: the entries (80 bytes each) and the index
	// as allocated, the keys' own bytes half as much again, and the
	// entries of sliding logs and leases of concurrency limits (24 bytes
	// each). Each shard keeps within MaxBytes/Shards. It does not count
	// the rule IDs, which keys of one rule share, nor the reservations'
	// settle records, which take at most an eighth of it beside it (and
	// MaxReservations), nor the settles kept so that a settle sent again
	// is answered alike, which take at most a sixteenth of it. A cap below
	// three chunks of entries (120 KiB) per shard lowers the number of
	// shards.
	MaxBytes int64
	// Now returns the wall clock's current instant in Unix nanoseconds.
	// Calendar quotas follow it (their periods are days of a calendar);
	// every other algorithm follows Elapsed when it is set, and Now too
	// when it is not. An instant earlier than one already seen for a key
	// is clamped to that one and counted in Stats().Clamps. With Now set,
	// every decision calls it.
	//
	// By default the two clocks are the system's: quotas read the wall
	// clock (a step of it shows within a second), and the other
	// algorithms the monotonic time since the store started, counted from
	// the wall-clock reading of that moment, so that a step of the wall
	// clock (an NTP correction, a mistaken date) neither freezes nor
	// refills any rate or window. That instant is cached: decisions use an
	// instant refreshed every millisecond while they are being made, and
	// every 16th decision of a shard reads the clock itself, so an instant
	// lags by about a millisecond at most (more only while the process is
	// starved of CPU and decisions are rare); see the package
	// documentation.
	Now func() int64
	// Elapsed, when set together with Now, is the monotonic time since any
	// fixed instant: every algorithm but calendar quotas follows it,
	// counted from Now's reading when the store is made. Tests set both to
	// step the wall clock alone.
	Elapsed func() time.Duration
	// Boot reads a clock that runs on across restarts of the process but
	// not of the machine: an identifier of the machine's current boot and
	// the time since it began (ok false when there is none). A snapshot
	// records it, so that a store started again on the same boot knows
	// exactly how long it was away, whatever the wall clock said when the
	// snapshot was taken or says now (see the package documentation).
	// The default is SystemBoot, whatever Now is; tests that fake the
	// clock across a restart set one that reports none, or a fake.
	Boot func() (id string, up time.Duration, ok bool)
	// StatePath, when set, is the state file: loaded by New, written
	// every SnapshotInterval and by Close.
	StatePath string
	// SnapshotInterval is the time between snapshots (0:
	// DefaultSnapshotInterval; negative: only on Close).
	SnapshotInterval time.Duration
	// MaxReservations caps the reservations held at once (0:
	// DefaultMaxReservations), each shard its share; with MaxBytes, their
	// settle records also take at most an eighth of it. A shard that is
	// full drops a reservation past its TTL first, else the oldest (a
	// flood left hanging goes before the reservations made after it,
	// whatever TTL it asked for), which then settles at its estimate, to
	// make room (Stats().ReservationEvictions counts those dropped before
	// their TTL). What the settles of the last limiter.SettledTTL did,
	// kept so that a settle sent again is answered alike, is capped
	// alike, apart, and with MaxBytes to a sixteenth of it (past that, one
	// past its TTL goes first, else another: the same settle sent again
	// is then refused, 404 on the check API, as a settle of an unknown
	// reservation).
	MaxReservations int
	// SweepInterval is the time between sweeps that remove idle keys (0:
	// DefaultSweepInterval; negative: keys are only removed when touched
	// or evicted).
	SweepInterval time.Duration
	// Logger receives warnings about the state file (default: discard).
	Logger *slog.Logger
}

// Stats is a snapshot of a Store's counters.
type Stats struct {
	// Keys is the number of keys held, idle ones not yet removed included.
	Keys int
	// Bytes is their memory as counted for MaxBytes, a bound of what
	// they take.
	Bytes int64
	// Evictions counts keys removed to keep within MaxKeys or MaxBytes
	// that held part of their limit: each starts over as a fresh key.
	Evictions uint64
	// DenyingEvictions counts those of Evictions that were denying (their
	// last decision a denial that still held): each lets a client that was
	// being held back start over. The store evicts one only when every key
	// it weighed was denying too.
	DenyingEvictions uint64
	// Expired counts idle keys removed by sweeps, and keys that a full
	// shard removed to make room while their state equalled a fresh key's.
	Expired uint64
	// Clamps counts decisions whose clock reading was earlier than the
	// key's last one and was moved forward to it.
	Clamps uint64
	// Reservations is the number of reservations held (expired ones not
	// yet swept included).
	Reservations int
	// ReservationEvictions counts reservations dropped to keep within
	// MaxReservations; ReservationsExpired those swept after their TTL.
	// Either settles at its estimate.
	ReservationEvictions, ReservationsExpired uint64
	// Loaded is the number of keys read from the state file by New.
	Loaded int
	// Rebased is how far New moved the store's timeline, the clock of
	// every algorithm but calendar quotas, so that the limits continue
	// from the state file (see the package documentation): forward for a
	// snapshot from the future, as a clock that ran fast leaves one.
	Rebased time.Duration
	// LoadError says why the state file was not loaded (nil if it was, or
	// if there was none).
	LoadError error
	// Snapshots counts snapshots written; SnapshotErrors those that failed.
	Snapshots, SnapshotErrors uint64
	// LastSnapshotError is the error of the latest snapshot, when it
	// failed (nil once a snapshot succeeds again).
	LastSnapshotError error
	// LastSnapshot is the instant the latest successful snapshot began.
	LastSnapshot time.Time
}

// Store is the in-memory limiter.Store. It is safe for concurrent use.
type Store struct {
	shards []shard
	shift  uint // shard of a hash: h >> shift
	seed   maphash.Seed
	mult   uint64       // keyHash's multiplier, odd, drawn from seed
	now    func() int64 // the monotonic timeline: expiries and all but quotas
	wall   func() int64 // the wall clock: calendar quotas
	clock  *coarseClock // the default clock, nil with Options.Now
	base   int64        // the timeline's instant at Elapsed 0, with Options.Elapsed
	maxRes int          // reservations per shard
	opts   Options
	log    *slog.Logger

	// rebase is how far New moved the timeline to continue from the state
	// file (see load); decisions report their instants less it.
	rebase int64
	boot   func() (id string, up time.Duration, ok bool)
	bootID [16]byte // bootHash of this boot's ID, zero if unknown

	loaded  int
	loadErr error

	snapMu       sync.Mutex // serializes snapshot writes
	snapshots    atomic.Uint64
	snapErrors   atomic.Uint64
	lastSnapErr  atomic.Pointer[error]
	lastSnapshot atomic.Int64
	snapWrites   atomic.Uint64 // shard writes counted before the latest periodic snapshot

	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

var _ limiter.Store = (*Store)(nil)

// New returns a store. With Options.StatePath set it loads the state file
// if there is one; a file that cannot be read or does not check out is
// reported through Stats().LoadError and the logger and otherwise ignored.
// New starts the goroutines that sweep, snapshot and refresh the default
// clock; Close stops them.
func New(opts Options) (*Store, error) {
	if opts.Shards < 0 || opts.Shards > 1<<16 {
		return nil, fmt.Errorf("memstore: shards must be between 0 and 65536, got %d", opts.Shards)
	}
	if opts.MaxKeys < 0 {
		return nil, fmt.Errorf("memstore: max keys must not be negative, got %d", opts.MaxKeys)
	}
	if opts.MaxBytes < 0 {
		return nil, fmt.Errorf("memstore: max bytes must not be negative, got %d", opts.MaxBytes)
	}
	if opts.MaxReservations < 0 {
		return nil, fmt.Errorf("memstore: max reservations must not be negative, got %d", opts.MaxReservations)
	}
	n := opts.Shards
	if n == 0 {
		n = DefaultShards
	}
	n = 1 << bits.Len(uint(n-1)) // round up to a power of two
	for n > 1 && ((opts.MaxKeys > 0 && opts.MaxKeys/n < minPerShard) ||
		(opts.MaxBytes > 0 && opts.MaxBytes/int64(n) < minShardBytes)) {
		n /= 2 // a small cap: fewer shards, each with room to choose what to evict
	}
	if opts.SnapshotInterval == 0 {
		opts.SnapshotInterval = DefaultSnapshotInterval
	}
	if opts.SweepInterval == 0 {
		opts.SweepInterval = DefaultSweepInterval
	}
	s := &Store{
		shards: make([]shard, n),
		shift:  uint(64 - bits.TrailingZeros(uint(n))),
		seed:   maphash.MakeSeed(),
		now:    opts.Now,
		opts:   opts,
		log:    opts.Logger,
		stop:   make(chan struct{}),
	}
	s.mult = maphash.String(s.seed, "multiplier") | 1
	switch {
	case s.now != nil && opts.Elapsed != nil:
		s.base = opts.Now() - int64(opts.Elapsed())
		s.wall = opts.Now
		s.now = func() int64 { return s.base + int64(opts.Elapsed()) }
	case s.now != nil:
		s.wall = s.now
	default:
		s.clock = newCoarseClock()
		s.now = s.clock.now
		s.wall = s.clock.wall.now
	}
	s.boot = opts.Boot
	if s.boot == nil {
		s.boot = SystemBoot
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	maxRes := opts.MaxReservations
	if maxRes == 0 {
		maxRes = DefaultMaxReservations
	}
	s.maxRes = max(maxRes/n, 1)
	per := int32(0)
	if opts.MaxKeys > 0 {
		per = int32(min(max(opts.MaxKeys/n, 1), maxEntries))
	}
	budget := int64(0)
	if opts.MaxBytes > 0 {
		budget = max(opts.MaxBytes/int64(n), 1)
	}
	for i := range s.shards {
		s.shards[i].init(per, budget)
	}
	if opts.StatePath != "" {
		if id, _, ok := s.boot(); ok {
			s.bootID = bootHash(id)
		}
		s.load() // before the clock runs: it may move the store's timeline
	}
	if s.clock != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.clock.run(s.stop)
		}()
	}
	if opts.StatePath != "" {
		if opts.SnapshotInterval > 0 {
			s.wg.Add(1)
			go s.loop(opts.SnapshotInterval, s.snapshotIfChanged)
		}
	}
	if opts.SweepInterval > 0 {
		s.wg.Add(1)
		go s.loop(opts.SweepInterval, s.sweep)
	}
	return s, nil
}

// loop calls f every d until Close.
func (s *Store) loop(d time.Duration, f func()) {
	defer s.wg.Done()
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			f()
		}
	}
}

// Close stops the background goroutines and, with a state file, writes a
// last snapshot, whose error it returns. The store still answers
// afterwards, but nothing more is written to disk.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop)
		s.wg.Wait()
		if s.opts.StatePath != "" {
			s.closeErr = s.Snapshot()
		}
	})
	return s.closeErr
}

// hash mixes the rule ID and the key into the 64 bits that choose the
// shard (top bits), the index slot (low bits) and the slot's fingerprint.
func (s *Store) hash(rule, key string) uint64 {
	return s.mix(limiter.HashID(rule), key)
}

func (s *Store) mix(ruleHash uint64, key string) uint64 {
	return keyHash(ruleHash, s.mult, key)
}

// hitHash is hash(r.ID, key), with the rule's part worked out once, by the
// rule (limiter.Rule.IDHash).
func (s *Store) hitHash(r *limiter.Rule, key string) uint64 {
	return s.mix(r.IDHash(), key)
}

// minPerShard is the smallest per-shard cap a key cap may leave before New
// uses fewer shards; minShardBytes is the same for a byte cap (three
// chunks of entries).
const (
	minPerShard   = 64
	minShardBytes = 3 * chunkBytes
)

// stackHits is the number of hits a request can have before apply
// allocates its scratch space.
const stackHits = 8

// work is apply's scratch state for one hit.
type work struct {
	h          uint64
	sh         int32 // shard
	idx        int32 // entry, or -1 if the key is not stored
	st         algo.State
	exp        int64
	at         int64 // the instant the hit was decided at
	allowed    bool  // some hit on this key allowed: st must be written
	superseded bool  // a later hit on the same key carries st on
}

// verb is what apply does with a request's hits.
type verb uint8

const (
	vCharge verb = iota
	vPeek
	vRelease
	vRefund
	vReserve
	vSettle
)

// Decide decides the hits, and unless peek charges them all or nothing
// (see limiter.Store). It never blocks on I/O, so ctx is not consulted; nor
// is it by the other verbs.
func (s *Store) Decide(_ context.Context, hits []limiter.Hit, peek bool, out []floodgate.Decision) error {
	if len(out) != len(hits) {
		return fmt.Errorf("memstore: %d decisions for %d hits", len(out), len(hits))
	}
	if len(hits) == 1 {
		if h := &hits[0]; h.Rule == nil || h.Cost < 1 {
			return checkHit(h, 0, 1)
		}
		return s.applyOne(&hits[0], &out[0], peek || hits[0].Check)
	}
	v := vCharge
	if peek {
		v = vPeek
	}
	return s.apply(v, hits, out, nil)
}

// Release ends the concurrency leases the hits name (limiter.Releaser).
func (s *Store) Release(_ context.Context, hits []limiter.Hit) error {
	return s.apply(vRelease, hits, nil, nil)
}

// Refund gives back the charges of the refundable hits (limiter.Refunder).
func (s *Store) Refund(_ context.Context, hits []limiter.Hit) error {
	return s.apply(vRefund, hits, nil, nil)
}

// Reserve charges the hits all or nothing and keeps a settle record for
// each reserved hit charged (limiter.Reserver).
func (s *Store) Reserve(_ context.Context, hits []limiter.Hit, out []floodgate.Decision) error {
	if len(out) != len(hits) {
		return fmt.Errorf("memstore: %d decisions for %d hits", len(out), len(hits))
	}
	return s.apply(vReserve, hits, out, nil)
}

// Settle ends the reservations the hits name with their actual costs
// (limiter.Reserver). The same settle sent again within
// limiter.SettledTTL is answered as the first was and changes nothing.
func (s *Store) Settle(_ context.Context, hits []limiter.Hit, out []limiter.Settled) error {
	if len(out) != len(hits) {
		return fmt.Errorf("memstore: %d answers for %d hits", len(out), len(hits))
	}
	return s.apply(vSettle, hits, nil, out)
}

var (
	_ limiter.Releaser = (*Store)(nil)
	_ limiter.Refunder = (*Store)(nil)
	_ limiter.Reserver = (*Store)(nil)
)

// checkHit checks hit i's rule and cost (at least least: 1, or 0 for a
// release or a settle).
func checkHit(h *limiter.Hit, i int, least int64) error {
	if h.Rule == nil {
		return fmt.Errorf("memstore: hit %d has no rule", i)
	}
	if h.Cost < least {
		return fmt.Errorf("memstore: %s: cost %d: %w", h.Rule.ID(), h.Cost, floodgate.ErrInvalidCost)
	}
	return nil
}

// apply does v to hits, all or nothing, under the locks of their shards,
// writing decisions into out or, for a settle, answers into settled.
func (s *Store) apply(v verb, hits []limiter.Hit, out []floodgate.Decision, settled []limiter.Settled) error {
	least := int64(1) // charges, peeks, reservations and refunds carry a cost
	if v == vRelease || v == vSettle {
		least = 0 // a settle's actual cost may be 0
	}
	for i := range hits {
		if h := &hits[i]; h.Rule == nil || h.Cost < least {
			return checkHit(h, i, least)
		}
	}
	if len(hits) == 0 {
		return nil
	}
	var buf [stackHits]work
	var lockBuf [stackHits]int32
	w, locks := buf[:0], lockBuf[:0]
	if len(hits) > stackHits {
		w, locks = make([]work, 0, len(hits)), make([]int32, 0, len(hits))
	}
	for i := range hits {
		h := s.hitHash(hits[i].Rule, hits[i].Key)
		w = append(w, work{h: h, sh: int32(h >> s.shift), idx: -1})
		locks = insertSorted(locks, int32(h>>s.shift))
	}
	for _, l := range locks {
		s.shards[l].lock()
	}
	now := s.refine(&s.shards[locks[0]], s.now())
	var err error
	switch v {
	case vRelease, vRefund:
		err = s.giveBack(w, hits, now, v == vRefund)
	case vSettle:
		err = s.settle(w, hits, settled, now)
	default:
		err = s.decide(w, hits, out, now, v == vPeek)
		if err == nil && v == vReserve {
			s.reserve(w, hits, out, now)
		}
	}
	for i := len(locks) - 1; i >= 0; i-- {
		s.shards[locks[i]].mu.Unlock()
	}
	return err
}

// applyOne is Decide for a request of one hit, the common
// case, without the bookkeeping that several hits need.
func (s *Store) applyOne(hit *limiter.Hit, out *floodgate.Decision, peek bool) error {
	h := s.hitHash(hit.Rule, hit.Key)
	sh := &s.shards[h>>s.shift]
	p := hit.Rule.Params()
	// The clock is read before the lock, to keep the critical section
	// short; an instant older than the key's state is clamped below. The
	// cached clock's common case is inlined here.
	var now int64
	if s.clock != nil {
		now = s.clock.now()
	} else {
		now = s.now()
	}
	sh.lock()
	if s.clock != nil {
		now = s.refineCached(sh, now)
	}
	var st algo.State
	var e *entry
	var oldExt int64
	idx := sh.find(h, hit.Rule, hit.Key)
	if idx >= 0 {
		e = sh.at(idx)
		if s.live(e, now) {
			if inPlace(p.Algorithm()) {
				err := s.decideInPlace(sh, e, p, hit, out, now, peek)
				sh.mu.Unlock()
				return err
			}
			st = e.st
		}
		oldExt = extCost(e.st.Ext) // before Decide, which may grow it in place
	}
	t, wall := s.instant(p, now)
	read := t
	if t < st.Last {
		t = st.Last
		sh.clamps++
	}
	err := p.DecideInto(&st, algo.Request{Now: t, Cost: hit.Cost, Peek: peek, Lease: hit.Lease}, out)
	onWall(out, wall, t-read)
	out.At, out.Mark = now-s.rebase, 0
	switch {
	case err != nil || peek:
	case out.Allowed:
		if marked(p.Algorithm()) {
			out.Mark = t
		}
		exp := expiry(hit.Rule, &st, out, expiryBase(t, now, wall))
		if e != nil {
			e.st, e.exp, e.rule, e.deny = st, exp, hit.Rule, 0
			sh.regrow(oldExt, extCost(st.Ext))
			if sh.over() {
				s.trim(sh, pins{one: idx}, now)
			}
		} else {
			s.insert(sh, h, hit.Rule, hit.Key, st, exp, now, noPins)
		}
		sh.writes++
	case e != nil && s.live(e, now):
		denied(e, expiryBase(t, now, wall), out.RetryAfter)
	}
	sh.mu.Unlock()
	if err != nil {
		return fmt.Errorf("memstore: %s: %w", hit.Rule.ID(), err)
	}
	return nil
}

// inPlace reports whether alg's decisions may work on a stored state
// directly: the rate algorithms write their state only when they allow a
// charge, and have no variable part, so there is nothing to undo after a
// denial or an error and no memory to account for.
func inPlace(alg floodgate.Algorithm) bool {
	return alg.Family() == floodgate.FamilyRate
}

// decideInPlace is applyOne's path for a live entry e of an algorithm
// that inPlace accepts. The shard is locked.
func (s *Store) decideInPlace(sh *shard, e *entry, p *algo.Params, hit *limiter.Hit, out *floodgate.Decision, now int64, peek bool) error {
	t := now
	if t < e.st.Last {
		t = e.st.Last
		sh.clamps++
	}
	if err := p.DecideInto(&e.st, algo.Request{Now: t, Cost: hit.Cost, Peek: peek, Lease: hit.Lease}, out); err != nil {
		return fmt.Errorf("memstore: %s: %w", hit.Rule.ID(), err)
	}
	out.At, out.Mark = now-s.rebase, 0
	switch {
	case peek:
	case out.Allowed:
		e.exp = expiry(hit.Rule, &e.st, out, t)
		if e.rule != hit.Rule {
			e.rule = hit.Rule
		}
		if e.deny != 0 {
			e.deny = 0
		}
		sh.writes++
	default:
		denied(e, t, out.RetryAfter)
	}
	return nil
}

// denied records on e a denial decided at t (on the monotonic timeline)
// that the same cost may retry after retry: the key is denying until then.
// An entry stays as it is when a denial changes nothing, as is the rule
// for an attacker who retries as soon as told.
func denied(e *entry, t int64, retry time.Duration) {
	if until := satAdd(t, int64(retry)); until > e.deny {
		e.deny = until
	}
}

// insertSorted adds v to the ascending set l.
func insertSorted(l []int32, v int32) []int32 {
	i := len(l)
	for i > 0 && l[i-1] > v {
		i--
	}
	if i > 0 && l[i-1] == v {
		return l
	}
	l = append(l, 0)
	copy(l[i+1:], l[i:])
	l[i] = v
	return l
}

// decide charges (or peeks) every hit on a copy of its state, in order (a
// later hit on the same key sees what the earlier ones charged), and
// writes the copies back only if the charge goes ahead (limiter.Verdict):
// a check is looked at, never charged, and a hit of a group that denies is
// not charged. The hits' shards are locked.
func (s *Store) decide(w []work, hits []limiter.Hit, out []floodgate.Decision, now int64, peek bool) error {
	var verdict limiter.Verdict
	multi := len(hits) > 1
	for i := range hits {
		hit, wk := &hits[i], &w[i]
		sh := &s.shards[wk.sh]
		dup := -1
		for j := i - 1; j >= 0; j-- {
			if w[j].h == wk.h && hits[j].Key == hit.Key && hits[j].Rule.ID() == hit.Rule.ID() {
				dup = j
				break
			}
		}
		if dup >= 0 {
			// The same key twice: decide on the earlier hit's outcome.
			prev := &w[dup]
			wk.idx, wk.st, wk.exp, wk.allowed = prev.idx, prev.st, prev.exp, prev.allowed
			prev.superseded = true
			if peek && out[dup].Allowed && !hits[dup].Check {
				// A peek left the earlier hit's state as it found it:
				// take its cost from a copy here, as its charge would,
				// so that this hit is answered as in the charge.
				if wk.st.Ext != nil {
					wk.st.Ext = cloneExt(wk.st.Ext)
				}
				prevHit := &hits[dup]
				if _, err := prevHit.Rule.Params().Decide(&wk.st, algo.Request{Now: prev.at, Cost: prevHit.Cost, Lease: prevHit.Lease}); err != nil {
					return fmt.Errorf("memstore: %s: %w", prevHit.Rule.ID(), err)
				}
			}
		} else {
			wk.idx = sh.find(wk.h, hit.Rule, hit.Key)
			if wk.idx >= 0 {
				e := sh.at(wk.idx)
				if s.live(e, now) {
					wk.st, wk.exp = e.st, e.exp
					if multi && !peek && wk.st.Ext != nil {
						wk.st.Ext = cloneExt(wk.st.Ext)
					}
				}
			}
		}
		t, wall := s.instant(hit.Rule.Params(), now)
		read := t
		if t < wk.st.Last {
			t = wk.st.Last
			sh.clamps++
		}
		wk.at = t
		d, err := hit.Rule.Params().Decide(&wk.st, algo.Request{Now: t, Cost: hit.Cost, Peek: peek || hit.Check, Lease: hit.Lease})
		onWall(&d, wall, t-read)
		d.At = now - s.rebase
		out[i] = d
		if err != nil {
			return fmt.Errorf("memstore: %s: %w", hit.Rule.ID(), err)
		}
		verdict.Add(hit, d.Allowed)
		switch {
		case d.Allowed && !hit.Check:
			wk.allowed = true
			wk.exp = max(wk.exp, expiry(hit.Rule, &wk.st, &d, expiryBase(t, now, wall)))
		case !d.Allowed && !peek && wk.idx >= 0:
			if e := sh.at(wk.idx); s.live(e, now) {
				denied(e, expiryBase(t, now, wall), d.RetryAfter)
			}
		}
	}
	if peek || verdict.Refused() {
		return nil
	}
	for i := range hits {
		if out[i].Allowed && !hits[i].Check && marked(hits[i].Rule.Params().Algorithm()) {
			out[i].Mark = w[i].at
		}
	}
	// Existing entries first, then the new ones; an insert may evict, but
	// never an entry of this request (pins). Byte budgets are enforced once
	// everything is written.
	for pass := 0; pass < 2; pass++ {
		for i := range w {
			wk := &w[i]
			if wk.superseded || !wk.allowed || (pass == 0) != (wk.idx >= 0) {
				continue
			}
			sh := &s.shards[wk.sh]
			if wk.idx >= 0 {
				e := sh.at(wk.idx)
				old := extCost(e.st.Ext)
				e.st, e.exp, e.rule, e.deny = wk.st, wk.exp, hits[i].Rule, 0
				sh.regrow(old, extCost(e.st.Ext))
			} else {
				wk.idx = s.insert(sh, wk.h, hits[i].Rule, hits[i].Key, wk.st, wk.exp, now, pins{one: -1, w: w, sh: wk.sh})
			}
			sh.writes++
		}
	}
	for i := range w {
		if sh := &s.shards[w[i].sh]; sh.over() {
			s.trim(sh, pins{one: -1, w: w, sh: w[i].sh}, now)
		}
	}
	return nil
}

// marked reports whether a charge of alg says where it was counted
// (Decision.Mark), for a refund: those of windows, sliding logs and
// quotas do.
func marked(alg floodgate.Algorithm) bool {
	return alg.Kind() != floodgate.KindConcurrency && alg.Family() != floodgate.FamilyRate
}

// giveBack ends the leases named by the concurrency hits (a release) or
// gives back the charges of refundable hits, and of the windows', logs'
// and quotas' hits that name their charges' marks (refund). Other hits
// are left alone.
func (s *Store) giveBack(w []work, hits []limiter.Hit, now int64, refund bool) error {
	for i := range hits {
		hit, wk := &hits[i], &w[i]
		p := hit.Rule.Params()
		alg := p.Algorithm()
		exact := refund && hit.Mark != 0 && marked(alg)
		if (!refund && alg.Kind() != floodgate.KindConcurrency) || (refund && !alg.Traits().Refundable && !exact) {
			continue
		}
		sh := &s.shards[wk.sh]
		var st algo.State
		var e *entry
		t, wall := s.instant(p, now) // a quota's is the wall clock's
		if idx := sh.find(wk.h, hit.Rule, hit.Key); idx >= 0 {
			if e = sh.at(idx); s.live(e, now) {
				if t < e.st.Last {
					t = e.st.Last
					sh.clamps++
				}
				old := extCost(e.st.Ext)
				if exact {
					if err := p.RefundAt(&e.st, t, hit.Mark, hit.Cost); err != nil {
						return fmt.Errorf("memstore: %s: refund: %w", hit.Rule.ID(), err)
					}
				} else if refund {
					if err := p.Refund(&e.st, t, hit.Cost); err != nil {
						return fmt.Errorf("memstore: %s: refund: %w", hit.Rule.ID(), err)
					}
				} else if err := p.Release(&e.st, t, hit.Lease); err != nil {
					return fmt.Errorf("memstore: %s: release: %w", hit.Rule.ID(), err)
				}
				sh.regrow(old, extCost(e.st.Ext))
				st = e.st
				e.deny = 0 // units came back: no longer the denial it was
			}
		}
		d, _, err := peekFree(hit, &st, t)
		if err != nil {
			return err
		}
		if e != nil && e.rule != nil {
			e.exp = expiry(hit.Rule, &e.st, &d, expiryBase(t, now, wall))
			sh.writes++
		}
	}
	return nil
}

// instant returns the instant a decision of p is made at, given now (the
// store's monotonic timeline): a calendar quota's is the wall clock's
// (wall reports it).
func (s *Store) instant(p *algo.Params, now int64) (t int64, wall bool) {
	if p.Algorithm().Family() == floodgate.FamilyQuota {
		return s.wall(), true
	}
	return now, false
}

// onWall moves the waits of a decision d made at an instant that was
// clamped up by lag to the newest one its key had seen onto the wall
// clock, when the instant is the wall clock's (wall): after the wall clock
// stepped back, a calendar quota's period ends lag later than d says by
// the clock that cuts it, and so do the key's expiry and a denial's wait.
// Instants on the monotonic timeline are clamped by a tick at most, and
// their waits stay as they are.
func onWall(d *floodgate.Decision, wall bool, lag int64) {
	if !wall || lag <= 0 {
		return
	}
	if d.RetryAfter > 0 {
		d.RetryAfter = time.Duration(satAdd(int64(d.RetryAfter), lag))
	}
	if d.ResetAfter > 0 {
		d.ResetAfter = time.Duration(satAdd(int64(d.ResetAfter), lag))
	}
}

// live reports whether entry e, in a shard whose lock is held, still holds
// its state at now (the monotonic timeline): its expiry has not passed, or
// it is a calendar quota's whose count is for a period that the wall clock
// has not left yet. A quota's expiry is set on the monotonic timeline from
// the wall clock's time to the period's end, so a wall clock stepped back
// since moves the end later than the expiry says; live then moves the
// expiry there, for the sweep, the state file and eviction to see.
func (s *Store) live(e *entry, now int64) bool {
	return e.exp > now || s.liveOnWall(e, now)
}

// liveOnWall is live for an entry whose expiry has passed.
func (s *Store) liveOnWall(e *entry, now int64) bool {
	if e.rule == nil || e.st.A <= 0 || e.rule.Params().Algorithm().Family() != floodgate.FamilyQuota {
		return false
	}
	left := e.st.C - s.wall()
	if left <= 0 {
		return false
	}
	e.exp = satAdd(now, left)
	return true
}

// expiryBase is the instant on the monotonic timeline that the expiry of a
// decision made at t counts from.
func expiryBase(t, now int64, wall bool) int64 {
	if wall {
		return now
	}
	return t
}

// expiry is the instant the state left by an allowed decision d is back to
// full: d.ResetAfter from now, or the last lease's expiry for concurrency.
// Expiries are on the store's monotonic timeline.
func expiry(r *limiter.Rule, st *algo.State, d *floodgate.Decision, now int64) int64 {
	exp := satAdd(now, int64(d.ResetAfter))
	if r.Params().Algorithm().Kind() == floodgate.KindConcurrency && st.Ext != nil {
		for _, e := range st.Ext.Entries {
			exp = max(exp, e.At)
		}
	}
	return exp
}

func cloneExt(x *algo.Ext) *algo.Ext {
	return &algo.Ext{Entries: append([]algo.Entry(nil), x.Entries...)}
}

// sweep removes the idle keys of every shard, a chunk at a time so that no
// lock is held for long.
func (s *Store) sweep() {
	for k := range s.shards {
		sh := &s.shards[k]
		sh.mu.Lock()
		used := sh.used
		sweepReservations(sh, s.now())
		sh.mu.Unlock()
		for lo := int32(0); lo < used; lo += chunkSize {
			sh.mu.Lock()
			now := s.now()
			for i := lo; i < min(lo+chunkSize, sh.used); i++ {
				if e := sh.at(i); e.rule != nil && !s.live(e, now) {
					s.remove(sh, i)
					sh.expired++
				}
			}
			sh.mu.Unlock()
		}
	}
}

// Sweep removes every idle key now, as the periodic sweep does.
func (s *Store) Sweep() { s.sweep() }

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	st := Stats{
		Loaded:         s.loaded,
		Rebased:        time.Duration(s.rebase),
		LoadError:      s.loadErr,
		Snapshots:      s.snapshots.Load(),
		SnapshotErrors: s.snapErrors.Load(),
	}
	if p := s.lastSnapErr.Load(); p != nil {
		st.LastSnapshotError = *p
	}
	if ns := s.lastSnapshot.Load(); ns != 0 {
		st.LastSnapshot = time.Unix(0, ns)
	}
	for k := range s.shards {
		sh := &s.shards[k]
		sh.mu.Lock()
		st.Keys += int(sh.n)
		st.Bytes += sh.bytes
		st.Evictions += sh.evictions
		st.DenyingEvictions += sh.denyEvictions
		st.Expired += sh.expired
		st.Clamps += sh.clamps
		st.Reservations += len(sh.res)
		st.ReservationEvictions += sh.resEvictions
		st.ReservationsExpired += sh.resExpired
		sh.mu.Unlock()
	}
	return st
}

// InProcess reports true: the store answers from memory and never waits on
// I/O, so the engine calls it without a deadline (limiter.InProcess).
func (s *Store) InProcess() bool { return true }

// wallClock tells two times from the monotonic clock: Unix time plus an
// offset that sync refreshes from the wall clock (now), and the monotonic
// timeline counted from the wall-clock reading at start, which no step of
// the wall clock moves (mono).
type wallClock struct {
	start     time.Time
	startUnix int64        // Unix ns at start
	offset    atomic.Int64 // Unix ns at start, as of the latest sync
}

func newWallClock() *wallClock {
	c := &wallClock{start: time.Now()}
	c.startUnix = c.start.UnixNano()
	c.sync()
	return c
}

// mono returns the monotonic timeline's instant.
func (c *wallClock) mono() int64 { return int64(time.Since(c.start)) + c.startUnix }

// sync re-reads the wall clock, so that steps of it show.
func (c *wallClock) sync() {
	n := time.Now()
	c.offset.Store(n.UnixNano() - int64(n.Sub(c.start)))
}

func (c *wallClock) now() int64 { return int64(time.Since(c.start)) + c.offset.Load() }

// peekFree peeks at a key's state st at t after a give-back or a settle:
// it returns the decision for one more unit (what the key's expiry is
// worked out from) and the units free.
func peekFree(hit *limiter.Hit, st *algo.State, t int64) (floodgate.Decision, int64, error) {
	d, err := hit.Rule.Params().Decide(st, algo.Request{Now: t, Cost: 1, Peek: true})
	if err != nil && !errors.Is(err, floodgate.ErrNeverFits) {
		return d, 0, fmt.Errorf("memstore: %s: %w", hit.Rule.ID(), err)
	}
	free := d.Remaining // what one more unit would leave
	if d.Allowed {
		free++
	}
	return d, free, nil
}
