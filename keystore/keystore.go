package keystore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate/policy"
)

// Options configures a Store. Backend and Policy are required.
type Options struct {
	// Backend keeps the records.
	Backend Backend
	// Policy returns the current policy (a Reloader's Policy method).
	Policy func() *policy.Policy
	// Logger receives reloads and keys that no longer resolve (default:
	// discard).
	Logger *slog.Logger
	// Now is the clock of rotations (default time.Now).
	Now func() time.Time
	// PollInterval is how often Run reads the backend's version (default
	// 500 ms).
	PollInterval time.Duration
	// LoadLater starts the store without its records when New cannot
	// read the backend (a Redis that does not answer yet), instead of
	// failing: until Run reads them, no key of the backend is found
	// (the policy file's keys are) and changes fail as the backend does.
	LoadLater bool
	// RefreshTimeout bounds one look at the backend by Run and Refresh
	// (its version, and the records that changed), whatever the caller's
	// context: a backend that stopped answering (a Redis stopped or cut
	// off behind an open connection) does not hold the poll, which looks
	// again at its next tick (default 5 s). A policy reload does not
	// look at the backend (Follow).
	RefreshTimeout time.Duration
}

// defaultRefreshTimeout is Options.RefreshTimeout's default.
const defaultRefreshTimeout = 5 * time.Second

// unread is the version of a store whose records were never read: it
// starts with a NUL byte, which no backend's version holds, so the first
// version read differs from it and the records are read.
const unread = "\x00unread"

// Store holds the records of a backend and resolves keys for the policy.
// Its methods are safe for concurrent use.
type Store struct {
	o    Options
	log  *slog.Logger
	snap atomic.Pointer[snapshot]
	kick chan struct{} // asks Run to rebuild or reload

	// wmu serialises changes and reloads, each a read of the backend and
	// what follows from it, so that no change starts from a record older
	// than one another change has written. Held across the backend's I/O.
	wmu sync.Mutex
	// mu guards recs and version: taken to write them with wmu held, and
	// to read them without; never held across I/O.
	mu      sync.Mutex
	recs    map[string]Record
	version string
}

// snapshot is the immutable view the request path reads.
type snapshot struct {
	pol    *policy.Policy
	byHash map[[sha256.Size]byte]*entry
	byName map[string]*entry // the active keys, for requests that give a key by name
}

type entry struct {
	rec      *Record
	key      *policy.Key // resolved against pol; nil when the plan is gone
	notAfter int64       // Unix ns after which this secret fails; 0: never
}

// New loads the backend's records.
func New(ctx context.Context, o Options) (*Store, error) {
	if o.Backend == nil || o.Policy == nil {
		return nil, fmt.Errorf("keystore: a backend and a policy are required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Store{o: o, log: o.Logger, kick: make(chan struct{}, 1), recs: map[string]Record{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if err := s.reload(ctx); err != nil {
		if !o.LoadLater {
			return nil, err
		}
		s.log.Warn("keystore: keys not read yet: the policy file's keys are served, the others once the backend answers", "err", err)
		s.mu.Lock()
		s.version = unread
		s.rebuild()
		s.mu.Unlock()
	}
	return s, nil
}

// LookupKey resolves the key of a secret's SHA-256 against p: nil when no
// active key has the secret (or it expired after a rotation), or when p's
// file has a key of the same name.
func (s *Store) LookupKey(p *policy.Policy, sum *[sha256.Size]byte) *policy.Key {
	sn := s.snap.Load()
	e := sn.byHash[*sum]
	if e == nil {
		return nil
	}
	if e.notAfter != 0 && s.o.Now().UnixNano() >= e.notAfter {
		return nil
	}
	return s.resolve(sn, e, p)
}

// LookupKeyName resolves the active key named name against p: nil when no
// active key has that name, or when p's file has a key of that name
// (policy.KeyNamer). A request that gives its key by name (an access log
// replayed) carries no secret, so no secret's expiry applies.
func (s *Store) LookupKeyName(p *policy.Policy, name string) *policy.Key {
	sn := s.snap.Load()
	e := sn.byName[name]
	if e == nil {
		return nil
	}
	return s.resolve(sn, e, p)
}

// resolve returns the key of e, a key of snapshot sn, against p.
func (s *Store) resolve(sn *snapshot, e *entry, p *policy.Policy) *policy.Key {
	if sn.pol == p {
		return e.key
	}
	// The policy was reloaded since the snapshot was built: resolve this
	// one now and have the snapshot rebuilt.
	s.signal()
	if _, shadowed := p.FileKey(e.rec.Name); shadowed {
		return nil
	}
	k, err := p.NewKey(e.rec.Name, e.rec.Plan, ServingOptions(e.rec))
	if err != nil {
		return nil
	}
	return k
}

func (s *Store) signal() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func options(r *Record) policy.KeyOptions {
	return policy.KeyOptions{Rate: r.Rate, Burst: r.Burst, Quota: r.Quota, Generation: r.Generation}
}

// ServingOptions are the options of the key r in use: its own rate,
// burst or quota is left out when a reload took that limit from its plan
// (the key keeps working under the plan), where a change asking for one
// is refused (ChangeOptions).
func ServingOptions(r *Record) policy.KeyOptions {
	o := options(r)
	o.KeepOwn = true
	return o
}

// ChangeOptions are the options of next, a change of the record cur: a
// change that leaves the plan and the key's own limits as they were (a
// rotation, a reset, a disable) is not refused for an own limit a reload
// took from the plan, nor for a plan a reload removed (Update does not
// check it); one that sets them is checked against the plan.
func ChangeOptions(cur, next *Record) policy.KeyOptions {
	o := options(next)
	o.KeepOwn = next.Plan == cur.Plan && next.Rate == cur.Rate && next.Burst == cur.Burst && next.Quota == cur.Quota
	return o
}

// rebuild makes a new snapshot of s.recs against the current policy.
// A record whose name a key of the policy file has is left out: the
// file's key wins, and two keys of one name would count under one counter
// (key:NAME). s.mu is held.
func (s *Store) rebuild() {
	p := s.o.Policy()
	sn := &snapshot{pol: p, byHash: map[[sha256.Size]byte]*entry{}, byName: map[string]*entry{}}
	fileKeys := make(map[string]bool, len(p.File().Keys))
	for _, k := range p.File().Keys {
		fileKeys[k.Name] = true
	}
	for name := range s.recs {
		s.enter(sn, s.recs[name], fileKeys[name])
	}
	s.snap.Store(sn)
}

// rebuildChanged makes a new snapshot in which only the keys named in
// prev (mapped to their records in the current snapshot; a zero Record
// for a key new to it) are made again from s.recs, so that a change of
// one key among many resolves that one; a full rebuild when the policy
// changed since the snapshot was built. s.mu is held.
func (s *Store) rebuildChanged(prev map[string]Record) {
	p := s.o.Policy()
	cur := s.snap.Load()
	if cur == nil || cur.pol != p {
		s.rebuild()
		return
	}
	sn := &snapshot{pol: p, byHash: maps.Clone(cur.byHash), byName: maps.Clone(cur.byName)}
	for name, r := range prev {
		delete(sn.byName, name)
		for _, sec := range r.Secrets {
			if sum, ok := secretSum(sec); ok && sn.byHash[sum] != nil && sn.byHash[sum].rec.Name == name {
				delete(sn.byHash, sum)
			}
		}
	}
	for name := range prev {
		if r, ok := s.recs[name]; ok {
			_, file := p.FileKey(name)
			s.enter(sn, r, file)
		}
	}
	s.snap.Store(sn)
}

// enter adds the key r to sn, a snapshot being built, when it is active
// and file (the policy file has a key of its name) is false; a key that
// does not resolve against the snapshot's policy (its plan gone, its own
// limits no longer valid with the plan's) is added unresolved.
func (s *Store) enter(sn *snapshot, r Record, file bool) {
	if !r.Active() {
		return
	}
	if file {
		s.log.Warn("keystore: key refused: the policy file has a key of the same name", "key", r.Name)
		return
	}
	k, err := sn.pol.NewKey(r.Name, r.Plan, ServingOptions(&r))
	if err != nil {
		// Kept unresolved (refused while the view's policy holds): a
		// reload that makes it usable again serves it from the first
		// request, resolved on the spot as every key is then.
		s.log.Warn("keystore: key not usable with this policy", "key", r.Name, "err", err)
		k = nil
	}
	sn.byName[r.Name] = &entry{rec: &r, key: k}
	for _, sec := range r.Secrets {
		sum, ok := secretSum(sec)
		if !ok {
			continue
		}
		e := &entry{rec: &r, key: k}
		if !sec.NotAfter.IsZero() {
			e.notAfter = sec.NotAfter.UnixNano()
		}
		sn.byHash[sum] = e
	}
}

// secretSum decodes the SHA-256 of sec.
func secretSum(sec Secret) (sum [sha256.Size]byte, ok bool) {
	b, err := hex.DecodeString(sec.SHA256)
	if err != nil || len(b) != len(sum) {
		return sum, false
	}
	copy(sum[:], b)
	return sum, true
}

// reload reads every record from the backend and rebuilds the snapshot.
func (s *Store) reload(ctx context.Context) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.reloadLocked(ctx)
}

// reloadLocked is reload with s.wmu held.
func (s *Store) reloadLocked(ctx context.Context) error {
	recs, v, err := s.o.Backend.Load(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs = make(map[string]Record, len(recs))
	for _, r := range recs {
		s.recs[r.Name] = r
	}
	s.version = v
	s.rebuild()
	return nil
}

// Subscriber announces changes made by other instances.
type Subscriber interface {
	Subscribe(ctx context.Context, changed func()) error
}

// Run keeps the snapshot current until ctx ends: it reloads the records
// when the backend's version changes (announced by a Subscriber backend,
// and polled every Options.PollInterval) and rebuilds the snapshot after a
// policy reload.
func (s *Store) Run(ctx context.Context) {
	if sub, ok := s.o.Backend.(Subscriber); ok {
		go func() {
			for ctx.Err() == nil {
				if err := sub.Subscribe(ctx, s.signal); err != nil {
					s.log.Warn("keystore: change notices lost; polling", "err", err)
				}
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}()
	}
	every := s.o.PollInterval
	if every <= 0 {
		every = pollInterval
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
		}
		s.refresh(ctx)
	}
}

// refreshTimeout is Options.RefreshTimeout or its default.
func (s *Store) refreshTimeout() time.Duration {
	if s.o.RefreshTimeout > 0 {
		return s.o.RefreshTimeout
	}
	return defaultRefreshTimeout
}

// refresh reloads when the backend changed and rebuilds when the policy
// did.
func (s *Store) refresh(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.refreshTimeout())
	defer cancel()
	v, err := s.o.Backend.Version(ctx)
	if err != nil {
		s.log.Warn("keystore: version", "err", err)
		return
	}
	s.mu.Lock()
	same := v == s.version
	if same && s.snap.Load().pol != s.o.Policy() {
		s.rebuild()
	}
	s.mu.Unlock()
	if !same {
		if err := s.catchUp(ctx); err != nil {
			s.log.Warn("keystore: reload", "err", err)
		}
	}
}

// Refresh reads now the records that changed, if the backend did, and
// rebuilds the snapshot if the policy changed (tests). A backend that
// does not answer within Options.RefreshTimeout is logged and left for
// Run's next look.
func (s *Store) Refresh(ctx context.Context) { s.refresh(ctx) }

// Follow rebuilds the snapshot if the policy changed since it was built,
// without reading the backend (a policy reload: the records are the
// same), and has Run look at the backend at once. A reload calls it with
// the reloader's lock held, so a backend that stopped answering holds
// neither that reload nor the next.
func (s *Store) Follow() {
	s.mu.Lock()
	if sn := s.snap.Load(); sn == nil || sn.pol != s.o.Policy() {
		s.rebuild()
	}
	s.mu.Unlock()
	s.signal()
}

// List returns every record, by name.
func (s *Store) List() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Record, 0, len(s.recs))
	for _, r := range s.recs {
		out = append(out, r.clone())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Get returns the record named name.
func (s *Store) Get(name string) (Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recs[name]
	if !ok {
		return Record{}, ErrNotFound
	}
	return r.clone(), nil
}

// Create makes a key in plan and returns its secret, which is shown only
// now, and its record. A name a key of the policy file has is ErrExists;
// a store that holds server.admin.max_keys keys already (revoked ones
// included, and those other instances made, also at the same moment:
// the backend checks the bound where it adds the record) is ErrFull.
func (s *Store) Create(ctx context.Context, name, plan string, o policy.KeyOptions) (raw string, rec Record, err error) {
	return s.create(ctx, name, plan, o, false)
}

// CreateDisabled makes a key as Create does, disabled: the one write that
// makes it holds it disabled, so that no instance takes it before it is
// enabled (Update), and a caller that leaves once it is written leaves it
// disabled.
func (s *Store) CreateDisabled(ctx context.Context, name, plan string, o policy.KeyOptions) (raw string, rec Record, err error) {
	return s.create(ctx, name, plan, o, true)
}

// create is Create, the key disabled when disabled is set.
func (s *Store) create(ctx context.Context, name, plan string, o policy.KeyOptions, disabled bool) (raw string, rec Record, err error) {
	if !ValidName(name) {
		return "", Record{}, ErrBadName
	}
	if _, ok := s.o.Policy().FileKey(name); ok {
		return "", Record{}, fmt.Errorf("keystore: key %q is in the policy file: %w", name, ErrExists)
	}
	if _, err := s.o.Policy().NewKey(name, plan, o); err != nil {
		return "", Record{}, err
	}
	raw, sum, err := NewSecret()
	if err != nil {
		return "", Record{}, err
	}
	rec, err = s.change(ctx, name, func(_ *Record) (Record, error) {
		// s.recs is up to date and still (change holds s.wmu).
		if most := s.o.Policy().Server().Admin.MaxKeys; most > 0 && len(s.recs) >= most {
			return Record{}, fmt.Errorf("%w: %d", ErrFull, most)
		}
		now := s.o.Now().UTC()
		return Record{Name: name, Plan: plan, Secrets: []Secret{{SHA256: sum, Created: now}},
			Rate: o.Rate, Burst: o.Burst, Quota: o.Quota, Disabled: disabled, Created: now, Updated: now}, nil
	}, true)
	if err != nil {
		return "", Record{}, err
	}
	return raw, rec, nil
}

// maxSwaps bounds the attempts of a change that other instances keep
// overtaking.
const maxSwaps = 16

// change is the read-modify-write of every change: with s.wmu held, it
// brings s.recs up to date, makes the new record with f from the current
// one (nil when there is none; create: a key that must not exist yet),
// and writes it if the backend's record is still the one f saw; when
// another instance sharing the backend changed it meanwhile, it reloads
// and asks f again.
func (s *Store) change(ctx context.Context, name string, f func(cur *Record) (Record, error), create bool) (Record, error) {
	return s.apply(ctx, name, func(cur *Record) (*Record, error) {
		rec, err := f(cur)
		return &rec, err
	}, create)
}

// Delete removes the revoked key named name from the store, so that it no
// longer counts toward server.admin.max_keys. A key that is not revoked is
// ErrNotRevoked: revoke it first. Its counters are left to expire: a key
// made again under its name counts where it did (its quota used so far),
// as only a reset starts a key's counts afresh. A reset's count is in the
// record Delete removes: a key that was reset counts, made again, where
// it counted before its first reset.
func (s *Store) Delete(ctx context.Context, name string) error {
	_, err := s.apply(ctx, name, func(cur *Record) (*Record, error) {
		if !cur.Revoked {
			return nil, ErrNotRevoked
		}
		return nil, nil
	}, false)
	return err
}

// apply is change with f's nil record deleting the key.
func (s *Store) apply(ctx context.Context, name string, f func(cur *Record) (*Record, error), create bool) (Record, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.catchUpLocked(ctx); err != nil {
		return Record{}, err
	}
	for range maxSwaps {
		var old *Record
		if cur, ok := s.recs[name]; ok { // s.wmu keeps s.recs still
			old = &cur
		}
		switch {
		case create && old != nil:
			return Record{}, ErrExists
		case !create && old == nil:
			return Record{}, ErrNotFound
		}
		var in *Record
		if old != nil {
			c := old.clone()
			in = &c
		}
		next, err := f(in)
		if err != nil {
			return Record{}, err
		}
		var from, to string
		switch {
		case next == nil:
			from, to, err = s.o.Backend.Delete(ctx, *old)
		case old == nil:
			// The bound is checked again where the records are, so that
			// instances adding keys at once cannot pass it together.
			most := s.o.Policy().Server().Admin.MaxKeys
			if from, to, err = s.o.Backend.Add(ctx, *next, most); errors.Is(err, ErrFull) {
				return Record{}, fmt.Errorf("%w: %d", ErrFull, most)
			}
		default:
			from, to, err = s.o.Backend.Swap(ctx, old, *next)
		}
		if errors.Is(err, ErrConflict) {
			// Another instance changed the record: read what changed, and
			// every record when that moved nothing (a record written
			// without a change of the version, by hand).
			before := s.version
			if err := s.catchUpLocked(ctx); err != nil {
				return Record{}, err
			}
			if s.version == before {
				if err := s.reloadLocked(ctx); err != nil {
					return Record{}, err
				}
			}
			continue
		}
		if err != nil {
			return Record{}, err
		}
		s.mu.Lock()
		prev := map[string]Record{name: s.recs[name]}
		rec := Record{}
		if next == nil {
			delete(s.recs, name)
		} else {
			rec = *next
			s.recs[name] = rec
		}
		if from == s.version {
			// Nothing else was written since the last read: s.recs is the
			// backend's state at to. Otherwise the next refresh reloads.
			s.version = to
		}
		s.rebuildChanged(prev)
		s.mu.Unlock()
		return rec.clone(), nil
	}
	return Record{}, fmt.Errorf("keystore: key %q: %w", name, ErrConflict)
}

// catchUp brings s.recs up to date with the backend.
func (s *Store) catchUp(ctx context.Context) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.catchUpLocked(ctx)
}

// catchUpLocked brings s.recs up to date, before a change so that a
// change made through another instance is not overwritten by a stale
// copy: it reads only the records changed since s.version
// (Backend.Changes), and every record when the backend cannot tell which
// changed or none was read yet. s.wmu is held.
func (s *Store) catchUpLocked(ctx context.Context) error {
	since := s.version // s.wmu keeps s.version still
	if since == unread {
		return s.reloadLocked(ctx)
	}
	changed, gone, v, full, err := s.o.Backend.Changes(ctx, since)
	if err != nil {
		return err
	}
	if full {
		return s.reloadLocked(ctx)
	}
	if v == since {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := make(map[string]Record, len(changed)+len(gone))
	for _, name := range gone {
		prev[name] = s.recs[name]
		delete(s.recs, name)
	}
	for _, r := range changed {
		prev[r.Name] = s.recs[r.Name]
		s.recs[r.Name] = r
	}
	s.version = v
	s.rebuildChanged(prev)
	return nil
}

// Update changes the record named name with f and saves it. A revoked key
// cannot be changed. f is given a copy of the current record; it is called
// again, on the newer record, when another instance sharing the backend
// changed the key meanwhile.
func (s *Store) Update(ctx context.Context, name string, f func(r *Record) error) (Record, error) {
	return s.change(ctx, name, func(cur *Record) (Record, error) {
		if cur.Revoked {
			return Record{}, ErrRevoked
		}
		r := cur.clone()
		if err := f(&r); err != nil {
			return Record{}, err
		}
		// A change of the plan or of the key's own limits is checked
		// against the policy; any other (a disable, a rotation, a reset)
		// is kept also for a key whose plan a reload removed, so that it
		// holds when a later reload gives the plan back.
		if o := ChangeOptions(cur, &r); !r.Revoked && !o.KeepOwn {
			if _, err := s.o.Policy().NewKey(r.Name, r.Plan, o); err != nil {
				return Record{}, err
			}
		}
		r.Updated = s.o.Now().UTC()
		return r, nil
	}, false)
}

// Rotate gives the key a new secret, returned only now; every older
// secret keeps working for overlap at most (0: they stop at once; more than
// MaxOverlap is ErrOverlap). Secrets whose overlap has ended are dropped,
// and so are the oldest past MaxSecrets.
func (s *Store) Rotate(ctx context.Context, name string, overlap time.Duration) (string, Record, error) {
	if overlap < 0 || overlap > MaxOverlap {
		return "", Record{}, ErrOverlap
	}
	raw, sum, err := NewSecret()
	if err != nil {
		return "", Record{}, err
	}
	rec, err := s.Update(ctx, name, func(r *Record) error {
		now := s.o.Now().UTC()
		end := now.Add(overlap)
		keep := []Secret{{SHA256: sum, Created: now}}
		// Newest first, as rotations put them.
		for _, sec := range r.Secrets {
			if len(keep) == MaxSecrets {
				break // the oldest end now
			}
			if sec.NotAfter.IsZero() || end.Before(sec.NotAfter) {
				sec.NotAfter = end
			}
			if !now.Before(sec.NotAfter) {
				continue // ended
			}
			keep = append(keep, sec)
		}
		r.Secrets = keep
		return nil
	})
	if err != nil {
		return "", Record{}, err
	}
	return raw, rec, nil
}
