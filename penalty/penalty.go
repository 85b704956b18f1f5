package penalty

import (
	"context"
	"errors"
	"hash/maphash"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/internal/follow"
	"github.com/floodgate/floodgate/internal/lograte"
	"github.com/floodgate/floodgate/policy"
)

// DefaultMaxBans bounds the bans and the offence counters a backend keeps.
const DefaultMaxBans = 100000

// startRead bounds New's first read of the bans: a store that answers
// nothing does not hold up the start, and the polling reads the bans once
// it answers.
const startRead = 5 * time.Second

// Ban is a key in the penalty box.
type Ban struct {
	// Rule names the rule that banned the key.
	Rule string `json:"ban"`
	// Key is what is banned: a client address (its counter key), an API
	// key's name, a user.
	Key string `json:"key"`
	// Kind is the rule's key: client_ip, api_key or user.
	Kind string `json:"kind"`
	// Until is when the ban ends.
	Until time.Time `json:"until"`
	// Strikes counts the bans of the key in a row (1 for a first).
	Strikes int `json:"strikes"`

	end int64 // Until on the store's clock (ms; Redis), 0 when the store has none
	// unseen marks a ban Offend made that another instance counts: one
	// that read it from the store's change log before this one's answer
	// came (Redis slow), or any, when the answer came too late.
	unseen bool
	// claimed marks a ban read from the store's change log that no
	// instance had counted: the one that read it counts it.
	claimed bool
}

// id is a ban's identity: its rule and key.
type id struct{ rule, key string }

// Backend keeps the offences and the bans.
type Backend interface {
	// Offend counts an offence of key against r; when it bans the key it
	// returns the ban.
	Offend(ctx context.Context, r *config.Ban, key string) (*Ban, error)
	// Bans returns the bans in force, and a version that changes whenever
	// they do.
	Bans(ctx context.Context) ([]Ban, string, error)
	// Version returns the bans' version.
	Version(ctx context.Context) (string, error)
	// Lift ends the ban of key by rule (its strikes too); false when there
	// was none.
	Lift(ctx context.Context, rule, key string) (bool, error)
}

// Options configure a Box.
type Options struct {
	// Backend keeps the bans (default: NewMemory(DefaultMaxBans)).
	Backend Backend
	// Registerer receives floodgate_bans_total and
	// floodgate_banned_requests_total (default: none).
	Registerer prometheus.Registerer
	// Logger receives bans and errors (default: discard).
	Logger *slog.Logger
	// Poll is how often the bans' version is read (default 100ms; a
	// memory backend needs none).
	Poll time.Duration
	// Now is the clock bans are checked at (default time.Now).
	Now func() time.Time
}

// Box is the penalty box. It is safe for concurrent use.
type Box struct {
	be    Backend
	log   *slog.Logger
	now   func() time.Time
	local bool // the backend is this process's memory: its bans are the view

	rules atomic.Pointer[[]config.Ban]
	view  atomic.Pointer[view] // the bans as last read
	ver   atomic.Pointer[string]
	seed  maphash.Seed // of the view's parts

	banLog lograte.Gate // ban lines: one a second, however many keys a flood bans
	offLog lograte.Gate // lines of offences not counted: one a second, however many a store outage fails
	mu     sync.Mutex   // serialises refreshes; held while they read the backend

	viewMu  sync.Mutex // guards the writes of the view, reading and made
	reading bool       // a refresh is reading the backend
	made    []Ban      // the bans this process made meanwhile, kept in what it read

	bans    *prometheus.CounterVec
	refused *prometheus.CounterVec

	cancel context.CancelFunc
	done   chan struct{}
}

// New returns a Box with rules; with a backend other than memory it polls
// the bans' version until Close. It waits at most 5 seconds for the bans:
// a box whose store did not answer starts without them and reads them at
// its next poll.
func New(rules []config.Ban, o Options) (*Box, error) {
	b := &Box{be: o.Backend, log: o.Logger, now: o.Now, done: make(chan struct{})}
	if b.be == nil {
		b.be = NewMemory(DefaultMaxBans, nil)
	}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	if b.now == nil {
		b.now = time.Now
	}
	_, b.local = b.be.(*Memory)
	if c, ok := b.be.(clocked); ok {
		c.useClock(b.now)
	}
	b.SetRules(rules)
	b.seed = maphash.MakeSeed()
	b.view.Store(newView(b.seed, nil))
	b.bans = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "floodgate_bans_total",
		Help: "Keys banned by the penalty box, by rule (on the instance that banned them, or, for a ban the store answered late, the first to read it)."}, []string{"ban"})
	b.refused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "floodgate_banned_requests_total",
		Help: "Requests refused because their key was banned, by rule."}, []string{"ban"})
	if o.Registerer != nil {
		for _, c := range []prometheus.Collector{b.bans, b.refused} {
			if err := o.Registerer.Register(c); err != nil {
				return nil, err
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	rctx, rcancel := context.WithTimeout(ctx, startRead)
	err := b.refresh(rctx)
	rcancel()
	if err != nil {
		b.log.Warn("penalty: bans not read", "err", err)
	}
	if b.local {
		close(b.done)
		return b, nil
	}
	poll := o.Poll
	if poll <= 0 {
		poll = 100 * time.Millisecond
	}
	go b.poll(ctx, poll)
	return b, nil
}

// SetRules replaces the rules (after a policy reload). Bans of rules that
// are gone refuse no one from then on: they are kept (listed, and
// liftable) until they end, and refuse again while they last if a reload
// brings their rule back.
func (b *Box) SetRules(rules []config.Ban) {
	rs := slices.Clone(rules)
	b.rules.Store(&rs)
}

// Rules returns the rules in force.
func (b *Box) Rules() []config.Ban { return *b.rules.Load() }

// Close stops the polling.
func (b *Box) Close() {
	b.cancel()
	<-b.done
}

func (b *Box) poll(ctx context.Context, every time.Duration) {
	defer close(b.done)
	follow.Loop(ctx, every, time.Second, b.look,
		func(err error) { b.log.Warn("penalty: bans not read", "err", err) })
}

// look counts the bans this process made whose claim got no answer in
// time and that the claim sent again says are its own (lateCounter), then
// reads the bans' version, and the bans again when it is not the one the
// view has: one poll.
func (b *Box) look(ctx context.Context) error {
	if l, ok := b.be.(lateCounter); ok {
		for _, ban := range l.Late(ctx) {
			b.banned(ban)
		}
	}
	v, err := b.be.Version(ctx)
	if err != nil || (b.ver.Load() != nil && *b.ver.Load() == v) {
		return err
	}
	return b.refresh(ctx)
}

// lateCounter is a Backend whose claim of the counting of a ban it made
// can get no answer in time (Redis): Late returns the bans this process
// made that such a claim, sent again, says are its to count.
type lateCounter interface {
	Late(ctx context.Context) []Ban
}

// replacer is a Backend on another clock than the process's that can tell
// when the bans it returned were placed off it (Redis: a first answer
// read late, a server's clock that stepped): they are all read again.
type replacer interface{ Replace() bool }

// clocked is a Backend on another clock than the process's (Redis): it
// returns the bans' ends on the clock it is given, the Box's.
type clocked interface{ useClock(now func() time.Time) }

// changer is a Backend that can tell what changed since a version of
// the bans (Redis): a Box then reads only that, not every ban, however
// many a flood of keys has earned.
//
// Its read of every ban (ReadAll, for a reader that has the version
// since) claims the counting of the bans no instance counted made up to
// the version it reads, as Changes claims those made since: the reads of
// what changed since that version start past them. It returns them too,
// and the reader's claims made after since (a read whose answer came too
// late, or a read of the changes that a read of every ban follows).
type changer interface {
	Changes(ctx context.Context, since string) (made []Ban, gone []id, version string, full bool, err error)
	ReadAll(ctx context.Context, since string) (bans, claimed []Ban, version string, err error)
}

// refresh reads the bans again (read), and counts and logs those it was
// the first to read that no instance had counted: bans the store made
// after the instance that asked for them gave up waiting.
func (b *Box) refresh(ctx context.Context) error {
	late, err := b.read(ctx)
	for _, ban := range late {
		b.banned(ban)
	}
	return err
}

// read reads the bans again: what changed since the version the view
// has, when the backend can tell and its log reaches back that far, else
// all of them. The bans this process makes while it reads are put in the
// view at once (add) and kept in what it read, unless that holds a later
// ban of their key. It returns the bans read that this process claimed
// the counting of (Ban.claimed), by either read (changer).
func (b *Box) read(ctx context.Context) (late []Ban, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.viewMu.Lock()
	b.reading = true
	b.viewMu.Unlock()
	defer func() {
		b.viewMu.Lock()
		b.reading, b.made = false, nil
		b.viewMu.Unlock()
	}()
	c, changes := b.be.(changer)
	if changes {
		if since := b.ver.Load(); since != nil {
			made, gone, v, full, err := c.Changes(ctx, *since)
			if err != nil {
				return nil, err
			}
			if r, ok := b.be.(replacer); ok && r.Replace() {
				// The bans held were placed off the store's clock: all
				// are read again, from the same version, which counts
				// the bans just claimed too.
				full = true
			}
			if !full {
				b.viewMu.Lock()
				defer b.viewMu.Unlock()
				view, now := b.view.Load(), b.now()
				for _, k := range gone {
					view.remove(k, now)
				}
				for _, ban := range made {
					view.add(ban, now)
					if ban.claimed {
						late = append(late, ban)
					}
				}
				b.keepMade(view, now)
				b.ver.Store(&v)
				return late, nil
			}
		}
	}
	var bans, claimed []Ban
	var v string
	if changes {
		var since string
		if p := b.ver.Load(); p != nil {
			since = *p
		}
		bans, claimed, v, err = c.ReadAll(ctx, since)
	} else {
		bans, v, err = b.be.Bans(ctx)
	}
	if err != nil {
		return nil, err
	}
	view := newView(b.seed, bans)
	b.viewMu.Lock()
	defer b.viewMu.Unlock()
	b.keepMade(view, b.now())
	b.view.Store(view)
	b.ver.Store(&v)
	return claimed, nil
}

// keepMade puts in v the bans this process made while a refresh read the
// backend, unless v holds a later ban of their key; b.viewMu is held.
func (b *Box) keepMade(v *view, now time.Time) {
	for _, ban := range b.made {
		cur, ok := v.get(id{ban.Rule, ban.Key})
		later := !ok || cur.end != 0 && ban.end > cur.end || cur.end == 0 && ban.Until.After(cur.Until)
		if later {
			v.add(ban, now)
		}
	}
}

// keyOf returns the key a rule bans in a request, "" when it has none. A
// rule keyed by API key has none for a key the gateway does not know ("?"
// and its hash; no key's name starts with "?"): the client makes such a
// key up at will, so a ban of it would hold nothing (the next request
// sends another) while taking a place in the box that every rule shares,
// and a flood of made-up keys would fill it, leaving no room to ban anyone.
// Such a request is refused (403) where a key is required, throttled per
// address (server.unknown_key_limit), and its address is banned by the
// rules keyed by client_ip.
func keyOf(r *config.Ban, clientKey, apiKey, user string) string {
	switch r.Key {
	case config.BanKeyAPIKey:
		if strings.HasPrefix(apiKey, "?") {
			return ""
		}
		return apiKey
	case config.BanKeyUser:
		return user
	}
	return clientKey
}

// Banned reports whether a request with this client key, API key (its
// name, as the gateway logs it) and user is banned, by which rule and
// until when; it counts the refusal. A key the gateway does not know ("?"
// and its hash) is banned by no rule keyed by API key (keyOf).
func (b *Box) Banned(clientKey, apiKey, user string) (rule string, until time.Time, banned bool) {
	v := b.view.Load()
	if v.n.Load() == 0 {
		return "", time.Time{}, false
	}
	now := b.now()
	for _, r := range *b.rules.Load() {
		k := keyOf(&r, clientKey, apiKey, user)
		if k == "" {
			continue
		}
		if ban, ok := v.get(id{r.Name, k}); ok && ban.Until.After(now) {
			b.refused.WithLabelValues(r.Name).Inc()
			return r.Name, ban.Until, true
		}
	}
	return "", time.Time{}, false
}

// identityOf returns the identity a rule bans.
func identityOf(r *config.Ban) policy.Identities {
	switch r.Key {
	case config.BanKeyAPIKey:
		return policy.IdentityAPIKey
	case config.BanKeyUser:
		return policy.IdentityUser
	}
	return policy.IdentityClientIP
}

// Outcome counts the answer a request got against every rule it offends.
// refused reports that a limit refused the request, and refusedBy holds
// the identities the key of that limit counts per (none for a limit that
// clients share, or for a refusal by a failure policy): a refusal offends
// a rule only when they hold the identity the rule bans, so that a key is
// banned for spending its own limits, never a limit it shares with others
// (global, per route, per plan), nor for a store that did not answer. A
// rule without count_on counts such a refusal whatever its status; a rule
// with count_on counts the answer's status (status), of a refusal of the
// key's own or of an answer that is no refusal (the upstream's, the
// gateway's), so that an attacker who spends a shared limit cannot get
// the clients it refuses banned by a rule that counts 429s. A key the
// gateway does not know offends no rule keyed by API key: a flood of
// made-up keys earns no bans to fill the box with (keyOf).
func (b *Box) Outcome(ctx context.Context, clientKey, apiKey, user string, refused bool, refusedBy policy.Identities, status int) {
	refused = refused || refusedBy != 0
	for _, r := range *b.rules.Load() {
		own := refusedBy.Has(identityOf(&r))
		if refused && !own || len(r.CountOn) == 0 && !own || len(r.CountOn) > 0 && !slices.Contains(r.CountOn, status) {
			continue
		}
		k := keyOf(&r, clientKey, apiKey, user)
		if k == "" {
			continue
		}
		ban, err := b.be.Offend(ctx, &r, k)
		if err != nil {
			b.offenceFailed(r.Name, err)
			continue
		}
		if ban != nil {
			if !ban.unseen {
				b.banned(*ban)
			}
			b.add(*ban)
		}
	}
}

// banned counts a ban in floodgate_bans_total and logs it, at most one
// line a second (a flood bans many keys at once). Each ban is counted by
// one instance: the one that made it, or, when its answer came late, the
// first to read it from the store's change log (read_late in the line).
func (b *Box) banned(ban Ban) {
	b.bans.WithLabelValues(ban.Rule).Inc()
	if held, ok := b.banLog.Pass(b.now()); ok {
		attrs := []any{"ban", ban.Rule, "key", ban.Key, "until", ban.Until, "strikes", ban.Strikes, "not_logged_since", held}
		if ban.claimed {
			attrs = append(attrs, "read_late", true)
		}
		b.log.Info("penalty: banned", attrs...)
	}
}

// offenceFailed logs an offence of rule whose call to the backend failed
// with err, at most one line a second with the count of those held back
// (a store that is down fails every offence of a flood). A call that got
// no answer in time was sent, and the store counts it if it got it (a
// Redis that answers late bans the key then, and every instance reads the
// ban): it is not said to be uncounted.
func (b *Box) offenceFailed(rule string, err error) {
	held, ok := b.offLog.Pass(b.now())
	if !ok {
		return
	}
	msg := "penalty: offence not counted"
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		msg = "penalty: offence not answered in time; counted if the store got it"
	}
	b.log.Warn(msg, "ban", rule, "err", err, "not_logged_since", held)
}

// add puts a ban this process made in its view at once, without waiting
// for a refresh that is reading the backend: it copies the ban's part of
// the view, not the whole (bans that ended are left out of the copy).
func (b *Box) add(ban Ban) {
	b.viewMu.Lock()
	defer b.viewMu.Unlock()
	b.view.Load().add(ban, b.now())
	if b.reading {
		b.made = append(b.made, ban)
	}
}

// List returns the bans in force, soonest end first.
func (b *Box) List(ctx context.Context) ([]Ban, error) {
	bans, _, err := b.be.Bans(ctx)
	if err != nil {
		return nil, err
	}
	now := b.now()
	kinds := map[string]string{}
	for _, r := range *b.rules.Load() {
		kinds[r.Name] = r.Key
	}
	out := bans[:0]
	for _, ban := range bans {
		if ban.Kind == "" {
			ban.Kind = kinds[ban.Rule]
		}
		if ban.Until.After(now) {
			out = append(out, ban)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Until.Before(out[j].Until) })
	return out, nil
}

// ErrNoBan is Lift's error for a key that is not banned by the rule.
var ErrNoBan = errors.New("penalty: no such ban")

// Lift ends a ban and forgets its strikes, on every instance.
func (b *Box) Lift(ctx context.Context, rule, key string) error {
	ok, err := b.be.Lift(ctx, rule, key)
	if err != nil {
		return err
	}
	if err := b.refresh(ctx); err != nil {
		return err
	}
	if !ok {
		return ErrNoBan
	}
	return nil
}
