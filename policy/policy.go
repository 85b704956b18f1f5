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
	"github.com/floodgate/floodgate/fields"
	"github.com/floodgate/floodgate/identity"
	"github.com/floodgate/floodgate/internal/intern"
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
	KeyPlan
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
	// secret is set for a KeyHeader part whose field carries a
	// credential (credentialHeader): its values are counted by their
	// hash, never written into a counter key.
	secret bool
}

// credentialHeader reports whether the header field name (canonical)
// carries a credential under the server settings s: the API key header,
// the token header, Authorization, Proxy-Authorization or Cookie.
func credentialHeader(name string, s *config.Server) bool {
	switch name {
	case "Authorization", "Proxy-Authorization", "Cookie":
		return true
	case http.CanonicalHeaderKey(s.APIKeyHeader):
		return true
	}
	j := s.User.JWT
	return j != nil && j.Header != "" && name == http.CanonicalHeaderKey(j.Header)
}

// String returns the part as written in the file (client_ip, header:X).
func (k KeyPart) String() string {
	switch k.Kind {
	case KeyClientIP:
		return config.KeyClientIP
	case KeyAPIKey:
		return config.KeyAPIKey
	case KeyPlan:
		return config.KeyPlan
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
	case config.KeyPlan:
		return KeyPart{Kind: KeyPlan}
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

// Identities is a set of the identities of a request that a limit's key
// holds (Limit.Identities): the client's address, its API key, its user.
// A limit whose key holds none of them (global, per route, per plan, per
// header) is shared by every client it counts.
type Identities uint8

// The identities a limit's key can hold.
const (
	IdentityClientIP Identities = 1 << iota
	IdentityAPIKey
	IdentityUser
)

// Has reports whether s holds every identity of i (false when i is none).
func (s Identities) Has(i Identities) bool { return i != 0 && s&i == i }

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
	// Identities are the identities Key holds, computed once when the
	// policy is compiled: a refusal of the limit is an offence of these
	// alone (the penalty box).
	Identities Identities
	// Cost is the units one request takes.
	Cost int64
	// CountOn, when not empty, lists the response statuses that are
	// charged: the cost is reserved before forwarding and kept only for
	// these statuses.
	CountOn []int
	// Costs, when not nil, says where the request or the response tells
	// the limit's cost (an estimate, an actual cost).
	Costs *Cost
	// Shadow limits are counted but never block.
	Shadow bool
	// Fields is the limit's part of the response fields (RateLimit-Policy
	// and RateLimit), computed once when the policy is compiled.
	Fields *fields.Limit
	// Plan is the usage plan of a plan limit.
	Plan string
	// Stage is the stage of a stage default limit.
	Stage string
	// MatchText describes the match for humans (floodgate check).
	MatchText string

	// Refusal, when set, is how a 429 the limit decides looks.
	Refusal *Refusal

	match     matcher
	needsUser bool
	needsKey  bool
}

// DefaultCost is the units one request takes when it does not tell its
// cost: its estimate's default for a limit that reads an estimate (at
// most the limit's capacity, as every estimate), else Cost. Every front
// end charges a request that names no cost this much.
func (l *Limit) DefaultCost() int64 {
	if c := l.Costs; c != nil && c.Estimate != nil && c.Default > 0 {
		if l.Rule != nil {
			return min(c.Default, l.Rule.Capacity())
		}
		return c.Default
	}
	return max(l.Cost, 1)
}

// Cost says where a limit's cost is read when it is not the fixed Cost.
type Cost struct {
	// Estimate is where the request tells the cost (nil: Limit.Cost).
	Estimate *CostSource
	// Default is the estimate when the request does not tell it.
	Default int64
	// Actual is where the response tells the real cost; nil when the
	// cost is known before forwarding.
	Actual *CostSource
	// TTL is how long a reservation is held (limits with Actual or
	// CountOn).
	TTL time.Duration
}

// CostSource is a header or a JSON body field holding a whole number.
type CostSource struct {
	// Header is the header's canonical name, or "".
	Header string
	// Body is the JSON path, one name per level, or nil.
	Body []string
}

// Reserved reports whether the limit's cost is settled after the response
// (Actual or CountOn): it is reserved while the request is in flight.
func (l *Limit) Reserved() bool {
	return len(l.CountOn) > 0 || (l.Costs != nil && l.Costs.Actual != nil)
}

// NeedsUser reports whether the limit counts per user, so that a request
// must have its user resolved (a token verified) before it is charged.
func (l *Limit) NeedsUser() bool { return l.needsUser }

// Deferred reports whether the limit counts by the response's status
// (CountOn is set): its cost is reserved while the request is in flight.
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
	// AnonymousOnInvalidToken makes a request whose token does not verify
	// anonymous (its per-user limits do not apply); by default it is
	// refused with 401 once the limits that need no user were charged.
	AnonymousOnInvalidToken bool
	// StreamPerMessage makes the gRPC interceptors charge a streaming call
	// on the route for each message the client sends, instead of once
	// when it opens (the file's grpc_stream: per_message).
	StreamPerMessage bool
	// Overload is the route's overload control, or nil (the file's
	// overload block).
	Overload *Overload
	// Refusal is how the route's 429s look (the route's refusal, or the
	// server's); nil for the gateway's default answer.
	Refusal *Refusal
	// Forward says what the upstream is told of the route's requests; nil
	// when nothing is set or removed.
	Forward *Forward

	match    matcher
	routeKey string // "route:NAME"
	stageKey string // "stage:STAGE"
}

type plan struct {
	name   string
	tier   string // the criticality tier of its keys, or ""
	rate   *Limit
	quota  *Limit
	routes map[string]bool // nil: every route
}

// Policy is a compiled configuration: immutable and safe for concurrent
// use.
type Policy struct {
	file       *config.File
	reading    config.PathReading // how paths are read: case, format suffix
	slash      string             // server.escaped_slash: how a path with "%2F" is read
	unknownKey *Limit
	routes     []*Route
	plans      map[string]*plan
	keys       map[[sha256.Size]byte]*Key
	named      map[string]*Key // the file's keys by name
	dynamic    *keyHook        // the keys that are not in the file, shared by a Reloader's policies
	stages     map[string]*Limit
	account    *Limit
	scoped     [4][]*Limit // method, route, stage, global
	// routeIndex numbers the routes as routes does; limitIndex numbers
	// the scoped limits as flat does, with those of scope global from
	// globalAt on (the stages' default limits come before them).
	routeIndex pathIndex
	limitIndex pathIndex
	flat       []*Limit
	globalAt   int32
	ordered    []*Limit
	byName     map[string]*Limit
	rules      map[string]*limiter.Rule
	v6bits     int
	refusal    *Refusal          // server.refusal
	hash       [sha256.Size]byte // of the version (file and key file bytes), when loaded by a Reloader
	// counterKeys holds the counter keys built last: the requests of one
	// client (a flood above all) build the same key again and again.
	counterKeys *intern.Table
}

// counterKeySlots is the size of a policy's table of counter keys.
const counterKeySlots = 1024

// File returns the configuration the policy was compiled from. Callers
// must not modify it.
func (p *Policy) File() *config.File { return p.file }

// Server returns the server settings of the file. Callers must not modify
// them.
func (p *Policy) Server() *config.Server { return &p.file.Server }

// Routes returns the routes in matching order.
func (p *Policy) Routes() []*Route { return p.routes }

// UnknownKeyLimit is the limit of requests refused for a missing or
// unknown API key, per client address (counted only for those), so that a
// flood of guessed keys is answered 429 once it is used up.
func (p *Policy) UnknownKeyLimit() *Limit { return p.unknownKey }

// Limits returns every limit in evaluation order: the limit of requests
// with a missing or unknown API key (UnknownKeyLimit), plans (rate,
// quota), method, route and stage-scoped limits, stage defaults, global
// limits and the account limit.
func (p *Policy) Limits() []*Limit { return p.ordered }

// ReadsBodies reports whether a limit reads its cost estimate from a
// request's body (estimate: {body: ...}): such a request can be decided
// only once its body is read.
func (p *Policy) ReadsBodies() bool {
	for _, l := range p.ordered {
		if c := l.Costs; c != nil && c.Estimate != nil && c.Estimate.Body != nil {
			return true
		}
	}
	return false
}

// Limit returns the limit with the given name.
func (p *Policy) Limit(name string) (*Limit, bool) {
	l, ok := p.byName[name]
	return l, ok
}

// KeyName returns the configured name and plan of a raw API key.
func (p *Policy) KeyName(raw string) (name, plan string, ok bool) {
	sum := sha256.Sum256([]byte(raw))
	k, ok := p.keys[sum]
	if !ok {
		if k = p.dynamicKey(&sum); k == nil {
			return "", "", false
		}
	}
	return k.name, k.plan.name, true
}

// Compile builds a policy from a validated file. Rules of prev (may be
// nil) whose limits did not change are reused, so their counts carry over.
func Compile(f *config.File, prev *Policy) (*Policy, error) {
	if f == nil {
		return nil, fmt.Errorf("policy: nil file")
	}
	c := &compiler{prev: prev, p: &Policy{
		file:   f,
		plans:  map[string]*plan{},
		keys:   map[[sha256.Size]byte]*Key{},
		named:  map[string]*Key{},
		stages: map[string]*Limit{},
		byName: map[string]*Limit{},
		rules:  map[string]*limiter.Rule{},
		v6bits: f.Server.IPv6Prefix,
	}}
	c.p.counterKeys = intern.New(counterKeySlots)
	if c.p.v6bits == 0 {
		c.p.v6bits = identity.DefaultIPv6Prefix
	}
	c.p.reading = f.Server.PathReading()
	c.p.slash = f.Server.EscapedSlash
	if prev != nil {
		c.p.dynamic = prev.dynamic
	}
	c.routes()
	for _, step := range []func() error{c.unknownKeys, c.plans, c.keys, c.scoped, c.account, c.gatekeeping} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return c.p, nil
}

// compiler builds one Policy, section by section, in evaluation order.
type compiler struct {
	p    *Policy
	prev *Policy
}

// rule compiles a limit into a rule, reusing prev's rule of the same limit.
func (c *compiler) rule(l floodgate.Limit, onFailure string, shadow bool, consistency string) (*limiter.Rule, error) {
	fp, err := floodgate.ParseFailurePolicy(onFailure)
	if err != nil {
		return nil, fmt.Errorf("policy: %s: %w", l.Name, err)
	}
	cons, err := floodgate.ParseConsistency(consistency)
	if err != nil {
		return nil, fmt.Errorf("policy: %s: %w", l.Name, err)
	}
	r, err := limiter.NewRuleWith(l, limiter.RuleOptions{OnFailure: fp, Shadow: shadow, Consistency: cons})
	if err != nil {
		return nil, fmt.Errorf("policy: %s: %w", l.Name, err)
	}
	if c.prev != nil {
		if old, ok := c.prev.rules[r.ID()]; ok && old.OnFailure() == r.OnFailure() && old.Shadow() == r.Shadow() &&
			old.Consistency() == r.Consistency() {
			r = old
		}
	}
	if _, dup := c.p.rules[r.ID()]; dup {
		return nil, fmt.Errorf("policy: %s: two limits with the same name and parameters", l.Name)
	}
	c.p.rules[r.ID()] = r
	return r, nil
}

// add appends a limit to the evaluation order.
func (c *compiler) add(l *Limit) error {
	if _, dup := c.p.byName[l.Name]; dup {
		return fmt.Errorf("policy: two limits named %q", l.Name)
	}
	c.p.byName[l.Name] = l
	c.p.ordered = append(c.p.ordered, l)
	return nil
}

// routes compiles the routes in matching order.
func (c *compiler) routes() {
	for i := range c.p.file.Routes {
		cr := &c.p.file.Routes[i]
		c.p.routes = append(c.p.routes, &Route{Name: cr.Name, Upstream: cr.UpstreamURL, Stage: cr.Stage,
			APIKeyRequired:          cr.APIKeyRequired,
			AnonymousOnInvalidToken: cr.OnInvalidToken == config.InvalidTokenAnonymous,
			StreamPerMessage:        cr.GRPCStream == config.GRPCStreamPerMessage,
			Overload:                compileOverload(cr.Name, cr.Overload, &c.p.file.Server),
			match:                   compileMatch(cr.Match, c.p.reading), routeKey: "route:" + cr.Name, stageKey: "stage:" + cr.Stage})
		c.p.routeIndex.add(int32(i), &c.p.routes[i].match, false)
	}
}

// UnknownKeyLimitName names the limit of requests with a missing or unknown
// API key (Policy.UnknownKeyLimit).
const UnknownKeyLimitName = "unknown-api-key"

// DefaultUnknownKeyLimit is the limit of requests refused for a missing
// or unknown API key when the file sets none: 20 a minute per client
// address, in bursts of up to 20.
var DefaultUnknownKeyLimit = floodgate.Limit{Name: UnknownKeyLimitName, Algorithm: floodgate.TokenBucket,
	Rate: 20, Per: time.Minute, Burst: 20}

// unknownKeys compiles the limit of requests refused for their API key.
func (c *compiler) unknownKeys() error {
	l, onFailure, shadow, consistency := DefaultUnknownKeyLimit, "", false, ""
	if p := c.p.file.Server.UnknownKeyLimit; p != nil {
		l, onFailure, shadow, consistency = p.Compiled, p.OnFailure, p.Shadow, p.Consistency
		l.Name = UnknownKeyLimitName
	}
	r, err := c.rule(l, onFailure, shadow, consistency)
	if err != nil {
		return err
	}
	c.p.unknownKey = newLimit(UnknownKeyLimitName, ScopeGlobal, r, []KeyPart{{Kind: KeyClientIP}}, 1)
	c.p.unknownKey.MatchText = "missing or unknown api key"
	return c.add(c.p.unknownKey)
}

// plans compiles the usage plans: each one's rate limit, then its quota.
func (c *compiler) plans() error {
	for i := range c.p.file.Plans {
		cp := &c.p.file.Plans[i]
		pl := &plan{name: cp.Name, tier: cp.Tier}
		if len(cp.Routes) > 0 {
			pl.routes = map[string]bool{}
			for _, r := range cp.Routes {
				pl.routes[r] = true
			}
		}
		for _, part := range []struct {
			l    floodgate.Limit
			into **Limit
		}{{cp.Throttle, &pl.rate}, {cp.QuotaLimit, &pl.quota}} {
			if part.l.Algorithm == 0 {
				continue
			}
			consistency := ""
			if part.into == &pl.rate {
				consistency = cp.Consistency
			}
			r, err := c.rule(part.l, cp.OnFailure, false, consistency)
			if err != nil {
				return err
			}
			l := newLimit(part.l.Name, ScopePlan, r, []KeyPart{{Kind: KeyAPIKey}}, 1)
			l.Plan, l.MatchText = cp.Name, planMatch(cp)
			if err := c.add(l); err != nil {
				return err
			}
			*part.into = l
		}
		c.p.plans[cp.Name] = pl
	}
	return nil
}

// keys indexes the API keys by their SHA-256.
func (c *compiler) keys() error {
	for i := range c.p.file.Keys {
		ck := &c.p.file.Keys[i]
		var h [sha256.Size]byte
		if b, err := hex.DecodeString(ck.SHA256); err != nil || len(b) != len(h) {
			return fmt.Errorf("policy: key %q: bad sha256", ck.Name)
		} else {
			copy(h[:], b)
		}
		pl, ok := c.p.plans[ck.Plan]
		if !ok {
			return fmt.Errorf("policy: key %q: unknown plan %q", ck.Name, ck.Plan)
		}
		k := newKey(ck.Name, pl, pl.rate, pl.quota, 0)
		c.p.keys[h] = k
		c.p.named[ck.Name] = k
	}
	return nil
}

// scopeIndex orders the named limits' scopes.
var scopeIndex = map[string]int{ScopeMethod: 0, ScopeRoute: 1, ScopeStage: 2, ScopeGlobal: 3}

// scoped compiles the named limits by scope, with the stages' default
// limits after the stage-scoped ones.
func (c *compiler) scoped() error {
	var named [4][]*Limit
	for i := range c.p.file.Limits {
		cl := &c.p.file.Limits[i]
		r, err := c.rule(cl.Compiled, cl.OnFailure, cl.Shadow, cl.Consistency)
		if err != nil {
			return err
		}
		parts := make([]KeyPart, len(cl.Key.Parts))
		for j, s := range cl.Key.Parts {
			parts[j] = parseKeyPart(s)
			parts[j].secret = parts[j].Kind == KeyHeader && credentialHeader(parts[j].Header, &c.p.file.Server)
		}
		scope := cl.Scope
		if scope == "" {
			scope = ScopeRoute
		}
		si, ok := scopeIndex[scope]
		if !ok {
			return fmt.Errorf("policy: %s: unknown scope %q", cl.Name, scope)
		}
		l := newLimit(cl.Name, scope, r, parts, cl.Cost)
		l.CountOn = cl.CountOn
		l.Costs = compileCosts(cl)
		l.match = compileMatch(cl.Match, c.p.reading)
		l.MatchText = cl.Match.String()
		named[si] = append(named[si], l)
	}
	for si := range named {
		if si == scopeIndex[ScopeGlobal] {
			c.p.globalAt = int32(len(c.p.flat))
		}
		for _, l := range named[si] {
			if err := c.add(l); err != nil {
				return err
			}
			c.p.scoped[si] = append(c.p.scoped[si], l)
			c.p.limitIndex.add(int32(len(c.p.flat)), &l.match, true)
			c.p.flat = append(c.p.flat, l)
		}
		if si == scopeIndex[ScopeStage] {
			if err := c.stages(); err != nil {
				return err
			}
		}
	}
	return nil
}

// stages compiles each stage's default limit.
func (c *compiler) stages() error {
	for i := range c.p.file.Stages {
		cs := &c.p.file.Stages[i]
		r, err := c.rule(cs.Compiled, cs.OnFailure, cs.Shadow, cs.Consistency)
		if err != nil {
			return err
		}
		l := newLimit(cs.Compiled.Name, ScopeStage, r, []KeyPart{{Kind: KeyStage}}, 1)
		l.Stage = cs.Name
		l.MatchText = "stage=" + cs.Name
		if err := c.add(l); err != nil {
			return err
		}
		c.p.stages[cs.Name] = l
	}
	return nil
}

// account compiles the account-wide limit, checked last.
func (c *compiler) account() error {
	a := c.p.file.Account
	if a == nil {
		return nil
	}
	r, err := c.rule(a.Compiled, a.OnFailure, a.Shadow, a.Consistency)
	if err != nil {
		return err
	}
	c.p.account = newLimit("account", ScopeGlobal, r, []KeyPart{{Kind: KeyGlobal}}, 1)
	c.p.account.MatchText = "*"
	return c.add(c.p.account)
}

func planMatch(cp *config.Plan) string {
	if len(cp.Routes) == 0 {
		return "plan=" + cp.Name
	}
	return "plan=" + cp.Name + " route=" + strings.Join(cp.Routes, ",")
}

// compileCosts returns where a limit's cost is read, or nil for a fixed
// cost.
func compileCosts(cl *config.Limit) *Cost {
	if cl.Estimate == nil && cl.Actual == nil && len(cl.CountOn) == 0 {
		return nil
	}
	c := &Cost{TTL: cl.ReserveTTL}
	source := func(header, body string) *CostSource {
		if header != "" {
			return &CostSource{Header: http.CanonicalHeaderKey(header)}
		}
		return &CostSource{Body: strings.Split(body, ".")}
	}
	if e := cl.Estimate; e != nil {
		c.Estimate, c.Default = source(e.Header, e.Body), e.Default
	}
	if a := cl.Actual; a != nil {
		c.Actual = source(a.Header, a.Body)
	}
	return c
}

func newLimit(name, scope string, r *limiter.Rule, key []KeyPart, cost int64) *Limit {
	l := &Limit{Name: name, Kind: r.Algorithm().Kind(), Scope: scope, Rule: r, Key: key,
		Cost: cost, Shadow: r.Shadow(), Fields: fields.ForRule(r)}
	for _, k := range key {
		l.needsUser = l.needsUser || k.Kind == KeyUser
		l.needsKey = l.needsKey || k.Kind == KeyAPIKey || k.Kind == KeyPlan
		switch k.Kind {
		case KeyClientIP:
			l.Identities |= IdentityClientIP
		case KeyAPIKey:
			l.Identities |= IdentityAPIKey
		case KeyUser:
			l.Identities |= IdentityUser
		}
	}
	return l
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
	// RawPath is the URL path as sent, escaped (URL.EscapedPath), or ""
	// when the caller does not have it. When it holds an escaped slash
	// ("%2F"), the path has a second reading, the one of servers that
	// split a path at its slashes before decoding its segments (net/http's
	// ServeMux for "/users/{id}", Express, Rails): "/users/a%2Fb" is one
	// segment after "/users" there, and three segments decoded. Which
	// reading routes and matches is server.escaped_slash's: with both (the
	// default) a limit applies when its paths match either reading, and a
	// request whose two readings choose different routes is marked
	// Match.RouteAmbiguous; with segment only the second reading is
	// matched, with decoded only Path, and with reject the request is
	// marked Match.EscapedSlash.
	RawPath string
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
	// KeyName, when APIKey is empty, gives the request's API key by what
	// Match.KeyID says of it, for callers that know keys only as a log
	// shows them (replaying an access log, explaining a decision): the
	// name of a key of the file, or of the key source when it finds keys
	// by name (KeyNamer: keys made through the admin API), matched as if
	// the request carried that key, or "?" and 32 hex digits for a key the policy did not know,
	// counted as that unknown key was. Any other name counts as an
	// unknown key.
	KeyName string
	// User is the verified user, or "".
	User string
	// UserPending says that the request may have a user that has not been
	// resolved yet (it carries a token that was not verified): Match then
	// leaves out the limits that count per user and sets
	// Match.UserPending, so that the caller can check the other limits
	// before it spends CPU on the token, and match again with User set.
	UserPending bool
	// Header is read by header:NAME keys (nil: no header fields).
	Header Header
}

// Header is the view of a request's header fields that header:NAME keys
// read; http.Header is one. Names are given in canonical form.
type Header interface {
	// Get returns the first value of a field, or "".
	Get(name string) string
}

// header returns the first value of a field of r, or "". Host is the host
// the request is routed by (r.Host, as routes read it: no port, no final
// dot, lower case), whatever the fields say: net/http's server takes the
// field out of the header, and an absolute-form target's host wins over
// it, so a limit keyed by header:Host would otherwise count nothing on one
// engine and a field no route reads on the other.
func (r *Request) header(name string) string {
	if name == "Host" {
		return hostOnly(r.Host)
	}
	if r.Header == nil {
		return ""
	}
	return r.Header.Get(name)
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
	// 403 {"message":"Forbidden"} once Hits are charged. Hits then hold the
	// unknown-key limit (per client address) and the limits that apply
	// without a key.
	Forbidden bool
	// Plan and KeyName name the usage plan and API key, when known.
	Plan    string
	KeyName string
	// PlanTier is the plan's criticality tier (plans[].tier) on a route
	// the plan covers, or "".
	PlanTier string
	// KeyID is the API key as a log may show it: the key's name, or for a
	// key the policy does not know "?" and the first 16 bytes of its
	// SHA-256 in hex (what its counters are keyed by); "" when the request
	// carries no key. It never holds the key itself.
	KeyID string
	// Hits are the limits to check, most specific first; Limits[i]
	// describes Hits[i].
	Hits   []limiter.Hit
	Limits []*Limit
	// UserPending is set when Request.UserPending left out limits that
	// count per user.
	UserPending bool
	// RouteAmbiguous is set when the two readings of a path with an
	// escaped slash (Request.RawPath) choose different routes: Route is
	// then the decoded path's, which an upstream that keeps the slash
	// inside its segment would not serve as that route, so a caller
	// should refuse the request rather than forward it.
	RouteAmbiguous bool
	// EscapedSlash is set under server.escaped_slash: reject when the
	// path holds an escaped slash (Request.RawPath): a caller should
	// refuse the request rather than forward it.
	EscapedSlash bool

	buf  []byte
	cand []int32 // the limits the index found, by number
}

// Reset empties m for reuse.
func (m *Match) Reset() {
	clear(m.Hits)
	clear(m.Limits)
	*m = Match{Hits: m.Hits[:0], Limits: m.Limits[:0], buf: m.buf[:0], cand: m.cand[:0]}
}

// Route returns the route of a request with this method, host and path,
// as Match finds it, or nil when none matches; it works out nothing else.
func (p *Policy) Route(method, host, path string) *Route {
	rq := p.req(method, host, path)
	return p.route(&rq)
}

// req returns what matching reads of a request's method, host and path.
func (p *Policy) req(method, host, path string) req {
	return req{method: upper(method), host: hostOnly(host), path: p.matchPath(cleanPath(path))}
}

// matchPath returns a cleaned path as the policy's paths match it: without
// its final ".format" (server.format_suffix: ignore) and in lower case
// (path_matching: case_insensitive) when the file says so
// (config.PathReading.Path).
func (p *Policy) matchPath(path string) string {
	return p.reading.Path(path)
}

// route returns the first route that matches rq, or nil. Only the routes
// that the index finds for rq's path are looked at.
func (p *Policy) route(rq *req) *Route {
	best := int32(len(p.routes))
	best = p.firstRoute(&p.routeIndex.root, rq.path[1:], false, rq, best)
	if rq.alt != "" {
		best = p.firstRoute(&p.routeIndex.root, rq.alt[1:], false, rq, best)
	}
	if best = p.firstOf(p.routeIndex.always, rq, best); best < int32(len(p.routes)) {
		return p.routes[best]
	}
	return nil
}

// escapedSlash reads a path with an escaped slash (raw, as sent) as
// server.escaped_slash says: under both it returns the reading with the
// slash inside its segment, for limits to match beside rq's decoded path;
// under segment it sets rq's path to that reading alone; under reject it
// marks m.EscapedSlash. Under decoded, or when raw holds no escaped slash,
// rq keeps the decoded path alone. It returns "" when there is no second
// reading.
func (p *Policy) escapedSlash(raw string, rq *req, m *Match) string {
	if raw == "" || p.slash == config.EscapedSlashDecoded || !hasEscapedSlash(raw) {
		return ""
	}
	if p.slash == config.EscapedSlashReject {
		m.EscapedSlash = true
		return ""
	}
	alt := segmentPath(raw)
	if alt == "" {
		return ""
	}
	if alt = p.matchPath(alt); alt == rq.path {
		return ""
	}
	if p.slash == config.EscapedSlashSegment {
		rq.path = alt
		return ""
	}
	return alt
}

// Match finds the route and the limits that apply to r, writing into m.
func (p *Policy) Match(r *Request, m *Match) {
	p.match(r, m)
}

// match is Match; it returns r as the limits were matched against it (the
// path as the policy reads it, its other reading, the route and the
// stage), for Explain to say why the others do not apply.
func (p *Policy) match(r *Request, m *Match) req {
	m.Reset()
	rq := p.req(r.Method, r.Host, r.Path)
	alt := p.escapedSlash(r.RawPath, &rq, m)
	m.Route = p.route(&rq)
	if alt != "" {
		// Routes are chosen by one reading; limits match either.
		arq := rq
		arq.path = alt
		m.RouteAmbiguous = p.route(&arq) != m.Route
		rq.alt = alt
	}
	if m.Route != nil {
		rq.route = m.Route.Name
	}
	m.Stage = r.Stage
	if m.Stage == "" && m.Route != nil {
		m.Stage = m.Route.Stage
	}
	rq.stage = m.Stage

	key, keyHash, presented := p.apiKey(r)
	if key != nil {
		m.KeyID = key.name
	} else if presented {
		m.KeyID = unknownKeyID(&keyHash)
	}
	covered := key != nil && (key.plan.routes == nil || (m.Route != nil && key.plan.routes[m.Route.Name]))
	clientKey := r.ClientKey
	if clientKey == "" {
		clientKey = identity.ClientKey(r.ClientIP, p.v6bits)
	}
	kc := keyCtx{r: r, m: m, key: key, hash: &keyHash, presented: presented, clientKey: clientKey}
	if m.Route != nil && m.Route.APIKeyRequired && !covered {
		// Refused, but only after the limits that need no key: guessing
		// keys is throttled like anything else.
		m.Forbidden = true
		kc.key, kc.noKey = nil, true
		if p.unknownKey != nil {
			p.hit(m, p.unknownKey, &kc)
		}
	} else if key != nil {
		m.KeyName = key.name
		m.Plan = key.plan.name
		if covered {
			// A plan's tier is its keys' on the routes it covers: on
			// another, its key would choose a tier there that nothing
			// in the plan counts.
			m.PlanTier = key.plan.tier
		}
	}
	if covered && !m.Forbidden {
		if l := key.rate; l != nil {
			p.hit(m, l, &kc)
		}
		if l := key.quota; l != nil {
			p.hit(m, l, &kc)
		}
	}
	// The method, route, stage and global limits, in that order, with the
	// stage's default limit before the global ones: only those that the
	// index finds for the request's path and route are looked at.
	m.cand = p.limitIndex.candidates(m.cand[:0], rq.path, rq.alt, rq.route)
	stage := m.Stage != ""
	for _, id := range m.cand {
		if stage && id >= p.globalAt {
			p.stageHit(m, &kc)
			stage = false
		}
		if l := p.flat[id]; l.match.match(&rq) {
			p.hit(m, l, &kc)
		}
	}
	if stage {
		p.stageHit(m, &kc)
	}
	if p.account != nil {
		p.hit(m, p.account, &kc)
	}
	return rq
}

// stageHit adds the hit of the default limit of the request's stage, if
// it has one.
func (p *Policy) stageHit(m *Match, kc *keyCtx) {
	if l := p.stages[m.Stage]; l != nil {
		p.hit(m, l, kc)
	}
}

// keyCtx is what building a hit's key reads.
type keyCtx struct {
	r         *Request
	m         *Match
	key       *Key
	hash      *[sha256.Size]byte
	presented bool // the request carries a key, known or not
	clientKey string
	noKey     bool // the request was refused for its key: skip limits that need one
}

// apiKey finds the request's API key: the key (of the file, or of the key
// source), or nil for a missing or unknown one, with the hash an unknown
// key is counted by, and whether the request carries a key at all.
func (p *Policy) apiKey(r *Request) (key *Key, hash [sha256.Size]byte, presented bool) {
	switch {
	case r.APIKey != "":
		hash = sha256.Sum256([]byte(r.APIKey))
		if key = p.keys[hash]; key == nil && p.dynamic != nil {
			sum := hash // escapes to the key source, only on this path
			key = p.dynamicKey(&sum)
		}
		return key, hash, true
	case r.KeyName != "":
		if k := p.named[r.KeyName]; k != nil {
			return k, hash, true
		}
		if k := p.dynamicKeyNamed(r.KeyName); k != nil {
			return k, hash, true
		}
		if id, ok := strings.CutPrefix(r.KeyName, "?"); ok && len(id) == 32 {
			if _, err := hex.Decode(hash[:16], []byte(id)); err == nil {
				return nil, hash, true
			}
		}
		return nil, sha256.Sum256([]byte("name:" + r.KeyName)), true
	}
	return nil, hash, false
}

// unknownKeyID is the KeyID of an unknown key: "?" and the hex of the
// hash prefix its counters are keyed by.
func unknownKeyID(h *[sha256.Size]byte) string {
	var b [33]byte
	b[0] = '?'
	hex.Encode(b[1:], h[:16])
	return string(b[:])
}

// hit appends l's hit unless the request lacks a part of its key.
func (p *Policy) hit(m *Match, l *Limit, kc *keyCtx) {
	if kc.r.UserPending && kc.r.User == "" && l.needsUser {
		m.UserPending = true
		return
	}
	if kc.noKey && l.needsKey {
		return
	}
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
				b = append(b, kc.key.counter...)
			case kc.presented:
				// An unknown key is counted by (a prefix of) its hash,
				// never by its value.
				b = append(b, "keyhash:"...)
				b = hex.AppendEncode(b, kc.hash[:16])
			default:
				m.buf = b
				return
			}
		case KeyPlan:
			if kc.key == nil || kc.key.plan == nil {
				m.buf = b
				return
			}
			b = append(b, "plan:"...)
			b = append(b, kc.key.plan.name...)
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
			v := kc.r.header(part.Header)
			if v == "" {
				m.buf = b
				return
			}
			b = append(b, "h:"...)
			b = append(b, part.Header...)
			b = append(b, '=')
			if len(v) > 128 || part.secret {
				// A '%' no escaped value holds unescaped (appendEscaped
				// writes it as %25): no value sent as it is can spell a
				// hashed one.
				sum := sha256.Sum256([]byte(v))
				b = append(b, "%sha256:"...)
				b = hex.AppendEncode(b, sum[:16])
			} else {
				b = appendEscaped(b, v)
			}
		}
	}
	m.buf = b
	m.Hits = append(m.Hits, limiter.Hit{Rule: l.Rule, Key: p.counterKeys.String(b), Cost: l.Cost})
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
