package keystore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
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
}

// Store holds the records of a backend and resolves keys for the policy.
// Its methods are safe for concurrent use.
type Store struct {
	o    Options
	log  *slog.Logger
	snap atomic.Pointer[snapshot]
	kick chan struct{} // asks Run to rebuild or reload

	mu      sync.Mutex // serialises changes and reloads; guards recs and version
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
		return nil, err
	}
	return s, nil
}

// LookupKey resolves the key of a secret's SHA-256 against p: nil when no
// active key has the secret (or it expired after a rotation).
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
// active key has that name (policy.KeyNamer). A request that gives its key
// by name (an access log replayed) carries no secret, so no secret's
// expiry applies.
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
	k, err := p.NewKey(e.rec.Name, e.rec.Plan, options(e.rec))
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

// rebuild makes a new snapshot of s.recs against the current policy.
// s.mu is held.
func (s *Store) rebuild() {
	p := s.o.Policy()
	sn := &snapshot{pol: p, byHash: map[[sha256.Size]byte]*entry{}, byName: map[string]*entry{}}
	for name := range s.recs {
		r := s.recs[name]
		if !r.Active() {
			continue
		}
		k, err := p.NewKey(r.Name, r.Plan, options(&r))
		if err != nil {
			s.log.Warn("keystore: key not usable with this policy", "key", r.Name, "err", err)
			continue
		}
		sn.byName[r.Name] = &entry{rec: &r, key: k}
		for _, sec := range r.Secrets {
			var sum [sha256.Size]byte
			if b, err := hex.DecodeString(sec.SHA256); err != nil || len(b) != len(sum) {
				continue
			} else {
				copy(sum[:], b)
			}
			e := &entry{rec: &r, key: k}
			if !sec.NotAfter.IsZero() {
				e.notAfter = sec.NotAfter.UnixNano()
			}
			sn.byHash[sum] = e
		}
	}
	s.snap.Store(sn)
}

// reload reads every record from the backend and rebuilds the snapshot.
func (s *Store) reload(ctx context.Context) error {
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

// refresh reloads when the backend changed and rebuilds when the policy
// did.
func (s *Store) refresh(ctx context.Context) {
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
		if err := s.reload(ctx); err != nil {
			s.log.Warn("keystore: reload", "err", err)
		}
	}
}

// Refresh reloads the records now if the backend changed (tests, and a
// policy reload).
func (s *Store) Refresh(ctx context.Context) { s.refresh(ctx) }

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
// now, and its record.
func (s *Store) Create(ctx context.Context, name, plan string, o policy.KeyOptions) (raw string, rec Record, err error) {
	if !ValidName(name) {
		return "", Record{}, ErrBadName
	}
	if _, err := s.o.Policy().NewKey(name, plan, o); err != nil {
		return "", Record{}, err
	}
	raw, sum, err := NewSecret()
	if err != nil {
		return "", Record{}, err
	}
	if err := s.catchUp(ctx); err != nil {
		return "", Record{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.recs[name]; dup {
		return "", Record{}, ErrExists
	}
	now := s.o.Now().UTC()
	rec = Record{Name: name, Plan: plan, Secrets: []Secret{{SHA256: sum, Created: now}},
		Rate: o.Rate, Burst: o.Burst, Quota: o.Quota, Created: now, Updated: now}
	if err := s.saveLocked(ctx, rec); err != nil {
		return "", Record{}, err
	}
	return raw, rec.clone(), nil
}

// catchUp brings s.recs up to date before a change, so that a change
// made through another instance is not overwritten by a stale copy.
func (s *Store) catchUp(ctx context.Context) error {
	v, err := s.o.Backend.Version(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	same := v == s.version
	s.mu.Unlock()
	if same {
		return nil
	}
	return s.reload(ctx)
}

// saveLocked writes rec and applies it at once in this process. s.mu is
// held.
func (s *Store) saveLocked(ctx context.Context, rec Record) error {
	if err := s.o.Backend.Save(ctx, rec); err != nil {
		return err
	}
	s.recs[rec.Name] = rec
	if v, err := s.o.Backend.Version(ctx); err == nil {
		s.version = v
	}
	s.rebuild()
	return nil
}

// Update changes the record named name with f and saves it. A revoked key
// cannot be changed.
func (s *Store) Update(ctx context.Context, name string, f func(r *Record) error) (Record, error) {
	if err := s.catchUp(ctx); err != nil {
		return Record{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.recs[name]
	if !ok {
		return Record{}, ErrNotFound
	}
	if cur.Revoked {
		return Record{}, ErrRevoked
	}
	r := cur.clone()
	if err := f(&r); err != nil {
		return Record{}, err
	}
	if !r.Revoked {
		if _, err := s.o.Policy().NewKey(r.Name, r.Plan, options(&r)); err != nil {
			return Record{}, err
		}
	}
	r.Updated = s.o.Now().UTC()
	if err := s.saveLocked(ctx, r); err != nil {
		return Record{}, err
	}
	return r.clone(), nil
}

// Rotate gives the key a new secret, returned only now; every older
// secret keeps working for overlap at most (0: they stop at once). Secrets
// whose overlap has ended are dropped.
func (s *Store) Rotate(ctx context.Context, name string, overlap time.Duration) (string, Record, error) {
	raw, sum, err := NewSecret()
	if err != nil {
		return "", Record{}, err
	}
	rec, err := s.Update(ctx, name, func(r *Record) error {
		now := s.o.Now().UTC()
		end := now.Add(max(overlap, 0))
		keep := []Secret{{SHA256: sum, Created: now}}
		for _, sec := range r.Secrets {
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
