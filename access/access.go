// Package access holds the gateway's allow and deny lists of addresses and
// networks: those of the policy file (server.access) and those added
// through the admin API, shared through Redis between instances.
//
// A compiled List answers in time that does not grow with its size: the
// networks are kept in one map per prefix length, and an address is
// looked up once per length that the list holds (at most 33 for IPv4, 129
// for IPv6; a few in practice). A denied address is refused (403) before
// any limit is charged, even when an allow entry covers it too; an
// allowed one is exempt from the limits its entry names (the longest
// matching network decides). An address is judged as the client it is
// counted as (identity.ClientAddr): an IPv4-mapped or NAT64 (64:ff9b::/96)
// address as the IPv4 address it holds, and also as written.
package access

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/identity"
	"github.com/floodgate/floodgate/internal/follow"
	"github.com/floodgate/floodgate/internal/redisconn"
)

// Lists.
const (
	Deny  = "deny"
	Allow = "allow"
)

// Entry is one network of a list.
type Entry struct {
	// List is deny or allow.
	List string `json:"list"`
	// Network is a CIDR, or a single address as a full-length prefix.
	Network netip.Prefix `json:"network"`
	// Exempt names the limits an allowed network is exempt from
	// (config.ExemptAll: every one).
	Exempt []string `json:"exempt,omitempty"`
	// Source is file or api.
	Source string `json:"source"`
	// Added and Actor say when and by whom an API entry was added.
	Added time.Time `json:"added,omitzero"`
	Actor string    `json:"actor,omitempty"`
}

// set is networks looked up by prefix length.
type set struct {
	lens []int                // the lengths held, longest first
	nets map[netip.Prefix]int // network → its entry
}

func (s *set) add(p netip.Prefix, i int) {
	if s.nets == nil {
		s.nets = map[netip.Prefix]int{}
	}
	if _, dup := s.nets[p]; dup {
		return
	}
	s.nets[p] = i
	if !slices.Contains(s.lens, p.Bits()) {
		s.lens = append(s.lens, p.Bits())
		sort.Sort(sort.Reverse(sort.IntSlice(s.lens)))
	}
}

// find returns the entry of the longest network holding a, or -1.
func (s *set) find(a netip.Addr) int {
	for _, l := range s.lens {
		if l > a.BitLen() {
			continue
		}
		p, err := a.Prefix(l)
		if err != nil {
			continue
		}
		if i, ok := s.nets[p]; ok {
			return i
		}
	}
	return -1
}

// List is compiled lists; immutable.
type List struct {
	entries []Entry
	deny    set
	allow   set
}

// Compile builds a List of entries.
func Compile(entries []Entry) *List {
	l := &List{entries: entries}
	for i, e := range entries {
		if e.List == Deny {
			l.deny.add(e.Network, i)
		} else {
			l.allow.add(e.Network, i)
		}
	}
	return l
}

// Denied reports whether a is on the deny list.
func (l *List) Denied(a netip.Addr) bool {
	if l == nil || len(l.deny.lens) == 0 || !a.IsValid() {
		return false
	}
	c, raw := clientAddrs(a)
	return l.deny.find(c) >= 0 || raw.IsValid() && l.deny.find(raw) >= 0
}

// clientAddrs returns the address a client is known by
// (identity.ClientAddr: a NAT64 address as the IPv4 address it holds)
// and, when it is another, a as written (without its zone): an entry in
// either form holds.
func clientAddrs(a netip.Addr) (client, raw netip.Addr) {
	client, raw = identity.ClientAddr(a), a.Unmap().WithZone("")
	if raw == client {
		raw = netip.Addr{}
	}
	return client, raw
}

// Exempt returns the limits a is exempt from: all, or the names; nothing
// when no allow entry covers it.
func (l *List) Exempt(a netip.Addr) (all bool, names []string) {
	if l == nil || len(l.allow.lens) == 0 || !a.IsValid() {
		return false, nil
	}
	c, raw := clientAddrs(a)
	i := l.allow.find(c)
	if i < 0 && raw.IsValid() {
		i = l.allow.find(raw)
	}
	if i < 0 {
		return false, nil
	}
	ex := l.entries[i].Exempt
	if len(ex) == 1 && ex[0] == config.ExemptAll {
		return true, nil
	}
	return false, ex
}

// Entries returns the entries.
func (l *List) Entries() []Entry { return l.entries }

// FileEntries returns the entries of a file's server.access.
func FileEntries(a *config.Access) []Entry {
	var out []Entry
	for _, p := range a.DenyPrefixes {
		out = append(out, Entry{List: Deny, Network: p, Source: "file"})
	}
	for _, al := range a.Allow {
		for _, p := range al.Prefixes {
			out = append(out, Entry{List: Allow, Network: p, Exempt: al.Exempt, Source: "file"})
		}
	}
	return out
}

// Backend keeps the entries added through the admin API.
type Backend interface {
	Load(ctx context.Context) ([]Entry, string, error)
	Version(ctx context.Context) (string, error)
	Put(ctx context.Context, e Entry) error
	Delete(ctx context.Context, list string, n netip.Prefix) (bool, error)
}

// Errors of Lists.Add and Lists.Remove.
var (
	ErrFull     = errors.New("access: the lists are full (server.access.max_entries)")
	ErrNotFound = errors.New("access: no such entry")
	ErrFromFile = errors.New("access: the entry is the policy file's; change the file")
)

// Lists are the file's lists and the API's, compiled together. They are
// safe for concurrent use.
type Lists struct {
	be   Backend
	log  *slog.Logger
	list atomic.Pointer[List]

	mu      sync.Mutex // guards file, api, max, version
	file    []Entry
	api     []Entry
	max     int
	version string

	cancel context.CancelFunc
	done   chan struct{}
}

// startRead bounds New's first read of the API's entries: a store that
// answers nothing does not hold up the start, and the polling reads them
// once it answers.
const startRead = 5 * time.Second

// New returns the lists of a file's server.access and of be (nil: in this
// process only); with a backend it polls its version every poll until
// Close. It waits at most 5 seconds for be's entries: lists whose store
// did not answer start with the file's entries alone and read the API's
// at the next poll.
func New(a *config.Access, be Backend, poll time.Duration, log *slog.Logger) *Lists {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ls := &Lists{be: be, log: log, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	ls.cancel = cancel
	ls.SetFile(a)
	if be == nil {
		close(ls.done)
		return ls
	}
	rctx, rcancel := context.WithTimeout(ctx, startRead)
	err := ls.refresh(rctx)
	rcancel()
	if err != nil {
		log.Warn("access: lists not read", "err", err)
	}
	if poll <= 0 {
		poll = 100 * time.Millisecond
	}
	go ls.poll(ctx, poll)
	return ls
}

// List returns the lists in force.
func (ls *Lists) List() *List { return ls.list.Load() }

// SetFile replaces the file's entries (after a policy reload); a
// MaxEntries of 0 bounds the lists at config.DefaultAccessMaxEntries.
func (ls *Lists) SetFile(a *config.Access) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.file, ls.max = FileEntries(a), a.MaxEntries
	if ls.max <= 0 {
		ls.max = config.DefaultAccessMaxEntries
	}
	ls.compile()
}

// compile builds the List; ls.mu is held.
func (ls *Lists) compile() {
	all := append(slices.Clip(ls.file), ls.api...)
	ls.list.Store(Compile(all))
}

// Close stops the polling.
func (ls *Lists) Close() {
	ls.cancel()
	<-ls.done
}

func (ls *Lists) poll(ctx context.Context, every time.Duration) {
	defer close(ls.done)
	follow.Loop(ctx, every, time.Second, ls.look, func(err error) { ls.log.Warn("access: lists not read", "err", err) })
}

// look reads the API's entries again when the backend's version is not
// the one read last.
func (ls *Lists) look(ctx context.Context) error {
	v, err := ls.be.Version(ctx)
	if err != nil {
		return err
	}
	ls.mu.Lock()
	same := v == ls.version
	ls.mu.Unlock()
	if same {
		return nil
	}
	return ls.refresh(ctx)
}

func (ls *Lists) refresh(ctx context.Context) error {
	es, v, err := ls.be.Load(ctx)
	if err != nil {
		return err
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.api, ls.version = es, v
	ls.compile()
	return nil
}

// Add adds an entry through the API, or replaces the API's entry of the
// same list and network, and returns it as the lists hold it (its Source
// set). A network that no address could match as written (host bits
// set, IPv4-mapped, none) is refused.
func (ls *Lists) Add(ctx context.Context, e Entry) (Entry, error) {
	if e.List != Deny && e.List != Allow {
		return Entry{}, fmt.Errorf("access: list must be deny or allow, got %q", e.List)
	}
	if err := checkNetwork(e.Network); err != nil {
		return Entry{}, err
	}
	if e.List == Allow && len(e.Exempt) == 0 {
		return Entry{}, fmt.Errorf("access: an allow entry needs exempt: limit names, or [all]")
	}
	e.Source = "api"
	ls.mu.Lock()
	for _, f := range ls.file {
		if f.List == e.List && f.Network == e.Network {
			ls.mu.Unlock()
			return Entry{}, ErrFromFile
		}
	}
	replaces := slices.ContainsFunc(ls.api, func(o Entry) bool { return o.List == e.List && o.Network == e.Network })
	if !replaces && len(ls.file)+len(ls.api) >= ls.max {
		ls.mu.Unlock()
		return Entry{}, ErrFull
	}
	ls.mu.Unlock()
	if ls.be != nil {
		if err := ls.be.Put(ctx, e); err != nil {
			return Entry{}, err
		}
		return e, ls.refresh(ctx)
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.api = slices.DeleteFunc(ls.api, func(o Entry) bool { return o.List == e.List && o.Network == e.Network })
	ls.api = append(ls.api, e)
	ls.compile()
	return e, nil
}

// checkNetwork refuses a network that no address could match as written:
// one with host bits set or IPv4-mapped (addresses are looked up as
// IPv4), or none at all.
func checkNetwork(p netip.Prefix) error {
	if !p.IsValid() {
		return errors.New("access: an entry needs a network")
	}
	if _, err := config.ParseNetwork(p.String()); err != nil {
		return fmt.Errorf("access: network: %w", err)
	}
	return nil
}

// Remove removes an API entry.
func (ls *Lists) Remove(ctx context.Context, list string, n netip.Prefix) error {
	ls.mu.Lock()
	for _, f := range ls.file {
		if f.List == list && f.Network == n {
			ls.mu.Unlock()
			return ErrFromFile
		}
	}
	ls.mu.Unlock()
	if ls.be != nil {
		ok, err := ls.be.Delete(ctx, list, n)
		if err != nil {
			return err
		}
		if err := ls.refresh(ctx); err != nil {
			return err
		}
		if !ok {
			return ErrNotFound
		}
		return nil
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	before := len(ls.api)
	ls.api = slices.DeleteFunc(ls.api, func(o Entry) bool { return o.List == list && o.Network == n })
	if len(ls.api) == before {
		return ErrNotFound
	}
	ls.compile()
	return nil
}

// Redis keys of the API's entries: a hash (field LIST|NETWORK, value the
// entry as JSON), the count of its changes, and the epoch of that count
// (the server's time when it was first needed). The epoch goes with the
// data: a Redis restarted empty or flushed has none, and the next read or
// change sets another, so that a count started again from zero is not
// taken for the one some lists have read.
const (
	redisHash    = redisconn.Prefix + "access"
	redisVersion = redisconn.Prefix + "access:version"
	redisEpoch   = redisconn.Prefix + "access:epoch"
)

// Redis keeps the API's entries in Redis, shared by every instance.
type Redis struct{ c rueidis.Client }

// NewRedis keeps the entries in the Redis c talks to.
func NewRedis(c rueidis.Client) *Redis { return &Redis{c: c} }

// Load reads the entries and their version, setting the version's epoch
// when there is none, so that the version read stays the one of these
// entries.
func (b *Redis) Load(ctx context.Context) ([]Entry, string, error) {
	res := b.c.DoMulti(ctx, b.c.B().Eval().Script(redisconn.EpochScript).Numkeys(1).Key(redisEpoch).Build(),
		b.c.B().Mget().Key(redisEpoch, redisVersion).Build(), b.c.B().Hgetall().Key(redisHash).Build())
	if err := res[0].Error(); err != nil {
		return nil, "", fmt.Errorf("access: redis: epoch: %w", err)
	}
	v, err := redisconn.StampOf(res[1])
	if err != nil {
		return nil, "", fmt.Errorf("access: redis: %w", err)
	}
	m, err := res[2].AsStrMap()
	if err != nil {
		return nil, "", fmt.Errorf("access: redis: %w", err)
	}
	out := make([]Entry, 0, len(m))
	for f, js := range m {
		var e Entry
		if err := json.Unmarshal([]byte(js), &e); err != nil || !e.Network.IsValid() {
			return nil, "", fmt.Errorf("access: redis: entry %q: bad value", f)
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Added.Before(out[j].Added) })
	return out, v, nil
}

// Version reads the version: its epoch and its count ("EPOCH:COUNT").
func (b *Redis) Version(ctx context.Context) (string, error) {
	v, err := redisconn.StampOf(b.c.Do(ctx, b.c.B().Mget().Key(redisEpoch, redisVersion).Build()))
	if err != nil {
		return "", fmt.Errorf("access: redis: %w", err)
	}
	return v, nil
}

func redisField(list string, n netip.Prefix) string { return list + "|" + n.String() }

// changeScript writes ARGV[2] as the entry ARGV[1] of the hash KEYS[1]
// ("": removes it) and counts the change (KEYS[2], of the epoch KEYS[3],
// set here when there is none), in one step: it returns how many fields
// were removed.
var changeScript = rueidis.NewLuaScript(redisconn.SetEpoch(3) + `
local n = 0
if ARGV[2] == '' then
	n = redis.call('HDEL', KEYS[1], ARGV[1])
else
	redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
redis.call('INCR', KEYS[2])
return n
`)

// change runs changeScript.
func (b *Redis) change(ctx context.Context, field, value string) (int64, error) {
	n, err := changeScript.Exec(ctx, b.c, []string{redisHash, redisVersion, redisEpoch}, []string{field, value}).AsInt64()
	if err != nil {
		return 0, fmt.Errorf("access: redis: %w", err)
	}
	return n, nil
}

// Put writes an entry.
func (b *Redis) Put(ctx context.Context, e Entry) error {
	js, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("access: %w", err)
	}
	_, err = b.change(ctx, redisField(e.List, e.Network), string(js))
	return err
}

// Delete removes an entry; false when there was none.
func (b *Redis) Delete(ctx context.Context, list string, n netip.Prefix) (bool, error) {
	k, err := b.change(ctx, redisField(list, n), "")
	return k > 0, err
}

// ParseList reads a list's name.
func ParseList(s string) (string, error) {
	switch strings.ToLower(s) {
	case Deny:
		return Deny, nil
	case Allow:
		return Allow, nil
	}
	return "", fmt.Errorf("access: list must be deny or allow, got %q", s)
}
