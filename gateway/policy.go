package gateway

import (
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/identity"
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
}

// PolicyMatcher is the Matcher of a policy file: it works out who sent a
// request (client address through trusted proxies, API key, user from a
// verified token) with package identity, then asks the policy in force
// for the route and the limits. After a reload it follows the new
// policy's server settings (trusted proxies, API key header, tokens).
type PolicyMatcher struct {
	src      PolicySource
	upstream *url.URL
	current  atomic.Pointer[resolverFor]
	pool     sync.Pool // *policy.Match
}

// resolverFor is the identity resolver built for one policy.
type resolverFor struct {
	p        *policy.Policy
	resolver *identity.Resolver
	keyHdr   string
	fields   fieldSwitches
}

// NewPolicyMatcher returns the matcher of the policies src gives.
func NewPolicyMatcher(src PolicySource, o PolicyMatcherOptions) (*PolicyMatcher, error) {
	if src == nil || src.Policy() == nil {
		return nil, fmt.Errorf("gateway: a policy is required")
	}
	pm := &PolicyMatcher{src: src, upstream: o.Upstream}
	pm.pool.New = func() any { return new(policy.Match) }
	if _, err := pm.resolverFor(src.Policy()); err != nil {
		return nil, err
	}
	return pm, nil
}

func (pm *PolicyMatcher) resolverFor(p *policy.Policy) (*resolverFor, error) {
	if c := pm.current.Load(); c != nil && c.p == p {
		return c, nil
	}
	srv := p.Server()
	res, err := identity.NewResolver(srv.IdentityOptions())
	if err != nil {
		return nil, fmt.Errorf("gateway: identity: %w", err)
	}
	hdr := srv.APIKeyHeader
	if hdr == "" {
		hdr = identity.DefaultAPIKeyHeader
	}
	c := &resolverFor{p: p, resolver: res, keyHdr: http.CanonicalHeaderKey(hdr)}
	c.fields.opts, c.fields.noFields = HeaderSwitches(srv.Headers)
	pm.current.Store(c)
	return c, nil
}

// Match resolves the identity of r and matches it against the policy in
// force. The policy's header switches (server.headers) apply to the
// request, so that a reload changes them too.
func (pm *PolicyMatcher) Match(r *http.Request, m *Match) error {
	p := pm.src.Policy()
	rf, err := pm.resolverFor(p)
	if err != nil {
		return err
	}
	id := rf.resolver.Resolve(r)
	req := policy.Request{
		Method:    r.Method,
		Host:      r.Host,
		Path:      r.URL.Path,
		ClientIP:  id.ClientIP,
		ClientKey: id.ClientKey,
		User:      id.User,
		Header:    r.Header,
	}
	if v := r.Header[rf.keyHdr]; len(v) > 0 {
		req.APIKey = v[0]
	}
	pmm := pm.pool.Get().(*policy.Match)
	pmm.Reset()
	p.Match(&req, pmm)
	m.Forbidden = pmm.Forbidden
	m.fields = &rf.fields
	if pmm.Route != nil {
		m.Route = pmm.Route.Name
		m.Upstream = pmm.Route.Upstream
		if pm.upstream != nil {
			m.Upstream = pm.upstream
		}
	}
	m.Hits = append(m.Hits, pmm.Hits...)
	for _, l := range pmm.Limits {
		m.CountOn = append(m.CountOn, l.CountOn)
	}
	pmm.Reset()
	pm.pool.Put(pmm)
	return nil
}

// HeaderSwitches returns the gateway's header options for a file's
// settings: the optional fields, and whether the RateLimit fields are off.
func HeaderSwitches(h config.Headers) (opts HeaderOptions, noRateLimitFields bool) {
	return HeaderOptions{Legacy: h.XRateLimit, LimitName: h.BindingLimit}, !h.RateLimit
}
