package rls

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
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
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/limiter"
)

// Engine checks and charges a request's hits all or nothing;
// *limiter.Limiter is the implementation.
type Engine interface {
	Check(ctx context.Context, hits []limiter.Hit) (limiter.Result, error)
	Peek(ctx context.Context, hits []limiter.Hit) (limiter.Result, error)
}

// intoEngine is an Engine that can write into a Result it is given (as
// *limiter.Limiter can), so that the service reuses the Result's slices.
type intoEngine interface {
	CheckInto(ctx context.Context, hits []limiter.Hit, r *limiter.Result) error
	PeekInto(ctx context.Context, hits []limiter.Hit, r *limiter.Result) error
}

// Options configure a Service. The zero value is usable.
type Options struct {
	// Logger receives engine errors and rejected requests. Default: discard.
	Logger *slog.Logger
	// MaxDescriptors bounds the descriptors of one request; more is
	// InvalidArgument. Zero means 64.
	MaxDescriptors int
	// NoHeaders leaves out RateLimit-Policy, RateLimit and Retry-After from
	// response_headers_to_add.
	NoHeaders bool
	// LegacyHeaders adds X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (delay seconds) for the binding limit, the fields
	// envoyproxy/ratelimit adds when its response headers are enabled.
	LegacyHeaders bool
	// Observe, when set, is called once per descriptor status that a
	// limit covered: the domain, the limit's name, whether it was over its
	// limit, whether it is in shadow mode, and whether the decision was
	// made while the store was failing (degraded).
	Observe func(domain, limit string, over, shadow, degraded bool)
}

// Service answers Envoy's RateLimitService/ShouldRateLimit from a Config
// and an Engine. It is safe for concurrent use; SetConfig swaps the
// configuration atomically (requests in flight finish with the old one).
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer

	eng     Engine
	into    intoEngine // eng, when it can write into a Result; else nil
	cfg     atomic.Pointer[Config]
	log     *slog.Logger
	opts    Options
	maxDesc int

	overrides overrideCache
}

// New returns a service deciding with eng under cfg (nil: no domains).
func New(eng Engine, cfg *Config, opts Options) *Service {
	s := &Service{eng: eng, opts: opts, log: opts.Logger, maxDesc: opts.MaxDescriptors}
	s.into, _ = eng.(intoEngine)
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.maxDesc <= 0 {
		s.maxDesc = 64
	}
	if cfg == nil {
		cfg = &Config{domains: map[string]*domain{}}
	}
	s.cfg.Store(cfg)
	s.overrides.m = map[overrideKey]*rateLimit{}
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

// Config returns the configuration in use.
func (s *Service) Config() *Config { return s.cfg.Load() }

// applied is one descriptor's limit for one request.
type applied struct {
	rl   *rateLimit
	hit  int // index into hits, -1 when none
	over bool
}

// ShouldRateLimit decides a request: every descriptor is matched to at
// most one limit, and all the limits that apply are checked and charged
// together, all or nothing.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	domainName := req.GetDomain()
	descs := req.GetDescriptors()
	if domainName == "" {
		return nil, status.Error(codes.InvalidArgument, "rls: domain must not be empty")
	}
	if len(descs) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rls: descriptor list must not be empty")
	}
	if len(descs) > s.maxDesc {
		return nil, status.Errorf(codes.InvalidArgument, "rls: %d descriptors, at most %d", len(descs), s.maxDesc)
	}
	cost := int64(req.GetHitsAddend())
	if cost == 0 {
		cost = 1
	}
	cfg := s.cfg.Load()
	dom := cfg.domains[domainName]

	var stack [8]applied
	app := stack[:0]
	if len(descs) > len(stack) {
		app = make([]applied, 0, len(descs))
	}
	// The hits go to the engine (an interface), so they live on the heap:
	// they come from a pool, with the engine's Result.
	sc := scratchPool.Get().(*scratch)
	defer sc.release()
	hits := sc.hits[:0]
	var costs [8]int64
	descCost := costs[:0]
	if len(descs) > len(costs) {
		descCost = make([]int64, 0, len(descs))
	}

	// 1. Match every descriptor to its limit.
	for i, d := range descs {
		ents := d.GetEntries()
		if len(ents) == 0 {
			return nil, status.Errorf(codes.InvalidArgument, "rls: descriptor %d has no entries", i)
		}
		for j, e := range ents {
			if e.GetKey() == "" {
				return nil, status.Errorf(codes.InvalidArgument, "rls: descriptor %d entry %d has an empty key", i, j)
			}
		}
		if d.GetIsNegativeHits() {
			return nil, status.Errorf(codes.InvalidArgument, "rls: descriptor %d: is_negative_hits is not supported (charges are never refunded)", i)
		}
		c := cost
		if ha := d.GetHitsAddend(); ha != nil && ha.GetValue() > 0 {
			if ha.GetValue() > math.MaxInt32 {
				return nil, status.Errorf(codes.InvalidArgument, "rls: descriptor %d: hits_addend %d is too large", i, ha.GetValue())
			}
			c = int64(ha.GetValue())
		}
		descCost = append(descCost, c)
		var rl *rateLimit
		if dom != nil {
			nd := dom.match(ents)
			if nd != nil {
				rl = nd.limit
			}
			if ov := d.GetLimit(); ov != nil {
				var err error
				rl, err = s.overrides.get(domainName, ents, rl, ov)
				if err != nil {
					return nil, status.Errorf(codes.InvalidArgument, "rls: descriptor %d: limit override: %v", i, err)
				}
			}
		}
		app = append(app, applied{rl: rl, hit: -1})
	}

	// 2. Replaces: a limit that applies drops every limit it names.
	for i := range app {
		rl := app[i].rl
		if rl == nil || len(rl.replaces) == 0 {
			continue
		}
		for j := range app {
			if j == i || app[j].rl == nil {
				continue
			}
			for _, name := range rl.replaces {
				if app[j].rl.name == name {
					app[j].rl = nil
					break
				}
			}
		}
	}

	// 3. Build the hits; blocked (requests_per_unit: 0) and never-fitting
	// descriptors are over the limit without asking the store.
	blocked := false
	for i := range app {
		rl := app[i].rl
		if rl == nil || rl.unlimited {
			continue
		}
		c := descCost[i]
		if rl.rule == nil || c > rl.rule.Params.Capacity() {
			app[i].over = true
			if !rl.shadow {
				blocked = true
			}
			continue
		}
		app[i].hit = len(hits)
		hits = append(hits, limiter.Hit{Rule: rl.rule, Key: counterKey(domainName, descs[i].GetEntries()), Cost: c})
	}
	sc.hits = hits

	// 4. One engine call for all of them.
	res := &sc.res
	*res = limiter.Result{Binding: -1, Decisions: res.Decisions[:0], Flags: res.Flags[:0]}
	if len(hits) > 0 {
		var err error
		switch {
		case s.into != nil && blocked:
			// Nothing may be charged; peek to report the others.
			err = s.into.PeekInto(ctx, hits, res)
		case s.into != nil:
			err = s.into.CheckInto(ctx, hits, res)
		case blocked:
			*res, err = s.eng.Peek(ctx, hits)
		default:
			*res, err = s.eng.Check(ctx, hits)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			s.log.Warn("rls: engine", "domain", domainName, "err", err)
			return nil, status.Errorf(codes.Unavailable, "rls: %v", err)
		}
		if len(res.Decisions) != len(hits) {
			return nil, status.Errorf(codes.Internal, "rls: engine answered %d decisions for %d hits", len(res.Decisions), len(hits))
		}
	}

	// 5. The answer, in as few allocations as the number of descriptors
	// allows.
	var (
		resp     *rlsv3.RateLimitResponse
		statuses []rlsv3.RateLimitResponse_DescriptorStatus
		limits   []rlsv3.RateLimitResponse_RateLimit
		durs     []durationpb.Duration
		hv       []corev3.HeaderValue
		hvp      []*corev3.HeaderValue
	)
	if len(app) == 1 {
		a := new(answer1)
		resp, statuses, limits, durs = &a.resp, a.st[:], a.lim[:], a.dur[:]
		resp.Statuses = a.stp[:]
		hv, hvp = a.hv[:0], a.hvp[:0]
	} else {
		resp = &rlsv3.RateLimitResponse{Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(app))}
		statuses = make([]rlsv3.RateLimitResponse_DescriptorStatus, len(app))
		limits = make([]rlsv3.RateLimitResponse_RateLimit, len(app))
		durs = make([]durationpb.Duration, len(app))
	}
	resp.OverallCode = rlsv3.RateLimitResponse_OK
	covered := sc.covered[:0]
	var wait time.Duration
	bindingAt := -1
	for i := range app {
		a := &app[i]
		st := &statuses[i]
		st.Code = rlsv3.RateLimitResponse_OK
		resp.Statuses[i] = st
		rl := a.rl
		if rl == nil {
			continue
		}
		if rl.unlimited {
			st.LimitRemaining = math.MaxUint32
			continue
		}
		lim := &limits[i]
		lim.Name, lim.RequestsPerUnit, lim.Unit = rl.name, rl.perUnit, rlsv3.RateLimitResponse_RateLimit_Unit(rl.unit)
		st.CurrentLimit = lim
		var d floodgate.Decision
		if a.hit >= 0 {
			d = res.Decisions[a.hit]
			a.over = !d.Allowed
		} else {
			// Blocked or never fitting: nothing to wait for but the
			// window; report the unit as the time until reset.
			d = floodgate.Decision{Limit: int64(rl.perUnit), ResetAfter: time.Duration(rl.unit.seconds()) * time.Second}
			if rl.rule != nil {
				d.Limit = rl.rule.Params.Capacity()
			}
		}
		st.LimitRemaining = uint32(min(max(d.Remaining, 0), math.MaxUint32))
		until := d.ResetAfter
		if a.over {
			until = d.RetryAfter
			if a.hit < 0 {
				until = d.ResetAfter
			}
		}
		// As durationpb.New, without an allocation of its own.
		dur := &durs[i]
		dur.Seconds, dur.Nanos = int64(until/time.Second), int32(until%time.Second)
		st.DurationUntilReset = dur
		if s.opts.Observe != nil {
			s.opts.Observe(domainName, rl.name, a.over, rl.shadow, res.Degraded)
		}
		if rl.shadow {
			continue
		}
		if a.over {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			if bindingAt < 0 {
				bindingAt = len(covered)
			}
			if until > wait {
				wait = until
			}
		}
		if !s.opts.NoHeaders {
			covered = append(covered, gateway.Covered{Header: rl.header, Decision: d})
		}
	}
	if len(covered) > 0 {
		// The binding limit first: the first over-limit one, or else the
		// one with the least remaining.
		if bindingAt < 0 {
			bindingAt = 0
			for i := range covered {
				if covered[i].Decision.Remaining < covered[bindingAt].Decision.Remaining {
					bindingAt = i
				}
			}
		}
		if bindingAt > 0 {
			b := covered[bindingAt]
			copy(covered[1:bindingAt+1], covered[:bindingAt])
			covered[0] = b
		}
		h := headerPool.Get().(http.Header)
		var ho *gateway.HeaderOptions
		if s.opts.LegacyHeaders {
			ho = &legacyHeaders
		}
		t := gateway.SetRateLimit(h, covered, ho, sc.buf[:0])
		n := 2
		if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
			n++
		}
		if ho != nil {
			n += 3
		}
		if cap(hv) < n {
			hv = make([]corev3.HeaderValue, 0, n)
		}
		hv = append(hv, corev3.HeaderValue{Key: "RateLimit-Policy", Value: first(h["Ratelimit-Policy"])},
			corev3.HeaderValue{Key: "RateLimit", Value: first(h["Ratelimit"])})
		if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
			hv = append(hv, corev3.HeaderValue{Key: "Retry-After", Value: strconv.FormatInt(gateway.RetryAfterSeconds(wait, t), 10)})
		}
		if ho != nil {
			hv = append(hv, corev3.HeaderValue{Key: "X-RateLimit-Limit", Value: first(h["X-Ratelimit-Limit"])},
				corev3.HeaderValue{Key: "X-RateLimit-Remaining", Value: first(h["X-Ratelimit-Remaining"])},
				corev3.HeaderValue{Key: "X-RateLimit-Reset", Value: first(h["X-Ratelimit-Reset"])})
		}
		if cap(hvp) < len(hv) {
			hvp = make([]*corev3.HeaderValue, 0, len(hv))
		}
		for i := range hv {
			hvp = append(hvp, &hv[i])
		}
		resp.ResponseHeadersToAdd = hvp
		clear(h)
		headerPool.Put(h)
	}
	sc.covered = covered
	return resp, nil
}

// answer1 holds a whole answer to a request with one descriptor, so that
// it takes one allocation.
type answer1 struct {
	resp rlsv3.RateLimitResponse
	stp  [1]*rlsv3.RateLimitResponse_DescriptorStatus
	st   [1]rlsv3.RateLimitResponse_DescriptorStatus
	lim  [1]rlsv3.RateLimitResponse_RateLimit
	dur  [1]durationpb.Duration
	hvp  [3]*corev3.HeaderValue // RateLimit-Policy, RateLimit, Retry-After
	hv   [3]corev3.HeaderValue
}

// scratch is what one call of ShouldRateLimit reuses from the calls before
// it: the hits, the engine's Result and the header items.
type scratch struct {
	hits    []limiter.Hit
	res     limiter.Result
	covered []gateway.Covered
	buf     []byte
}

var scratchPool = sync.Pool{New: func() any { return &scratch{buf: make([]byte, 0, 256)} }}

// maxScratch bounds the slices a scratch keeps for the next call.
const maxScratch = 64

// release drops the references the scratch holds and pools it, unless a
// large request made it big.
func (sc *scratch) release() {
	if cap(sc.hits) > maxScratch || cap(sc.covered) > maxScratch || cap(sc.res.Decisions) > maxScratch || cap(sc.buf) > 4096 {
		return
	}
	clear(sc.hits[:cap(sc.hits)])
	clear(sc.covered[:cap(sc.covered)])
	sc.hits, sc.covered = sc.hits[:0], sc.covered[:0]
	scratchPool.Put(sc)
}

// legacyHeaders asks gateway.SetRateLimit for the X-RateLimit-* fields.
var legacyHeaders = gateway.HeaderOptions{Legacy: true}

// headerPool recycles the header maps SetRateLimit writes into.
var headerPool = sync.Pool{New: func() any { return http.Header{} }}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// match finds the configured descriptor for a request's entries: at every
// level the entry's key and value exactly, else the longest wildcard value
// that is a prefix of the value, else the key alone; the entries must end
// exactly at the configured node (no backtracking, as envoyproxy/ratelimit).
func (d *domain) match(ents []*rlv3.RateLimitDescriptor_Entry) *node {
	lv := &d.root
	var nd *node
	for _, e := range ents {
		nd = lv.find(e.GetKey(), e.GetValue())
		if nd == nil {
			return nil
		}
		lv = &nd.children
	}
	return nd
}

func (lv *level) find(key, value string) *node {
	if nd := lv.exact[entryKey{key, value}]; nd != nil {
		return nd
	}
	for _, nd := range lv.wildcard[key] {
		if strings.HasPrefix(value, nd.value[:len(nd.value)-1]) {
			return nd
		}
	}
	return lv.anyValue[key]
}

// counterKey names the counter of one descriptor: the domain and every
// entry, so each distinct value counts on its own. Separators are
// control characters that descriptors do not carry in practice; lengths
// keep the encoding unambiguous anyway.
func counterKey(domain string, ents []*rlv3.RateLimitDescriptor_Entry) string {
	n := len(domain)
	for _, e := range ents {
		n += len(e.GetKey()) + len(e.GetValue()) + 8
	}
	b := make([]byte, 0, n)
	b = append(b, domain...)
	for _, e := range ents {
		b = append(b, '|')
		b = strconv.AppendInt(b, int64(len(e.GetKey())), 10)
		b = append(b, ':')
		b = append(b, e.GetKey()...)
		b = append(b, '=')
		b = append(b, e.GetValue()...)
	}
	return string(b)
}

// overrideKey identifies a compiled per-request limit override.
type overrideKey struct {
	base    *rateLimit
	name    string
	unit    Unit
	mult    uint32
	perUnit uint32
}

// overrideCache keeps compiled overrides so that a descriptor sent with
// the same override again reuses its rule. It holds at most 4096; when
// full it starts afresh (counters live in the store, not here).
type overrideCache struct {
	mu sync.Mutex // guards m
	m  map[overrideKey]*rateLimit
}

func (c *overrideCache) get(domainName string, ents []*rlv3.RateLimitDescriptor_Entry, base *rateLimit, ov *rlv3.RateLimitDescriptor_RateLimitOverride) (*rateLimit, error) {
	unit := Unit(ov.GetUnit())
	if unit < Second || unit > Week {
		return nil, fmt.Errorf("unknown unit %d", ov.GetUnit())
	}
	mult := uint32(1)
	if m := ov.GetUnitMultiplier(); m != nil && m.GetValue() > 0 {
		mult = m.GetValue()
	}
	k := overrideKey{base: base, unit: unit, mult: mult, perUnit: ov.GetRequestsPerUnit()}
	if base == nil {
		var b strings.Builder
		b.WriteString(domainName)
		for _, e := range ents {
			b.WriteByte('.')
			b.WriteString(e.GetKey())
			if e.GetValue() != "" {
				b.WriteByte('_')
				b.WriteString(e.GetValue())
			}
		}
		k.name = b.String()
	} else {
		k.name = base.name
	}
	c.mu.Lock()
	rl := c.m[k]
	c.mu.Unlock()
	if rl != nil {
		return rl, nil
	}
	rl = &rateLimit{name: k.name, unit: unit, perUnit: k.perUnit}
	if base != nil {
		rl.tmpl, rl.replaces, rl.shadow = base.tmpl, base.replaces, base.shadow
	}
	if rl.tmpl.algorithm.Family() == floodgate.FamilyQuota && (mult != 1 || (unit != Day && unit != Week && unit != Month)) {
		// A calendar quota cannot take this unit: count a fixed window.
		rl.tmpl.algorithm = floodgate.FixedWindow
	}
	if rl.tmpl.algorithm == 0 {
		rl.tmpl.algorithm = floodgate.FixedWindow
		if mult == 1 && (unit == Week || unit == Month) {
			rl.tmpl.algorithm = floodgate.Quota
		}
	}
	if k.perUnit == 0 {
		rl.header = gateway.NewLimitHeader(&floodgate.Limit{Name: rl.name, Algorithm: floodgate.FixedWindow,
			Window: time.Duration(unit.seconds()) * time.Second * time.Duration(mult)})
	} else {
		l, err := rl.tmpl.limit(rl.name, unit, mult, int64(k.perUnit))
		if err != nil {
			return nil, err
		}
		if rl.rule, err = limiter.NewRule(l, rl.tmpl.onFailure, rl.shadow); err != nil {
			return nil, err
		}
		rl.header = gateway.NewLimitHeader(&rl.rule.Limit)
	}
	c.mu.Lock()
	if len(c.m) >= 4096 {
		clear(c.m)
	}
	c.m[k] = rl
	c.mu.Unlock()
	return rl, nil
}
