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
	"github.com/floodgate/floodgate/limiter"
)

// Options configure a Service. The zero value is usable.
type Options struct {
	// Logger receives engine errors and rejected requests. Default: discard.
	Logger *slog.Logger
	// MaxDescriptors bounds the descriptors of one request; more is
	// InvalidArgument. Zero means 64.
	MaxDescriptors int
	// Fields switches the rate-limit fields added to
	// response_headers_to_add: RateLimit-Policy and RateLimit (on by
	// default), Retry-After on OVER_LIMIT, and the X-RateLimit-Limit,
	// X-RateLimit-Remaining and X-RateLimit-Reset fields that
	// envoyproxy/ratelimit adds when its response headers are enabled
	// (Legacy).
	Fields fields.Options
	// MaxOverrides bounds the limits given in requests (descriptors'
	// limit overrides) kept compiled (0: limiter.DefaultRequestLimits).
	MaxOverrides int
}

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
	renderer fields.Renderer

	overrides limiter.RequestLimits[overrideKey, *rateLimit]
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
	s.overrides.Max = opts.MaxOverrides
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

// Config returns the configuration in use.
func (s *Service) Config() *Config { return s.cfg.Load() }

// applied is one descriptor's limit for one request.
type applied struct {
	rl   *rateLimit
	cost int64
	hit  int // index into the hits, -1 when none
	over bool
}

// ShouldRateLimit decides a request: every descriptor is matched to at
// most one limit, and all the limits that apply are checked and charged
// together, all or nothing.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if err := s.validate(req); err != nil {
		return nil, err
	}
	// The hits go to the engine (an interface), so they live on the heap:
	// they come from a pool, with the engine's Result.
	sc := scratchPool.Get().(*scratch)
	defer sc.release()
	app, err := s.match(req, sc)
	if err != nil {
		return nil, err
	}
	blocked := s.hits(req, app, sc)
	res := &sc.res
	*res = limiter.Result{Binding: -1, Decisions: res.Decisions[:0], Flags: res.Flags[:0]}
	if len(sc.hits) > 0 {
		// A blocked descriptor denies without asking the store, so nothing
		// may be charged: peek to report the others.
		sc.req = limiter.Request{Front: limiter.FrontRLS, Peek: blocked, Hits: sc.hits}
		if err := s.eng.Decide(ctx, &sc.req, res); err != nil {
			if ctx.Err() != nil {
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			s.log.Warn("rls: engine", "domain", req.GetDomain(), "err", err)
			return nil, status.Errorf(codes.Unavailable, "rls: %v", err)
		}
	}
	return s.answer(app, sc), nil
}

// validate refuses requests that cannot be decided.
func (s *Service) validate(req *rlsv3.RateLimitRequest) error {
	descs := req.GetDescriptors()
	if req.GetDomain() == "" {
		return status.Error(codes.InvalidArgument, "rls: domain must not be empty")
	}
	if len(descs) == 0 {
		return status.Error(codes.InvalidArgument, "rls: descriptor list must not be empty")
	}
	if len(descs) > s.maxDesc {
		return status.Errorf(codes.InvalidArgument, "rls: %d descriptors, at most %d", len(descs), s.maxDesc)
	}
	for i, d := range descs {
		ents := d.GetEntries()
		if len(ents) == 0 {
			return status.Errorf(codes.InvalidArgument, "rls: descriptor %d has no entries", i)
		}
		for j, e := range ents {
			if e.GetKey() == "" {
				return status.Errorf(codes.InvalidArgument, "rls: descriptor %d entry %d has an empty key", i, j)
			}
		}
		if d.GetIsNegativeHits() {
			return status.Errorf(codes.InvalidArgument, "rls: descriptor %d: is_negative_hits is not supported (charges are never refunded)", i)
		}
		if ha := d.GetHitsAddend(); ha != nil && ha.GetValue() > math.MaxInt32 {
			return status.Errorf(codes.InvalidArgument, "rls: descriptor %d: hits_addend %d is too large", i, ha.GetValue())
		}
	}
	return nil
}

// match finds every descriptor's limit (a configured one, or a limit given
// in the request), with its cost, and drops the limits that another one
// that applies replaces.
func (s *Service) match(req *rlsv3.RateLimitRequest, sc *scratch) ([]applied, error) {
	domainName := req.GetDomain()
	dom := s.cfg.Load().domains[domainName]
	cost := int64(req.GetHitsAddend())
	if cost == 0 {
		cost = 1
	}
	app := sc.app[:0]
	for i, d := range req.GetDescriptors() {
		a := applied{cost: cost, hit: -1}
		if ha := d.GetHitsAddend(); ha != nil && ha.GetValue() > 0 {
			a.cost = int64(ha.GetValue())
		}
		if dom != nil {
			ents := d.GetEntries()
			if nd := dom.match(ents); nd != nil {
				a.rl = nd.limit
			}
			if ov := d.GetLimit(); ov != nil {
				var err error
				if a.rl, err = s.override(domainName, ents, a.rl, ov); err != nil {
					return nil, status.Errorf(codes.InvalidArgument, "rls: descriptor %d: limit override: %v", i, err)
				}
			}
		}
		app = append(app, a)
	}
	sc.app = app
	// A limit that applies drops every limit it names.
	for i := range app {
		rl := app[i].rl
		if rl == nil || len(rl.replaces) == 0 {
			continue
		}
		for j := range app {
			if j != i && app[j].rl != nil && slices.Contains(rl.replaces, app[j].rl.name) {
				app[j].rl = nil
			}
		}
	}
	return app, nil
}

// hits builds the engine's hits into sc.hits. Blocked descriptors
// (requests_per_unit: 0) and costs that can never fit are over the limit
// without asking the store; blocked reports whether one of them is
// enforced.
func (s *Service) hits(req *rlsv3.RateLimitRequest, app []applied, sc *scratch) (blocked bool) {
	hits := sc.hits[:0]
	descs := req.GetDescriptors()
	for i := range app {
		rl := app[i].rl
		if rl == nil || rl.unlimited {
			continue
		}
		if rl.rule == nil || app[i].cost > rl.rule.Params().Capacity() {
			app[i].over = true
			blocked = blocked || !rl.shadow
			continue
		}
		app[i].hit = len(hits)
		hits = append(hits, limiter.Hit{Rule: rl.rule, Key: counterKey(req.GetDomain(), descs[i].GetEntries()), Cost: app[i].cost})
	}
	sc.hits = hits
	return blocked
}

// answer turns the engine's Result into the response, in as few
// allocations as the number of descriptors allows.
func (s *Service) answer(app []applied, sc *scratch) *rlsv3.RateLimitResponse {
	res := &sc.res
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
	items := sc.items[:0]
	var wait time.Duration
	binding := -1 // in items
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
				d.Limit = rl.rule.Params().Capacity()
			}
		}
		st.LimitRemaining = uint32(min(max(d.Remaining, 0), math.MaxUint32))
		until := d.ResetAfter
		if a.over && a.hit >= 0 {
			until = d.RetryAfter
		}
		// As durationpb.New, without an allocation of its own.
		dur := &durs[i]
		dur.Seconds, dur.Nanos = int64(until/time.Second), int32(until%time.Second)
		st.DurationUntilReset = dur
		if rl.shadow {
			continue
		}
		if a.over {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			if binding < 0 {
				binding = len(items)
			}
			wait = max(wait, until)
		}
		items = append(items, fields.Item{Limit: rl.fields, Decision: d})
	}
	sc.items = items
	if len(items) == 0 {
		return resp
	}
	if binding < 0 {
		// Allowed: the limit with the fewest units left comes first.
		binding = 0
		for i := range items {
			if items[i].Decision.Remaining < items[binding].Decision.Remaining {
				binding = i
			}
		}
	}
	over := resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT
	sc.out = s.renderer.Render(sc.out[:0], items, binding, over, wait, &s.opts.Fields)
	if len(sc.out) == 0 {
		return resp
	}
	if cap(hv) < len(sc.out) {
		hv = make([]corev3.HeaderValue, 0, len(sc.out))
	}
	for _, f := range sc.out {
		hv = append(hv, corev3.HeaderValue{Key: f.Name, Value: f.Value})
	}
	if cap(hvp) < len(hv) {
		hvp = make([]*corev3.HeaderValue, 0, len(hv))
	}
	for i := range hv {
		hvp = append(hvp, &hv[i])
	}
	resp.ResponseHeadersToAdd = hvp
	return resp
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
// it: the descriptors' limits, the hits, the engine's Result and the
// fields.
type scratch struct {
	app   []applied
	hits  []limiter.Hit
	req   limiter.Request
	res   limiter.Result
	items []fields.Item
	out   []fields.Field
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// maxScratch bounds the slices a scratch keeps for the next call.
const maxScratch = 64

// release drops the references the scratch holds and pools it, unless a
// large request made it big.
func (sc *scratch) release() {
	if cap(sc.hits) > maxScratch || cap(sc.items) > maxScratch || cap(sc.res.Decisions) > maxScratch || cap(sc.app) > maxScratch {
		return
	}
	clear(sc.app[:cap(sc.app)])
	clear(sc.hits[:cap(sc.hits)])
	clear(sc.items[:cap(sc.items)])
	clear(sc.out[:cap(sc.out)])
	sc.app, sc.hits, sc.items, sc.out = sc.app[:0], sc.hits[:0], sc.items[:0], sc.out[:0]
	sc.req = limiter.Request{}
	scratchPool.Put(sc)
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

// override returns the limit a descriptor's limit override makes of base
// (nil when no configured descriptor matched), compiled once and kept in
// the service's bounded cache of limits given in requests.
func (s *Service) override(domainName string, ents []*rlv3.RateLimitDescriptor_Entry, base *rateLimit, ov *rlv3.RateLimitDescriptor_RateLimitOverride) (*rateLimit, error) {
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
	return s.overrides.Get(k, func() (*rateLimit, error) { return compileOverride(k) })
}

// compileOverride builds the limit of an override.
func compileOverride(k overrideKey) (*rateLimit, error) {
	if span := uint64(k.unit.seconds()) * uint64(k.mult); span > math.MaxInt64/uint64(time.Second) {
		return nil, fmt.Errorf("%d × %s is longer than a time span can be", k.mult, k.unit)
	}
	rl := &rateLimit{name: k.name, unit: k.unit, perUnit: k.perUnit}
	if base := k.base; base != nil {
		rl.tmpl, rl.replaces, rl.shadow = base.tmpl, base.replaces, base.shadow
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
	if rl.rule, err = limiter.NewRule(l, rl.tmpl.onFailure, rl.shadow); err != nil {
		return nil, err
	}
	rl.fields = fields.ForRule(rl.rule)
	return rl, nil
}
