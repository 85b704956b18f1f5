package gateway

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/fields"
	"github.com/floodgate/floodgate/identity"
	"github.com/floodgate/floodgate/internal/lograte"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
)

// PolicySource gives the policy in force. *policy.Reloader is one (the
// policy changes when the file does); Fixed wraps a policy that never
// changes.
type PolicySource interface {
	Policy() *policy.Policy
}

// Fixed returns a PolicySource that always gives p.
func Fixed(p *policy.Policy) PolicySource { return fixed{p} }

type fixed struct{ p *policy.Policy }

func (f fixed) Policy() *policy.Policy { return f.p }

// PolicyMatcherOptions configure a PolicyMatcher.
type PolicyMatcherOptions struct {
	// Upstream, when set, replaces the upstream of every route (the demo
	// upstream of "floodgate serve --demo").
	Upstream *url.URL
	// OnInvalidToken, when set, is told the reason (identity.Reason) of
	// every presented token that did not verify, for metrics.
	OnInvalidToken func(reason string)
	// Logger receives invalid tokens, at most one line a second with the
	// number left out (default: discard).
	Logger *slog.Logger
	// Now is the clock tokens are verified at (default time.Now).
	Now func() time.Time
}

// PolicyMatcher is the Matcher of a policy file: it works out who sent a
// request (client address through trusted proxies, API key, user from a
// verified token) with package identity, then asks the policy in force
// for the route and the limits. After a reload it follows the new
// policy's server settings (trusted proxies, API key header, tokens).
//
// A token is verified only when a limit the request matched counts per
// user, and only after the request passed the limits that do not (it is a
// UserMatcher); a token verified before is remembered until it expires.
type PolicyMatcher struct {
	src      PolicySource
	upstream *url.URL
	onBad    func(string)
	log      *slog.Logger
	now      func() time.Time
	current  atomic.Pointer[resolverFor]

	badLog   lograte.Gate // invalid-token lines: one a second
	verified atomic.Uint64
}

// TokensVerified counts the tokens whose signature was checked: requests
// whose limits did not need the user, and tokens remembered from before,
// cost none.
func (pm *PolicyMatcher) TokensVerified() uint64 { return pm.verified.Load() }

// resolverFor is the identity resolver built for one policy.
type resolverFor struct {
	p        *policy.Policy
	resolver *identity.Resolver
	keyHdr   string
	fields   fields.Options
	// keyed are the header fields limits count by, and those overload
	// control reads (keyedFields).
	keyed []string
	// spelled holds the fields, canonical, that say who sends a request
	// or tell the upstream who did (the API key's, the token's, the user
	// header, every route's identity headers and stripped credentials,
	// the forwarded address), and those keyed holds, which a request may
	// not carry spelled with '_' for '-' (underscored).
	spelled *NameMatch
}

// NewPolicyMatcher returns the matcher of the policies src gives.
func NewPolicyMatcher(src PolicySource, o PolicyMatcherOptions) (*PolicyMatcher, error) {
	if src == nil || src.Policy() == nil {
		return nil, fmt.Errorf("gateway: a policy is required")
	}
	pm := &PolicyMatcher{src: src, upstream: o.Upstream, onBad: o.OnInvalidToken, log: o.Logger, now: o.Now}
	if pm.log == nil {
		pm.log = slog.New(slog.DiscardHandler)
	}
	if pm.now == nil {
		pm.now = time.Now
	}
	if _, err := pm.resolverFor(src.Policy()); err != nil {
		return nil, err
	}
	return pm, nil
}

// repeated returns the name of a field that says who sends a request (the
// API key's, the token's, the user header) and that h carries more than
// once, or "". The gateway reads the first line of each; an upstream may
// read another, and would then serve a client other than the one charged.
// keyLines is the number of lines of the API key's field, which the caller
// counted.
func (rf *resolverFor) repeated(h identity.Header, keyLines int) string {
	if h == nil {
		return ""
	}
	if keyLines > 1 {
		return rf.keyHdr
	}
	for _, name := range rf.resolver.SingleFields() {
		if manyLines(h, name) {
			return name
		}
	}
	for _, name := range rf.keyed {
		if manyLines(h, name) {
			return name
		}
	}
	return ""
}

// apiKeyField returns the value of the request's API key field, which
// has keyLines lines: none is read when it has none (nearly every
// request of a client without a key), but Host, which net/http takes out
// of the header (Request.header).
func (rf *resolverFor) apiKeyField(r *Request, keyLines int) string {
	if keyLines == 0 && rf.keyHdr != "Host" {
		return ""
	}
	return r.header(rf.keyHdr)
}

// NameMatch holds field names a request may not carry spelled with '_'
// for '-' (resolverFor.spelled).
type NameMatch struct{ names []string }

// Matches reports whether name, a field's name as sent, is one of m's
// spelled with '_' for '-' (in any case). A name without '_' never is.
func (m *NameMatch) Matches(name string) bool {
	if strings.IndexByte(name, '_') < 0 {
		return false
	}
	for _, s := range m.names {
		if sameSpelled(name, s) {
			return true
		}
	}
	return false
}

// NameLister is a Header that can look through the names of its field
// lines as they were sent (an engine's own view of its header).
type NameLister interface {
	// FindName returns the first field name, as sent, that m matches, or
	// "" (a view of the header: clone it to keep it).
	FindName(m *NameMatch) string
}

// underscored returns the name of a field of h spelled with '_' for '-'
// as one of rf.spelled, or "". An upstream that reads its request as CGI
// variables do (HTTP_X_USER: PHP, WSGI, CGI programs) takes X_User for
// X-User, so a client could otherwise name a user, or an identity
// header's value, the gateway neither believed nor removed.
func (rf *resolverFor) underscored(h identity.Header) string {
	switch hh := h.(type) {
	case http.Header:
		for name := range hh {
			if rf.spelled.Matches(name) {
				return name
			}
		}
	case NameLister:
		return hh.FindName(rf.spelled)
	}
	return ""
}

// sameSpelled reports whether a and b are one name in any case, each '_'
// read as '-'.
func sameSpelled(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if x == '_' {
			x = '-'
		}
		if y == '_' {
			y = '-'
		}
		if x != y && lower(x) != lower(y) {
			return false
		}
	}
	return true
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// spelledFields returns the fields of p, canonical, once each, that a
// request may not carry spelled with '_' for '-' (resolverFor.spelled):
// those that say who sends it, and the fields limits and overload control
// count by (keyed). To an upstream that reads CGI variables X_Tenant is
// X-Tenant: a tenant named so would be served where the gateway charged
// another tenant's X-Tenant, or none.
func spelledFields(p *policy.Policy, keyHdr string, single, keyed []string) []string {
	// The client's address is the gateway's to tell as well: it rewrites
	// X-Forwarded-For, and removes X-Real-IP from a peer it does not trust.
	out := []string{keyHdr, "X-Forwarded-For", "X-Real-Ip"}
	add := func(name string) {
		if name != "" && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	for _, name := range single {
		add(name)
	}
	for _, name := range keyed {
		add(name)
	}
	for _, rt := range p.Routes() {
		if f := rt.Forward; f != nil {
			for _, name := range f.Remove {
				add(name)
			}
		}
	}
	return out
}

// keyedFields returns the header fields a limit of p counts by (key:
// header:NAME), a route's overload control tells tenants by (tenant:
// header:NAME) or takes a trusted proxy's tier from (tier_header),
// canonical, once each. A request carrying one of them more than once
// would be charged by its first line and may be served by another; a
// proxy that adds its tier line after the client's would leave the
// client's first, to be read as the tier.
func keyedFields(p *policy.Policy) []string {
	var out []string
	add := func(name string) {
		if name != "" && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	for _, l := range p.Limits() {
		for _, part := range l.Key {
			if part.Kind == policy.KeyHeader {
				add(part.Header)
			}
		}
	}
	for _, rt := range p.Routes() {
		if o := rt.Overload; o != nil {
			if o.Tenant == policy.TenantHeader {
				add(o.TenantField)
			}
			add(o.TierHeader)
		}
	}
	return out
}

// LineCounter is a Header that counts the lines of a field without
// gathering them (an engine's own view of its header).
type LineCounter interface {
	Lines(name string) int
}

// lines counts the lines of the field name (canonical) in h, empty ones
// among them.
func lines(h identity.Header, name string) int {
	switch hh := h.(type) {
	case http.Header:
		return len(hh[name])
	case LineCounter:
		return hh.Lines(name)
	}
	return len(h.Values(name))
}

// manyLines reports whether h has more than one line of the field name
// (canonical).
func manyLines(h identity.Header, name string) bool { return lines(h, name) > 1 }

func (pm *PolicyMatcher) resolverFor(p *policy.Policy) (*resolverFor, error) {
	if c := pm.current.Load(); c != nil && c.p == p {
		return c, nil
	}
	srv := p.Server()
	res, err := identity.NewResolver(srv.IdentityOptions())
	if err != nil {
		return nil, fmt.Errorf("gateway: identity: %w", err)
	}
	c := &resolverFor{p: p, resolver: res, keyHdr: http.CanonicalHeaderKey(srv.APIKeyHeader), fields: FieldOptions(srv.Headers), keyed: keyedFields(p)}
	c.spelled = &NameMatch{names: spelledFields(p, c.keyHdr, res.SingleFields(), c.keyed)}
	pm.current.Store(c)
	return c, nil
}

// Match resolves the identity of r, short of verifying a token it has not
// seen before, and matches it against the policy in force. The policy's
// field switches (server.headers) apply to the request, so that a reload
// changes them too.
func (pm *PolicyMatcher) Match(r *Request, m *Match) error {
	return pm.match(r, m, false)
}

// ReadsBodies reports whether a limit of the policy in force reads its
// cost from a request's body (BodyReader).
func (pm *PolicyMatcher) ReadsBodies() bool { return pm.src.Policy().ReadsBodies() }

// WriteTimeout returns the policy's server.timeouts.write (0: none): the
// engines of floodgate serve refuse a request a leaky queue would hold
// past it (Request.WriteDeadline), and so does a request decided in
// process as serve would decide it (explain, a replay).
func (pm *PolicyMatcher) WriteTimeout() time.Duration {
	return pm.src.Policy().Server().Timeouts.Write
}

// MatchUser matches r again with its token verified: the user's limits are
// included. A token that does not verify is counted and logged by reason;
// the request is then refused with 401 (Match.Reject) once the limits that
// need no user are charged, unless its route takes such requests as
// anonymous.
func (pm *PolicyMatcher) MatchUser(r *Request, m *Match) error {
	return pm.match(r, m, true)
}

func (pm *PolicyMatcher) match(r *Request, m *Match, verify bool) error {
	p := pm.src.Policy()
	rf, err := pm.resolverFor(p)
	if err != nil {
		return err
	}
	var id identity.Identity
	k := r.Known
	switch {
	case k != nil && k.ClientKey != "":
		id.ClientKey = k.ClientKey // an address that could not be read, as the gateway counted it
	case k != nil && k.ClientIP.IsValid():
		id.ClientIP, id.ClientKey = k.ClientIP, rf.resolver.Key(k.ClientIP)
	default:
		id = rf.resolver.ClientOfPeer(r.Peer, r.PeerText, r.Header)
	}
	if k != nil && k.UserKnown {
		id.User = k.User
	}
	req := policy.Request{
		Method:    r.Method,
		Host:      r.Host,
		Path:      r.Path,
		RawPath:   r.RawPath,
		ClientIP:  id.ClientIP,
		ClientKey: id.ClientKey,
		User:      id.User,
		Header:    r.Header,
	}
	badToken, userError, tokenPending := false, "", false
	if id.User == "" && (k == nil || !k.UserKnown) {
		if tok := rf.resolver.TokenOf(r.Header); tok != "" {
			now := pm.now()
			if u, ok := rf.resolver.CachedUser(tok, now); ok {
				req.User = u
			} else if !verify {
				req.UserPending, tokenPending = true, true
			} else {
				pm.verified.Add(1)
				if u, err := rf.resolver.User(tok, now); err == nil {
					req.User = u
				} else {
					pm.invalidToken(r, err)
					badToken, userError = true, identity.Reason(err)
				}
			}
		}
	}
	keyLines := 0 // the lines of the API key's field
	if r.Header != nil {
		keyLines = lines(r.Header, rf.keyHdr)
	}
	badField := ""
	if name := rf.repeated(r.Header, keyLines); name != "" {
		badField = "more than one " + name + " field"
	} else if name := rf.underscored(r.Header); name != "" {
		badField = "a field named " + strings.Clone(name) + " ('_' for '-')"
	}
	if badField != "" && m.Trace == nil {
		return &BadRequestError{Why: badField}
	}
	if v := rf.apiKeyField(r, keyLines); v != "" {
		req.APIKey = v
		if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
			req.APIKey = strings.TrimSpace(v[7:]) // "Authorization: Bearer KEY"
		}
	} else if k != nil {
		req.APIKey, req.KeyName = k.APIKey, k.KeyName
	}
	pmm := &m.policy // the policy empties it first
	if m.Trace != nil {
		*m.Trace = p.Explain(&req, pmm)
	} else {
		p.Match(&req, pmm)
	}
	if badField != "" || pmm.RouteAmbiguous || pmm.EscapedSlash {
		// Forwarded, an ambiguous one would be limited as one route and
		// served as another by an upstream that reads the slash the
		// other way. No limit counts it, nor a request refused for its
		// fields (which an explanation matched only to say which limits
		// go unchecked).
		why := badField
		switch {
		case why != "":
		case pmm.RouteAmbiguous:
			why = "an escaped slash (%2F) in the path would move it to another route"
		default:
			why = "an escaped slash (%2F) in the path (server.escaped_slash: reject)"
		}
		if m.Trace != nil {
			m.Trace.Refuse("the request is refused (400): " + why)
		}
		return &BadRequestError{Why: why}
	}
	switch {
	case pmm.Forbidden:
		m.Reject = http.StatusForbidden
	case badToken && (pmm.Route == nil || !pmm.Route.AnonymousOnInvalidToken):
		// The limits that need no user are charged, then 401.
		m.Reject = http.StatusUnauthorized
	}
	m.UserPending, m.TokenPending = pmm.UserPending, tokenPending
	m.Options = &rf.fields
	m.ClientIP, m.KeyID, m.User = id.ClientIP, pmm.KeyID, req.User
	m.ClientKey, m.Plan, m.Stage, m.UserError = id.ClientKey, pmm.Plan, pmm.Stage, userError
	m.PeerTrusted = id.PeerTrusted
	if name := rf.resolver.UserHeader(); name != "" && !id.PeerTrusted && r.Header != nil && lines(r.Header, name) > 0 {
		m.UntrustedUser = name
	}
	m.PlanTier = pmm.PlanTier
	m.Refusal = p.Refusal()
	if pmm.Route != nil {
		m.Refusal, m.Forward = pmm.Route.Refusal, pmm.Route.Forward
		m.Route = pmm.Route.Name
		m.Upstream = pmm.Route.Upstream
		m.Overload = pmm.Route.Overload
		if pm.upstream != nil {
			m.Upstream = pm.upstream
		}
	}
	m.Hits = append(m.Hits, pmm.Hits...)
	m.Limits = append(m.Limits, pmm.Limits...)
	for _, l := range pmm.Limits {
		m.Fields = append(m.Fields, l.Fields)
		m.CountOn = append(m.CountOn, l.CountOn)
		m.Costs = append(m.Costs, l.Costs)
	}
	return nil
}

// invalidToken counts a token that did not verify and logs it, at most
// once a second.
func (pm *PolicyMatcher) invalidToken(r *Request, err error) {
	reason := identity.Reason(err)
	if pm.onBad != nil {
		pm.onBad(reason)
	}
	held, ok := pm.badLog.Pass(time.Now())
	if !ok {
		return
	}
	pm.log.Warn("gateway: invalid token", "reason", reason, "err", err, "path", strings.Clone(r.Path),
		"remote", r.Peer, "not_logged_since", held)
}

// MethodOverrideOf returns the gateway's setting for a file's
// server.method_override.
func MethodOverrideOf(s string) MethodOverride {
	switch s {
	case config.MethodOverrideReject:
		return OverrideReject
	case config.MethodOverrideHonor:
		return OverrideHonor
	}
	return OverrideStrip
}

// EngineOptions returns the engine settings of a file's server section:
// the store deadlines, the cap on a counter key's length
// (server.memory.max_key_bytes: a longer key is counted under its
// SHA-256) and the instances sharing the store. Every front end that
// decides or peeks by a file (floodgate serve, a Guard, floodgate explain,
// a replay) builds its engine from them, so that a request is counted
// under the same store key by each; the caller adds its store's local
// fallback, observer and logger.
func EngineOptions(srv *config.Server) limiter.Options {
	return limiter.Options{Timeout: srv.StoreTimeout, HardTimeout: srv.StoreHardTimeout,
		MaxKeyBytes: srv.Memory.MaxKeyBytes, Instances: srv.Instances}
}

// FieldOptions returns the response field switches of a file's settings.
func FieldOptions(h config.Headers) fields.Options {
	return fields.Options{NoRateLimit: !h.RateLimit, Legacy: h.XRateLimit, LimitName: h.BindingLimit}
}
