package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/identity"
	"github.com/floodgate/floodgate/limiter"
)

// Scopes of limits, in evaluation order.
const (
	ScopePlan   = "plan"
	ScopeMethod = config.ScopeMethod
	ScopeRoute  = config.ScopeRoute
	ScopeStage  = config.ScopeStage
	ScopeGlobal = config.ScopeGlobal
)

// KeyKind is one part of a limit's key.
type KeyKind uint8

// Key parts.
const (
	KeyClientIP KeyKind = iota + 1
	KeyAPIKey
	KeyUser
	KeyRoute
	KeyStage
	KeyGlobal
	KeyHeader
)

// KeyPart is one part of a limit's key; Header is set for KeyHeader.
type KeyPart struct {
	// Kind is what the part counts by.
	Kind KeyKind
	// Header is the canonical header name of a KeyHeader part.
	Header string
}

// String returns the part as written in the file (client_ip, header:X).
func (k KeyPart) String() string {
	switch k.Kind {
	case KeyClientIP:
		return config.KeyClientIP
	case KeyAPIKey:
		return config.KeyAPIKey
	case KeyUser:
		return config.KeyUser
	case KeyRoute:
		return config.KeyRoute
	case KeyStage:
		return config.KeyStage
	case KeyGlobal:
		return config.KeyGlobal
	case KeyHeader:
		return config.KeyHeaderPrefix + k.Header
	}
	return "key(" + strconv.Itoa(int(k.Kind)) + ")"
}

func parseKeyPart(s string) KeyPart {
	switch s {
	case config.KeyClientIP:
		return KeyPart{Kind: KeyClientIP}
	case config.KeyAPIKey:
		return KeyPart{Kind: KeyAPIKey}
	case config.KeyUser:
		return KeyPart{Kind: KeyUser}
	case config.KeyRoute:
		return KeyPart{Kind: KeyRoute}
	case config.KeyStage:
		return KeyPart{Kind: KeyStage}
	case config.KeyGlobal:
		return KeyPart{Kind: KeyGlobal}
	}
	h, _ := strings.CutPrefix(s, config.KeyHeaderPrefix)
	return KeyPart{Kind: KeyHeader, Header: http.CanonicalHeaderKey(h)}
}

// Limit is one compiled limit of a policy.
type Limit struct {
	// Name identifies the limit (RateLimit-Policy item, metrics, the check
	// API). Generated limits are named stage.NAME, PLAN.rate, PLAN.quota
	// and account.
	Name string
	// Kind says how a denial is answered.
	Kind floodgate.Kind
	// Scope is plan, method, route, stage or global.
	Scope string
	// Rule is what the engine checks; rules of unchanged limits are kept
	// across reloads so their counts survive.
	Rule *limiter.Rule
	// Key lists the parts the limit counts per.
	Key []KeyPart
	// Cost is the units one request takes.
	Cost int64
	// CountOn, when not empty, lists the response statuses that are
	// charged: check with a peek before forwarding, charge after.
	CountOn []int
	// Shadow limits are counted but never block.
	Shadow bool
	// Window is the limit's nominal window for RateLimit-Policy's w: the
	// time a rate limit takes to refill its capacity, a window, or a
	// quota's period (a month counts as 30 days); 0 for concurrency.
	Window time.Duration
	// Plan is the usage plan of a plan limit.
	Plan string
	// Stage is the stage of a stage default limit.
	Stage string
	// MatchText describes the match for humans (floodgate check).
	MatchText string

	match matcher
}

// WindowSeconds is Window in whole seconds, rounded up, at least 1 (0 for
// concurrency limits).
func (l *Limit) WindowSeconds() int64 {
	if l.Window <= 0 {
		return 0
	}
	return int64((l.Window + time.Second - 1) / time.Second)
}

// Deferred reports whether the limit is charged after the response
// (CountOn is set).
func (l *Limit) Deferred() bool { return len(l.CountOn) > 0 }

// Counts reports whether a response with this status is charged.
func (l *Limit) Counts(status int) bool {
	if len(l.CountOn) == 0 {
		return true
	}
	for _, s := range l.CountOn {
		if s == status {
			return true
		}
	}
	return false
}

// KeyText renders the key for humans.
func (l *Limit) KeyText() string {
	parts := make([]string, len(l.Key))
	for i, k := range l.Key {
		parts[i] = k.String()
	}
	return strings.Join(parts, "+")
}

// Route is one compiled route.
type Route struct {
	// Name identifies the route.
	Name string
	// Upstream is where requests go; nil for a route without one.
	Upstream *url.URL
	// Stage is the route's stage, or "".
	Stage string
	// APIKeyRequired makes a missing, unknown or unplanned key a 403.
	APIKeyRequired bool

	match    matcher
	routeKey string // "route:NAME"
	stageKey string // "stage:STAGE"
}

type plan struct {
	name   string
	rate   *Limit
	quota  *Limit
	routes map[string]bool // nil: every route
}

type apiKey struct {
	name string
	plan *plan
}

// Policy is a compiled configuration: immutable and safe for concurrent
// use.
type Policy struct {
	file    *config.File
	routes  []*Route
	plans   map[string]*plan
	keys    map[[sha256.Size]byte]*apiKey
	stages  map[string]*Limit
	account *Limit
	scoped  [4][]*Limit // method, route, stage, global
	ordered []*Limit
	byName  map[string]*Limit
	rules   map[string]*limiter.Rule
	v6bits  int
	hash    [sha256.Size]byte // of the version (file and key file bytes), when loaded by a Reloader
}

// File returns the configuration the policy was compiled from. Callers
// must not modify it.
func (p *Policy) File() *config.File { return p.file }

// Server returns the server settings of the file. Callers must not modify
// them.
func (p *Policy) Server() *config.Server { return &p.file.Server }

// Routes returns the routes in matching order.
func (p *Policy) Routes() []*Route { return p.routes }

// Limits returns every limit in evaluation order: plans (rate, quota),
// method, route and stage-scoped limits, stage defaults, global limits and
// the account limit.
func (p *Policy) Limits() []*Limit { return p.ordered }

// Limit returns the limit with the given name.
func (p *Policy) Limit(name string) (*Limit, bool) {
	l, ok := p.byName[name]
	return l, ok
}

// KeyName returns the configured name and plan of a raw API key.
func (p *Policy) KeyName(raw string) (name, plan string, ok bool) {
	k, ok := p.keys[sha256.Sum256([]byte(raw))]
	if !ok {
		return "", "", false
	}
	return k.name, k.plan.name, true
}

// Compile builds a policy from a validated file. Rules of prev (may be
// nil) whose limits did not change are reused, so their counts carry over.
func Compile(f *config.File, prev *Policy) (*Policy, error) {
	if f == nil {
		return nil, fmt.Errorf("policy: nil file")
	}
	p := &Policy{
		file:   f,
		plans:  map[string]*plan{},
		keys:   map[[sha256.Size]byte]*apiKey{},
		stages: map[string]*Limit{},
		byName: map[string]*Limit{},
		rules:  map[string]*limiter.Rule{},
		v6bits: f.Server.IPv6Prefix,
	}
	if p.v6bits == 0 {
		p.v6bits = identity.DefaultIPv6Prefix
	}
	rule := func(l floodgate.Limit, onFailure string, shadow bool) (*limiter.Rule, error) {
		fp, err := floodgate.ParseFailurePolicy(onFailure)
		if err != nil {
			return nil, fmt.Errorf("policy: %s: %w", l.Name, err)
		}
		r, err := limiter.NewRule(l, fp, shadow)
		if err != nil {
			return nil, fmt.Errorf("policy: %s: %w", l.Name, err)
		}
		if prev != nil {
			if old, ok := prev.rules[r.ID]; ok && old.OnFailure == r.OnFailure && old.Shadow == r.Shadow {
				r = old
			}
		}
		if _, dup := p.rules[r.ID]; dup {
			return nil, fmt.Errorf("policy: %s: two limits with the same name and parameters", l.Name)
		}
		p.rules[r.ID] = r
		return r, nil
	}
	add := func(l *Limit) error {
		if _, dup := p.byName[l.Name]; dup {
			return fmt.Errorf("policy: two limits named %q", l.Name)
		}
		p.byName[l.Name] = l
		p.ordered = append(p.ordered, l)
		return nil
	}

	for i := range f.Routes {
		cr := &f.Routes[i]
		p.routes = append(p.routes, &Route{Name: cr.Name, Upstream: cr.UpstreamURL, Stage: cr.Stage,
			APIKeyRequired: cr.APIKeyRequired, match: compileMatch(cr.Match),
			routeKey: "route:" + cr.Name, stageKey: "stage:" + cr.Stage})
	}

	for i := range f.Plans {
		cp := &f.Plans[i]
		pl := &plan{name: cp.Name}
		if len(cp.Routes) > 0 {
			pl.routes = map[string]bool{}
			for _, r := range cp.Routes {
				pl.routes[r] = true
			}
		}
		keyParts := []KeyPart{{Kind: KeyAPIKey}}
		if cp.Throttle.Algorithm != 0 {
			r, err := rule(cp.Throttle, cp.OnFailure, false)
			if err != nil {
				return nil, err
			}
			pl.rate = newLimit(cp.Throttle.Name, ScopePlan, r, keyParts, 1)
			pl.rate.Plan = cp.Name
			pl.rate.MatchText = planMatch(cp)
			if err := add(pl.rate); err != nil {
				return nil, err
			}
		}
		if cp.QuotaLimit.Algorithm != 0 {
			r, err := rule(cp.QuotaLimit, cp.OnFailure, false)
			if err != nil {
				return nil, err
			}
			pl.quota = newLimit(cp.QuotaLimit.Name, ScopePlan, r, keyParts, 1)
			pl.quota.Plan = cp.Name
			pl.quota.MatchText = planMatch(cp)
			if err := add(pl.quota); err != nil {
				return nil, err
			}
		}
		p.plans[cp.Name] = pl
	}
	for i := range f.Keys {
		ck := &f.Keys[i]
		var h [sha256.Size]byte
		if b, err := hex.DecodeString(ck.SHA256); err != nil || len(b) != len(h) {
			return nil, fmt.Errorf("policy: key %q: bad sha256", ck.Name)
		} else {
			copy(h[:], b)
		}
		pl, ok := p.plans[ck.Plan]
		if !ok {
			return nil, fmt.Errorf("policy: key %q: unknown plan %q", ck.Name, ck.Plan)
		}
		p.keys[h] = &apiKey{name: ck.Name, plan: pl}
	}

	scopeIndex := map[string]int{ScopeMethod: 0, ScopeRoute: 1, ScopeStage: 2, ScopeGlobal: 3}
	var named [4][]*Limit
	for i := range f.Limits {
		cl := &f.Limits[i]
		r, err := rule(cl.Compiled, cl.OnFailure, cl.Shadow)
		if err != nil {
			return nil, err
		}
		parts := make([]KeyPart, len(cl.Key.Parts))
		for j, s := range cl.Key.Parts {
			parts[j] = parseKeyPart(s)
		}
		scope := cl.Scope
		if scope == "" {
			scope = ScopeRoute
		}
		l := newLimit(cl.Name, scope, r, parts, cl.Cost)
		l.CountOn = cl.CountOn
		l.match = compileMatch(cl.Match)
		l.MatchText = cl.Match.String()
		si, ok := scopeIndex[scope]
		if !ok {
			return nil, fmt.Errorf("policy: %s: unknown scope %q", cl.Name, scope)
		}
		named[si] = append(named[si], l)
	}
	for si := range named {
		for _, l := range named[si] {
			if err := add(l); err != nil {
				return nil, err
			}
			p.scoped[si] = append(p.scoped[si], l)
		}
		if si == 2 { // stage defaults follow the stage-scoped limits
			for i := range f.Stages {
				cs := &f.Stages[i]
				r, err := rule(cs.Compiled, cs.OnFailure, cs.Shadow)
				if err != nil {
					return nil, err
				}
				l := newLimit(cs.Compiled.Name, ScopeStage, r, []KeyPart{{Kind: KeyStage}}, 1)
				l.Stage = cs.Name
				l.MatchText = "stage=" + cs.Name
				if err := add(l); err != nil {
					return nil, err
				}
				p.stages[cs.Name] = l
			}
		}
	}
	if f.Account != nil {
		r, err := rule(f.Account.Compiled, f.Account.OnFailure, f.Account.Shadow)
		if err != nil {
			return nil, err
		}
		p.account = newLimit("account", ScopeGlobal, r, []KeyPart{{Kind: KeyGlobal}}, 1)
		p.account.MatchText = "*"
		if err := add(p.account); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func planMatch(cp *config.Plan) string {
	if len(cp.Routes) == 0 {
		return "plan=" + cp.Name
	}
	return "plan=" + cp.Name + " route=" + strings.Join(cp.Routes, ",")
}

func newLimit(name, scope string, r *limiter.Rule, key []KeyPart, cost int64) *Limit {
	l := &Limit{Name: name, Kind: r.Limit.Algorithm.Kind(), Scope: scope, Rule: r, Key: key,
		Cost: cost, Shadow: r.Shadow}
	l.Window = window(&r.Limit)
	return l
}

// window is a limit's nominal window (see Limit.Window).
func window(l *floodgate.Limit) time.Duration {
	switch l.Algorithm.Family() {
	case floodgate.FamilyRate:
		if l.Rate <= 0 {
			return 0
		}
		// Capacity·Per/Rate, computed without overflow for sane limits.
		w := time.Duration(float64(l.Per) * float64(l.Capacity()) / float64(l.Rate))
		return max(w, time.Second)
	case floodgate.FamilyWindow:
		return l.Window
	case floodgate.FamilyQuota:
		switch l.Period {
		case floodgate.Day:
			return 24 * time.Hour
		case floodgate.Week:
			return 7 * 24 * time.Hour
		case floodgate.Month:
			return 30 * 24 * time.Hour
		}
	}
	return 0
}

// Request is what Match reads of a request. The caller resolves the
// client's address and the user (package identity) first.
type Request struct {
	// Method is the HTTP method.
	Method string
	// Host is the Host header (a port is ignored).
	Host string
	// Path is the URL path, already percent-decoded (URL.Path).
	Path string
	// Stage overrides the route's stage when set.
	Stage string
	// ClientIP is the resolved client address.
	ClientIP netip.Addr
	// ClientKey is the client's key (identity.Identity.ClientKey); when
	// empty it is derived from ClientIP.
	ClientKey string
	// APIKey is the raw value of the API key header; it is hashed, never
	// stored or used as a counter key.
	APIKey string
	// User is the verified user, or "".
	User string
	// Header is read by header:NAME keys.
	Header http.Header
}

// Match is the result of matching one request. Callers keep one per
// goroutine (or pool them) and pass it to Policy.Match, which reuses its
// slices.
type Match struct {
	// Route is the first route that matched, or nil.
	Route *Route
	// Stage is the request's stage, or "".
	Stage string
	// Forbidden is set when the route requires an API key and the key is
	// missing, unknown, or in a plan that does not cover the route: answer
	// 403 {"message":"Forbidden"}. Hits is then empty.
	Forbidden bool
	// Plan and KeyName name the usage plan and API key, when known.
	Plan    string
	KeyName string
	// Hits are the limits to check, most specific first; Limits[i]
	// describes Hits[i].
	Hits   []limiter.Hit
	Limits []*Limit

	buf []byte
}

// Reset empties m for reuse.
func (m *Match) Reset() {
	clear(m.Hits)
	clear(m.Limits)
	*m = Match{Hits: m.Hits[:0], Limits: m.Limits[:0], buf: m.buf[:0]}
}

// Match finds the route and the limits that apply to r, writing into m.
func (p *Policy) Match(r *Request, m *Match) {
	m.Reset()
	rq := req{method: upper(r.Method), host: hostOnly(r.Host), path: cleanPath(r.Path)}
	for _, rt := range p.routes {
		if rt.match.match(&rq) {
			m.Route = rt
			rq.route = rt.Name
			break
		}
	}
	m.Stage = r.Stage
	if m.Stage == "" && m.Route != nil {
		m.Stage = m.Route.Stage
	}
	rq.stage = m.Stage

	var key *apiKey
	var keyHash [sha256.Size]byte
	if r.APIKey != "" {
		keyHash = sha256.Sum256([]byte(r.APIKey))
		key = p.keys[keyHash]
	}
	covered := key != nil && (key.plan.routes == nil || (m.Route != nil && key.plan.routes[m.Route.Name]))
	if m.Route != nil && m.Route.APIKeyRequired && !covered {
		m.Forbidden = true
		return
	}
	if key != nil {
		m.KeyName = key.name
		m.Plan = key.plan.name
	}
	clientKey := r.ClientKey
	if clientKey == "" {
		clientKey = identity.ClientKey(r.ClientIP, p.v6bits)
	}
	kc := keyCtx{r: r, m: m, key: key, hash: &keyHash, clientKey: clientKey}
	if covered {
		if l := key.plan.rate; l != nil {
			p.hit(m, l, &kc)
		}
		if l := key.plan.quota; l != nil {
			p.hit(m, l, &kc)
		}
	}
	for si := range p.scoped {
		for _, l := range p.scoped[si] {
			if l.match.match(&rq) {
				p.hit(m, l, &kc)
			}
		}
		if si == 2 && m.Stage != "" {
			if l := p.stages[m.Stage]; l != nil {
				p.hit(m, l, &kc)
			}
		}
	}
	if p.account != nil {
		p.hit(m, p.account, &kc)
	}
}

// keyCtx is what building a hit's key reads.
type keyCtx struct {
	r         *Request
	m         *Match
	key       *apiKey
	hash      *[sha256.Size]byte
	clientKey string
}

// hit appends l's hit unless the request lacks a part of its key.
func (p *Policy) hit(m *Match, l *Limit, kc *keyCtx) {
	if len(l.Key) == 1 {
		// Keys that are the same for many requests are built once.
		key := ""
		switch l.Key[0].Kind {
		case KeyGlobal:
			key = "global"
		case KeyRoute:
			if m.Route != nil {
				key = m.Route.routeKey
			}
		case KeyStage:
			if m.Route != nil && m.Stage == m.Route.Stage && m.Stage != "" {
				key = m.Route.stageKey
			}
		}
		if key != "" {
			m.Hits = append(m.Hits, limiter.Hit{Rule: l.Rule, Key: key, Cost: l.Cost})
			m.Limits = append(m.Limits, l)
			return
		}
	}
	b := m.buf[:0]
	for i, part := range l.Key {
		if i > 0 {
			b = append(b, '|')
		}
		switch part.Kind {
		case KeyClientIP:
			b = append(b, "ip:"...)
			b = append(b, kc.clientKey...)
		case KeyAPIKey:
			switch {
			case kc.key != nil:
				b = append(b, "key:"...)
				b = append(b, kc.key.name...)
			case kc.r.APIKey != "":
				// An unknown key is counted by (a prefix of) its hash,
				// never by its value.
				b = append(b, "keyhash:"...)
				b = hex.AppendEncode(b, kc.hash[:16])
			default:
				m.buf = b
				return
			}
		case KeyUser:
			if kc.r.User == "" {
				m.buf = b
				return
			}
			b = append(b, "user:"...)
			b = appendEscaped(b, kc.r.User)
		case KeyRoute:
			b = append(b, "route:"...)
			if m.Route != nil {
				b = append(b, m.Route.Name...)
			} else {
				b = append(b, '-')
			}
		case KeyStage:
			b = append(b, "stage:"...)
			if m.Stage != "" {
				b = append(b, m.Stage...)
			} else {
				b = append(b, '-')
			}
		case KeyGlobal:
			b = append(b, "global"...)
		case KeyHeader:
			v := kc.r.Header.Get(part.Header)
			if v == "" {
				m.buf = b
				return
			}
			b = append(b, "h:"...)
			b = append(b, part.Header...)
			b = append(b, '=')
			if len(v) > 128 {
				sum := sha256.Sum256([]byte(v))
				b = append(b, "sha256:"...)
				b = hex.AppendEncode(b, sum[:16])
			} else {
				b = appendEscaped(b, v)
			}
		}
	}
	m.buf = b
	m.Hits = append(m.Hits, limiter.Hit{Rule: l.Rule, Key: string(b), Cost: l.Cost})
	m.Limits = append(m.Limits, l)
}

// appendEscaped appends s with the characters that separate key parts or
// delimit Redis hash tags percent-encoded, so no value can pose as another.
func appendEscaped(b []byte, s string) []byte {
	const hexd = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '%' || c == '|' || c == '{' || c == '}' || c <= ' ' || c == 0x7f:
			b = append(b, '%', hexd[c>>4], hexd[c&15])
		default:
			b = append(b, c)
		}
	}
	return b
}
