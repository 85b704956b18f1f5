package rls

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/fields"
	"github.com/floodgate/floodgate/internal/lograte"
	"github.com/floodgate/floodgate/limiter"
)

// Options configure a Service. The zero value is usable.
type Options struct {
	// Logger receives engine errors and rejected requests. Default: discard.
	Logger *slog.Logger
	// MaxDescriptors bounds the descriptors of one request; more is
	// InvalidArgument. Zero means 64.
	MaxDescriptors int
	// MaxEntries bounds the entries of one descriptor; more is
	// InvalidArgument. Zero means 64. Over gRPC (NewServer, Register)
	// and on JSONHandler both bounds are checked before the request is
	// decoded, so that a message of many small entries never becomes as
	// many objects.
	MaxEntries int
	// Fields switches the rate-limit fields added to
	// response_headers_to_add: RateLimit-Policy and RateLimit (on by
	// default), Retry-After on OVER_LIMIT, and the X-RateLimit-Limit,
	// X-RateLimit-Remaining and X-RateLimit-Reset fields (Legacy), and on
	// OVER_LIMIT the field naming the binding limit (LimitName); floodgate
	// serve takes them from server.headers, as its gateway does, and
	// follows a reload of them (SetFields).
	// Domains in compatibility mode never get them.
	Fields fields.Options
	// NoFields leaves every field of Fields out, Retry-After included,
	// as envoyproxy/ratelimit does unless its response headers are on.
	NoFields bool
	// PeerHeaders, when set, adds envoyproxy/ratelimit's three response
	// headers (LIMIT_RESPONSE_HEADERS_ENABLED) in every mode.
	PeerHeaders *PeerHeaders
	// ShadowMode answers OK to every request, whatever its descriptors'
	// statuses say (envoyproxy/ratelimit's SHADOW_MODE): the global
	// shadow mode.
	ShadowMode bool
	// QuotaMode puts every descriptor in quota mode (QUOTA_MODE): a
	// request is over the limit only when all its limited descriptors are.
	QuotaMode bool
	// DynamicMetadata adds the request's domain, descriptors and cost and
	// the metadata of the descriptors that passed to every answer's
	// dynamic_metadata (RESPONSE_DYNAMIC_METADATA).
	DynamicMetadata bool
	// Stats, when set, counts envoyproxy/ratelimit's statistics.
	Stats *Stats
	// MaxOverrides bounds the limits given in requests (descriptors'
	// limit overrides) kept compiled (0: limiter.DefaultRequestLimits).
	MaxOverrides int
	// PeerCounter, when set, keeps the counters of domains in
	// compatibility mode where envoyproxy/ratelimit keeps them, in its
	// key format and with its expiry (see PeerCounter), so that both
	// count together while they share a Redis.
	PeerCounter PeerCounter
	// PeerKeys are the prefix and expiry jitter of PeerCounter's keys.
	PeerKeys PeerKeyOptions
}

// ErrNoConfig is the answer of a Service whose configuration is the
// stand-in LoadOrWait returns: envoyproxy/ratelimit's error before its
// first configuration loads, with its gRPC code, Unknown.
var ErrNoConfig = status.Error(codes.Unknown, "no rate limit configuration loaded")

// PeerHeaders names envoyproxy/ratelimit's response headers: the limit,
// the remaining count and the seconds until the window resets of the
// descriptor closest to its limit (or of the last one over it).
type PeerHeaders struct {
	Limit, Remaining, Reset string
}

// DefaultPeerHeaders are envoyproxy/ratelimit's default header names.
var DefaultPeerHeaders = PeerHeaders{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining", Reset: "RateLimit-Reset"}

// Service answers Envoy's RateLimitService/ShouldRateLimit from a Config
// and the engine. It is safe for concurrent use; SetConfig swaps the
// configuration atomically (requests in flight finish with the old one).
//
// Like every front end it does two things: it turns a RateLimitRequest into
// hits, and the engine's Result into a RateLimitResponse. Decisions are
// counted by the engine's Observer, labelled front_end="rls".
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer

	eng      limiter.Engine
	cfg      atomic.Pointer[Config]
	log      *slog.Logger
	opts     Options
	maxDesc  int
	maxEnts  int
	renderer fields.Renderer
	fields   atomic.Pointer[fields.Options] // opts.Fields, then SetFields'

	overrides limiter.RequestLimits[overrideKey, *rateLimit]

	peerLog lograte.Gate // decideCompat's warning of a failed peer count: one a second
}

// New returns a service deciding with eng under cfg (nil: no domains).
func New(eng limiter.Engine, cfg *Config, opts Options) *Service {
	s := &Service{eng: eng, opts: opts, log: opts.Logger, maxDesc: opts.MaxDescriptors}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.maxDesc <= 0 {
		s.maxDesc = 64
	}
	if s.maxEnts = opts.MaxEntries; s.maxEnts <= 0 {
		s.maxEnts = 64
	}
	s.overrides.Max = opts.MaxOverrides
	fo := opts.Fields
	s.fields.Store(&fo)
	if cfg == nil {
		cfg = &Config{domains: map[string]*domain{}}
	}
	s.cfg.Store(cfg)
	return s
}

// SetConfig replaces the configuration; nil means no domains. Counters of
// limits whose parameters did not change carry over.
func (s *Service) SetConfig(cfg *Config) {
	if cfg == nil {
		cfg = &Config{domains: map[string]*domain{}}
	}
	s.cfg.Store(cfg)
}

// SetFields replaces the switches of the rate-limit fields (Options.Fields)
// for the calls that come after it: floodgate serve follows a reload of
// server.headers so, as its gateway does.
func (s *Service) SetFields(o fields.Options) { s.fields.Store(&o) }

// Config returns the configuration in use.
func (s *Service) Config() *Config { return s.cfg.Load() }

// applied is one descriptor's limit for one request.
type applied struct {
	rl *rateLimit
	// cost is the hits the descriptor adds; 0 checks without counting.
	cost int64
	// key is the descriptor's counter.
	key string
	// peer is the start of the descriptor's counter key in
	// envoyproxy/ratelimit's format (with Options.PeerCounter).
	peer string
	// stat is the name of the descriptor's statistics ("" when not
	// counted).
	stat string
	// unlimited marks a descriptor whose limit is unlimited (rl is nil).
	unlimited bool
	// quota marks a descriptor in quota mode.
	quota bool
	hit   int // index into the hits, -1 when none
	over  bool
	// before and after are the window's count before and after this
	// request, as the statistics see them.
	before, after int64
	// threshold is the count past which the statistics see the
	// descriptor over its limit.
	threshold int64
	d         floodgate.Decision
}

// ShouldRateLimit decides a request. Each descriptor is matched to at most
// one limit; then the domain's mode decides: by default all the limits
// that apply are checked and charged together, all or nothing; in
// compatibility mode each descriptor is counted on its own, as
// envoyproxy/ratelimit counts it.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if err := s.validate(req); err != nil {
		s.opts.Stats.serviceError()
		return nil, err
	}
	// The hits go to the engine (an interface), so they live on the heap:
	// they come from a pool, with the engine's Result.
	cfg := s.cfg.Load()
	if cfg.none {
		s.opts.Stats.serviceError()
		return nil, ErrNoConfig
	}
	sc := scratchPool.Get().(*scratch)
	sc.storeFailed = false
	defer sc.release()
	dom := cfg.domains[req.GetDomain()]
	compat := dom != nil && dom.compat
	app, err := s.match(req, dom, compat, sc)
	if err != nil {
		s.opts.Stats.serviceError()
		return nil, err
	}
	// Decided whether or not the caller waits for the answer: Envoy lets
	// a request whose call timed out through (failure_mode_deny is off
	// by default), so a call still waiting for the store when its caller
	// leaves is a request that went ahead, and is counted as one already
	// sent is. The engine's store timeout bounds it.
	dctx := context.WithoutCancel(ctx)
	var resp *rlsv3.RateLimitResponse
	if compat {
		resp, err = s.decideCompat(dctx, req, app, sc)
	} else {
		resp, err = s.decide(dctx, req, app, sc)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		s.opts.Stats.storeError()
		s.log.Warn("rls: engine", "domain", req.GetDomain(), "err", err)
		return nil, status.Errorf(codes.Unavailable, "rls: %v", err)
	}
	if sc.storeFailed {
		// Answered by the failure policies: the store failed all the
		// same, and envoyproxy/ratelimit counts every such request.
		s.opts.Stats.storeError()
	}
	if dom == nil && s.opts.Stats != nil {
		s.opts.Stats.domainNotFound(req.GetDomain(), len(req.GetDescriptors()))
	}
	s.finish(req, app, resp)
	return resp, nil
}

// validate refuses requests that cannot be decided: those
// envoyproxy/ratelimit refuses (no domain, no descriptors) and those with
// more descriptors than Options.MaxDescriptors or a descriptor with more
// entries than Options.MaxEntries. A hits_addend of any size
// is decided (see cost): refusing one would let Envoy, whose
// failure_mode_deny is false by default, pass the request.
func (s *Service) validate(req *rlsv3.RateLimitRequest) error {
	descs := req.GetDescriptors()
	if req.GetDomain() == "" {
		return status.Error(codes.InvalidArgument, "rls: domain must not be empty")
	}
	if len(descs) == 0 {
		return status.Error(codes.InvalidArgument, "rls: descriptor list must not be empty")
	}
	if len(descs) > s.maxDesc {
		return tooManyDescriptors(len(descs), s.maxDesc)
	}
	for i, d := range descs {
		if n := len(d.GetEntries()); n > s.maxEnts {
			return tooManyEntries(i, n, s.maxEnts)
		}
	}
	return nil
}

// maxCost is the largest cost a descriptor is charged: 2^32, more than
// any limit holds (requests_per_unit and burst are below it), so that a
// larger hits_addend is over every limit, as envoyproxy/ratelimit answers
// it, without sums of costs nearing the counters' bounds.
const maxCost = 1 << 32

// cost is what descriptor d adds: its own hits_addend when set (0 checks
// without counting), else the request's, at least 1; at most maxCost.
func cost(req *rlsv3.RateLimitRequest, d *rlv3.RateLimitDescriptor) int64 {
	if ha := d.GetHitsAddend(); ha != nil {
		return int64(min(ha.GetValue(), maxCost))
	}
	return max(1, int64(req.GetHitsAddend()))
}

// match finds every descriptor's limit (a configured one, or a limit given
// in the request), with its cost, counter and statistics, and drops the
// limits that another one that applies replaces.
func (s *Service) match(req *rlsv3.RateLimitRequest, dom *domain, compat bool, sc *scratch) ([]applied, error) {
	domainName := req.GetDomain()
	app := sc.app[:0]
	stats := s.opts.Stats != nil
	for i, d := range req.GetDescriptors() {
		a := applied{cost: cost(req, d), hit: -1}
		if d.GetIsNegativeHits() && !compat {
			return nil, status.Errorf(codes.InvalidArgument, "rls: descriptor %d: is_negative_hits is not supported (charges are never refunded)", i)
		}
		if dom == nil {
			app = append(app, a)
			continue
		}
		ents := d.GetEntries()
		if ov := d.GetLimit(); ov != nil {
			var nd *node
			if !compat {
				nd, sc.trail = dom.match(ents, false, sc.trail)
			}
			var base *rateLimit
			if nd != nil {
				base = nd.limit
			}
			rl, err := s.override(domainName, dom.names, ents, base, ov, compat)
			if err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "rls: descriptor %d: limit override: %v", i, err)
			}
			a.rl = rl
			// In compatibility mode, as there, a limit given in the
			// request is in quota mode only by the global QUOTA_MODE.
			a.quota = (!compat && base != nil && (base.quotaMode || s.opts.QuotaMode)) || (compat && s.opts.QuotaMode)
			a.key = counterKey(domainName, ents, nil)
			if compat && s.opts.PeerCounter != nil {
				a.peer = peerKey(domainName, ents, nil)
			}
			if stats {
				a.stat = pathKey(domainName, ents)
			}
			app = append(app, a)
			continue
		}
		var nd *node
		nd, sc.trail = dom.match(ents, compat, sc.trail)
		if nd == nil || nd.limit == nil {
			app = append(app, a)
			continue
		}
		a.rl = nd.limit
		if a.rl.unlimited {
			a.unlimited = true
		} else {
			a.key = counterKey(domainName, ents, sc.trail)
			if compat && s.opts.PeerCounter != nil {
				a.peer = peerKey(domainName, ents, sc.trail)
			}
			a.quota = a.rl.quotaMode || s.opts.QuotaMode
			if stats {
				a.stat = statKey(domainName, ents, sc.trail, a.rl)
			}
		}
		app = append(app, a)
	}
	sc.app = app
	replace(app)
	return app, nil
}

// replace drops the limits named in the replaces list of any limit that
// applies (unlimited ones included); an unlimited limit is never dropped.
// The lists of every limit matched count, those of limits that are
// dropped too (a replacing b replacing c leaves a; two limits replacing
// each other leave neither), as envoyproxy/ratelimit gathers them all
// before it drops any: the limits are chosen first, then dropped.
func replace(app []applied) {
	some := false
	for i := range app {
		some = some || (app[i].rl != nil && len(app[i].rl.replaces) > 0)
	}
	if !some {
		return
	}
	var drop uint64 // the first 64 descriptors: Options.MaxDescriptors' default
	var dropMore []int
	for i := range app {
		rl := app[i].rl
		if rl == nil || app[i].unlimited || rl.configName == "" {
			continue
		}
		for j := range app {
			if app[j].rl != nil && slices.Contains(app[j].rl.replaces, rl.configName) {
				if i < 64 {
					drop |= 1 << i
				} else {
					dropMore = append(dropMore, i)
				}
				break
			}
		}
	}
	for i := range min(len(app), 64) {
		if drop&(1<<i) != 0 {
			app[i].rl, app[i].key, app[i].stat = nil, "", ""
		}
	}
	for _, i := range dropMore {
		app[i].rl, app[i].key, app[i].stat = nil, "", ""
	}
}

// finish adds what every mode adds: envoyproxy/ratelimit's headers, the
// dynamic metadata, the global shadow mode and the statistics.
func (s *Service) finish(req *rlsv3.RateLimitRequest, app []applied, resp *rlsv3.RateLimitResponse) {
	if st := s.opts.Stats; st != nil {
		for i := range app {
			a := &app[i]
			if a.rl != nil && !a.unlimited {
				st.count(a.stat, a.stat == a.rl.statPath, a.cost, a.before, a.after, a.threshold, a.over, a.rl.shadow)
			}
		}
	}
	if ph := s.opts.PeerHeaders; ph != nil {
		s.peerHeaders(ph, app, resp)
	}
	if s.opts.DynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, app, resp)
	}
	if s.opts.ShadowMode && resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		resp.OverallCode = rlsv3.RateLimitResponse_OK
		s.opts.Stats.globalShadowed()
	}
}

// peerHeaders adds envoyproxy/ratelimit's headers: those of the limited
// descriptor with the fewest requests left, or of the last one over its
// limit that is not in quota mode.
func (s *Service) peerHeaders(ph *PeerHeaders, app []applied, resp *rlsv3.RateLimitResponse) {
	var pick *rlsv3.RateLimitResponse_DescriptorStatus
	least := uint32(math.MaxUint32)
	for i, st := range resp.Statuses {
		if st.CurrentLimit != nil && st.LimitRemaining < least {
			pick, least = st, st.LimitRemaining
		}
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT && !app[i].quota {
			pick, least = st, 0
		}
	}
	if pick == nil {
		return
	}
	reset := int64(Unit(pick.CurrentLimit.GetUnit()).seconds())
	if d := pick.GetDurationUntilReset(); d != nil {
		reset = d.GetSeconds()
		if d.GetNanos() > 0 {
			reset++
		}
	}
	resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd,
		&corev3.HeaderValue{Key: ph.Limit, Value: strconv.FormatUint(uint64(pick.CurrentLimit.GetRequestsPerUnit()), 10)},
		&corev3.HeaderValue{Key: ph.Remaining, Value: strconv.FormatUint(uint64(pick.LimitRemaining), 10)},
		&corev3.HeaderValue{Key: ph.Reset, Value: strconv.FormatInt(reset, 10)})
}

// statuses makes the response with one status per descriptor, in as few
// allocations as the number of descriptors allows; with fields, the
// answer to one descriptor holds room for three (h).
func statuses(n int, fields bool) (resp *rlsv3.RateLimitResponse, st []rlsv3.RateLimitResponse_DescriptorStatus,
	limits []rlsv3.RateLimitResponse_RateLimit, durs []durationpb.Duration, h *headers3) {
	if n == 1 {
		var a *answer1
		if fields {
			ah := new(answer1h)
			a, h = &ah.answer1, &ah.headers3
		} else {
			a = new(answer1)
		}
		resp, st, limits, durs = &a.resp, a.st[:], a.lim[:], a.dur[:]
		resp.Statuses = a.stp[:]
		return resp, st, limits, durs, h
	}
	resp = &rlsv3.RateLimitResponse{Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)}
	return resp, make([]rlsv3.RateLimitResponse_DescriptorStatus, n), make([]rlsv3.RateLimitResponse_RateLimit, n),
		make([]durationpb.Duration, n), nil
}

// setDuration sets dur to d, as durationpb.New without an allocation of
// its own.
func setDuration(dur *durationpb.Duration, d time.Duration) *durationpb.Duration {
	dur.Seconds, dur.Nanos = int64(d/time.Second), int32(d%time.Second)
	return dur
}

// answer1 holds a whole answer without fields to a request with one
// descriptor, so that it takes one allocation. It stays under 512 bytes,
// the largest objects Go allocates without a header of their own (which
// cost more), as answers without fields (floodgate rls's default, and the
// compatibility mode's) do not carry the room for fields.
type answer1 struct {
	resp rlsv3.RateLimitResponse
	stp  [1]*rlsv3.RateLimitResponse_DescriptorStatus
	st   [1]rlsv3.RateLimitResponse_DescriptorStatus
	lim  [1]rlsv3.RateLimitResponse_RateLimit
	dur  [1]durationpb.Duration
}

// headers3 holds up to three fields of an answer (RateLimit-Policy,
// RateLimit and Retry-After).
type headers3 struct {
	hvp [3]*corev3.HeaderValue
	hv  [3]corev3.HeaderValue
}

// answer1h is answer1 with the room for its fields, in one allocation.
type answer1h struct {
	answer1
	headers3
}

// scratch is what one call of ShouldRateLimit reuses from the calls before
// it: the descriptors' limits, the hits, the engine's Result and the
// fields.
type scratch struct {
	app   []applied
	trail []step
	hits  []limiter.Hit
	req   limiter.Request
	res   limiter.Result
	items []fields.Item
	out   []fields.Field
	peer  peerScratch
	// storeFailed: the store failed this request, which its limits'
	// failure policies decided.
	storeFailed bool
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// maxScratch bounds the slices a scratch keeps for the next call.
const maxScratch = 64

// release drops the references the scratch holds and pools it, unless a
// large request made it big.
func (sc *scratch) release() {
	if cap(sc.hits) > maxScratch || cap(sc.items) > maxScratch ||
		cap(sc.res.Decisions) > maxScratch || cap(sc.app) > maxScratch ||
		cap(sc.trail) > maxScratch {
		return
	}
	clear(sc.app[:cap(sc.app)])
	clear(sc.trail[:cap(sc.trail)])
	clear(sc.hits[:cap(sc.hits)])
	clear(sc.items[:cap(sc.items)])
	clear(sc.out[:cap(sc.out)])
	sc.app, sc.trail, sc.hits, sc.items, sc.out = sc.app[:0], sc.trail[:0], sc.hits[:0], sc.items[:0], sc.out[:0]
	sc.req = limiter.Request{}
	scratchPool.Put(sc)
}

// step is how one entry of a request's descriptor matched a configured
// descriptor.
type step struct {
	nd *node
	// wild reports a match by the node's wildcard value.
	wild bool
}

// match finds the configured descriptor for a request's entries: at every
// level the entry's key and value exactly, else a wildcard value that
// matches, else the key alone; the entries must end exactly at the
// configured node (no backtracking, as envoyproxy/ratelimit). Among
// several wildcard values that match, the one with the most literal
// characters wins, or in compatibility mode the first in file order. The
// steps taken are appended to trail[:0].
func (d *domain) match(ents []*rlv3.RateLimitDescriptor_Entry, compat bool, trail []step) (*node, []step) {
	trail = trail[:0]
	lv := &d.root
	var nd *node
	for _, e := range ents {
		var wild bool
		nd, wild = lv.find(e.GetKey(), e.GetValue(), compat)
		if nd == nil {
			return nil, trail
		}
		trail = append(trail, step{nd, wild})
		lv = &nd.children
	}
	return nd, trail
}

func (lv *level) find(key, value string, compat bool) (*node, bool) {
	if nd := lv.exact[entryKey{key, value}]; nd != nil {
		return nd, false
	}
	ws := lv.wildBest[key]
	if compat {
		ws = lv.wild[key]
	}
	for _, nd := range ws {
		if nd.matches(value) {
			return nd, true
		}
	}
	return lv.anyValue[key], false
}

// counterKey names the counter of one descriptor: the domain and every
// entry, so each distinct value counts on its own, except that an entry
// matched by a wildcard with share_threshold counts as the wildcard (all
// its values share one counter). Each entry is '|', its key's length,
// ':', the key, then '=' and the value; a value that holds a '|' (values
// are the caller's) is written '#', its length, ':' and the value, so
// that no value can move the boundary between two entries: two distinct
// descriptors never share a counter. Values without a '|' keep the keys
// they always had.
func counterKey(domain string, ents []*rlv3.RateLimitDescriptor_Entry, trail []step) string {
	n := len(domain)
	for _, e := range ents {
		n += len(e.GetKey()) + len(e.GetValue()) + 16
	}
	b := make([]byte, 0, n)
	b = append(b, domain...)
	for i, e := range ents {
		v := e.GetValue()
		if i < len(trail) && trail[i].wild && trail[i].nd.shareThreshold {
			v = trail[i].nd.value
		}
		b = append(b, '|')
		b = strconv.AppendInt(b, int64(len(e.GetKey())), 10)
		b = append(b, ':')
		b = append(b, e.GetKey()...)
		if strings.IndexByte(v, '|') >= 0 {
			b = append(b, '#')
			b = strconv.AppendInt(b, int64(len(v)), 10)
			b = append(b, ':')
		} else {
			b = append(b, '=')
		}
		b = append(b, v...)
	}
	return string(b)
}

// pathKey is envoyproxy/ratelimit's name for a descriptor given with a
// limit override: domain.key_value.key_value, a key alone when its value
// is empty.
func pathKey(domain string, ents []*rlv3.RateLimitDescriptor_Entry) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range ents {
		b.WriteByte('.')
		b.WriteString(e.GetKey())
		if e.GetValue() != "" {
			b.WriteByte('_')
			b.WriteString(e.GetValue())
		}
	}
	return b.String()
}

// overrideSuffix marks the name of a limit given in a request whose
// envoyproxy/ratelimit name is a configured limit's (see overrideName).
const overrideSuffix = "~request"

// overrideName is the name of a limit given in a request for a descriptor
// that no configured limit matches, in Floodgate's mode: envoyproxy/
// ratelimit's name for the descriptor (path), unless a configured limit
// (of names) has that name, then path with overrideSuffix added, as many
// times as it takes to name no configured limit. pathKey names the key
// a_b without a value as it names the key a with the value b (d.a_b), and
// a configured name can be anything: this way the request's limit never
// answers (RateLimit fields, current_limit) or is counted
// (floodgate_decisions_total) as a configured one. Its statistics keep
// envoyproxy/ratelimit's name, which is alike there too.
func overrideName(path string, names map[string]bool) string {
	for names[path] {
		path += overrideSuffix
	}
	return path
}

// statKey is the name of a descriptor's statistics, as
// envoyproxy/ratelimit names them: the configured path (domain.key_value
// for a value, domain.key for any value, domain.key_pattern for a
// wildcard); with value_to_metric, the request's value for an entry
// matched by a key alone or a wildcard (unless that wildcard shares its
// threshold); with detailed_metric on the limit, every entry as key_value
// with the request's values (a wildcard sharing its threshold keeps its
// pattern).
func statKey(domain string, ents []*rlv3.RateLimitDescriptor_Entry, trail []step, rl *rateLimit) string {
	if !rl.detailed && !dynamicStat(trail) {
		return rl.statPath
	}
	var b strings.Builder
	b.WriteString(domain)
	shares := false
	for _, st := range trail {
		shares = shares || (st.wild && st.nd.shareThreshold)
	}
	for i, e := range ents {
		st := trail[i]
		b.WriteByte('.')
		b.WriteString(e.GetKey())
		var v string
		switch {
		case st.wild && st.nd.shareThreshold:
			v = st.nd.value
		case rl.detailed && !shares:
			b.WriteByte('_')
			b.WriteString(e.GetValue())
			continue
		case rl.detailed:
			v = e.GetValue()
		case st.wild && st.nd.valueToMetric:
			v = e.GetValue()
		case st.wild:
			v = st.nd.value
		case st.nd.value != "":
			v = e.GetValue()
		case st.nd.valueToMetric:
			v = e.GetValue()
		}
		if v != "" {
			b.WriteByte('_')
			b.WriteString(v)
		}
	}
	return b.String()
}

// dynamicStat reports whether a statistics name depends on the request's
// values: some entry matched by a key alone or an unshared wildcard has
// value_to_metric.
func dynamicStat(trail []step) bool {
	for _, st := range trail {
		nd := st.nd
		if nd.valueToMetric && (nd.value == "" || (st.wild && !nd.shareThreshold)) {
			return true
		}
	}
	return false
}

// overrideKey identifies a compiled per-request limit override.
type overrideKey struct {
	base    *rateLimit
	name    string
	unit    Unit
	mult    uint32
	perUnit uint32
	compat  bool
}

// override returns the limit a descriptor's limit override makes of base
// (nil when no configured descriptor matched, and always nil in
// compatibility mode, where an override ignores the configuration),
// compiled once and kept in the service's bounded cache of limits given in
// requests. names are the configured limits' names (see overrideName).
func (s *Service) override(domainName string, names map[string]bool, ents []*rlv3.RateLimitDescriptor_Entry, base *rateLimit,
	ov *rlv3.RateLimitDescriptor_RateLimitOverride, compat bool) (*rateLimit, error) {
	unit := Unit(ov.GetUnit())
	if unit < Second || unit > Week {
		return nil, fmt.Errorf("unknown unit %d", ov.GetUnit())
	}
	mult := uint32(1)
	if m := ov.GetUnitMultiplier(); m != nil && m.GetValue() > 0 && !compat {
		mult = m.GetValue()
	}
	k := overrideKey{base: base, unit: unit, mult: mult, perUnit: ov.GetRequestsPerUnit(), compat: compat}
	switch {
	case base == nil && compat:
		k.name = pathKey(domainName, ents)
	case base == nil:
		k.name = overrideName(pathKey(domainName, ents), names)
	default:
		k.name = base.name
	}
	return s.overrides.Get(k, func() (*rateLimit, error) { return compileOverride(k) })
}

// compileOverride builds the limit of an override.
func compileOverride(k overrideKey) (*rateLimit, error) {
	if span := uint64(k.unit.seconds()) * uint64(k.mult); span > math.MaxInt64/uint64(time.Second) {
		return nil, fmt.Errorf("%d × %s is longer than a time span can be", k.mult, k.unit)
	}
	rl := &rateLimit{name: k.name, unit: k.unit, perUnit: k.perUnit}
	if base := k.base; base != nil {
		rl.tmpl, rl.replaces, rl.shadow, rl.configName = base.tmpl, base.replaces, base.shadow, base.configName
		rl.quotaMode, rl.metadata = base.quotaMode, base.metadata
	}
	var err error
	if rl.count, err = countRule(rl.unit, rl.tmpl.onFailure); err != nil {
		return nil, err
	}
	if k.compat {
		return rl, nil
	}
	// The limit of an override of a configured limit has that limit's
	// name, from the files; any other is named by the request.
	newRule := limiter.NewRule
	if k.base != nil {
		newRule = configuredRule
	}
	if rl.tmpl.algorithm.Family() == floodgate.FamilyQuota && (k.mult != 1 || (k.unit != Day && k.unit != Week && k.unit != Month)) {
		// A calendar quota cannot take this unit: count a fixed window.
		rl.tmpl.algorithm = floodgate.FixedWindow
	}
	if rl.tmpl.algorithm == 0 {
		rl.tmpl.algorithm = floodgate.FixedWindow
		if k.mult == 1 && (k.unit == Week || k.unit == Month) {
			rl.tmpl.algorithm = floodgate.Quota
		}
	}
	if k.perUnit == 0 {
		rl.fields = fields.NewLimit(&floodgate.Limit{Name: rl.name, Algorithm: floodgate.FixedWindow,
			Window: time.Duration(k.unit.seconds()) * time.Second * time.Duration(k.mult)})
		return rl, nil
	}
	l, err := rl.tmpl.limit(rl.name, k.unit, k.mult, int64(k.perUnit))
	if err != nil {
		return nil, err
	}
	if rl.rule, err = newRule(l, rl.tmpl.onFailure, rl.shadow); err != nil {
		return nil, err
	}
	if !rl.shadow {
		if rl.shadowRule, err = newRule(l, rl.tmpl.onFailure, true); err != nil {
			return nil, err
		}
	}
	rl.fields = fields.ForRule(rl.rule)
	return rl, nil
}
