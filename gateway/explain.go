package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/policy"

	"golang.org/x/net/http/httpguts"
)

// ErrNotExplainable is returned by Explain for a gateway whose Matcher is
// not a PolicyMatcher: only a policy can say why a limit did not apply.
var ErrNotExplainable = errors.New("gateway: only a gateway with a PolicyMatcher can explain its decisions")

// ExplainOptions complete a request to explain.
type ExplainOptions struct {
	// KeyName gives the request's API key as a log shows it (a key's
	// name, or "?" and a hash prefix) when it carries no key header; see
	// policy.Request.KeyName.
	KeyName string
}

// Explanation says how the gateway would answer one request, and why,
// without charging anything: every limit of the policy in evaluation
// order, whether it applies and why, its counter key and its state as a
// peek sees it now, the binding limit and the answer.
type Explanation struct {
	Method    string `json:"method"`
	Host      string `json:"host,omitempty"`
	Path      string `json:"path"`
	ClientIP  string `json:"client_ip"`
	ClientKey string `json:"client_key"`
	// Key is the API key as the access log shows it (a name, never the
	// key); Plan is its usage plan.
	Key  string `json:"key,omitempty"`
	Plan string `json:"plan,omitempty"`
	// User is the request's user; UserError says why a presented token
	// gave none.
	User      string `json:"user,omitempty"`
	UserError string `json:"user_error,omitempty"`
	Route     string `json:"route,omitempty"`
	Stage     string `json:"stage,omitempty"`
	// Forbidden says why the request is refused before any limit.
	Forbidden string `json:"forbidden,omitempty"`
	// Limits holds every limit of the policy, in evaluation order.
	Limits []LimitExplanation `json:"limits"`
	// Binding names the limit that decides the answer.
	Binding string `json:"binding,omitempty"`
	// Degraded says why the limits were decided by their failure
	// policies instead of the store.
	Degraded string `json:"degraded,omitempty"`
	// Overload is the state of the route's overload control, when it
	// has one. A look never takes a place under its cap, and the answer
	// does not include it: a request forwarded by its limits still needs
	// a place (Overload.Admit says whether one is free now).
	Overload *OverloadExplanation `json:"overload,omitempty"`
	// Answer is what the client would get.
	Answer ExplainedAnswer `json:"answer"`
}

// OverloadExplanation is the state of a route's overload control, and
// where the request stands in it.
type OverloadExplanation struct {
	// Limit is the cap on requests in flight now (learnt when Adaptive);
	// Inflight and Queued are the requests under it and waiting for it.
	Limit    int  `json:"limit"`
	Adaptive bool `json:"adaptive,omitempty"`
	Inflight int  `json:"inflight"`
	Queued   int  `json:"queued"`
	// Latency and NoLoad are the adaptive limit's latency of its last
	// window and its estimate of the upstream's latency without queueing.
	Latency Duration `json:"latency,omitempty"`
	NoLoad  Duration `json:"no_load_latency,omitempty"`
	// Tier is the request's criticality tier, Ceiling the requests in
	// flight below which a request of its tier is admitted, and Tenant
	// whom its queue serves it as.
	Tier    string `json:"tier"`
	Ceiling int    `json:"ceiling"`
	Tenant  string `json:"tenant"`
	// Admit reports that a request of its tier would take a place at
	// once; otherwise it would wait up to MaxWait in the queue, or, with
	// no queue, be shed (503).
	Admit   bool     `json:"admit"`
	MaxWait Duration `json:"max_wait,omitempty"`
}

// LimitExplanation is one limit of an Explanation.
type LimitExplanation struct {
	Name      string `json:"name"`
	Scope     string `json:"scope"`
	Algorithm string `json:"algorithm"`
	Shadow    bool   `json:"shadow,omitempty"`
	// Matched reports whether the limit applies to the request; Reason
	// says why or why not, Missing which key part the request lacks.
	Matched bool   `json:"matched"`
	Reason  string `json:"reason"`
	Missing string `json:"missing,omitempty"`
	// CounterKey is the key the limit counts the request under.
	CounterKey string `json:"counter_key,omitempty"`
	// State is the limit's decision for the request now, as a peek sees
	// it (nothing is charged).
	State *LimitState `json:"state,omitempty"`
	// Binding marks the limit that decides the answer.
	Binding bool `json:"binding,omitempty"`
}

// LimitState is one limit's decision for the request, as a peek sees it.
type LimitState struct {
	Allowed   bool  `json:"allowed"`
	Limit     int64 `json:"limit"`
	Remaining int64 `json:"remaining"`
	// ResetAfter is the time until the key is back to full; RetryAfter,
	// on a denial, the wait before the request would pass; Delay, for a
	// leaky queue, how long the request would be held.
	ResetAfter Duration `json:"reset_after"`
	RetryAfter Duration `json:"retry_after,omitempty"`
	Delay      Duration `json:"delay,omitempty"`
}

// ExplainedAnswer is the answer a client would get.
type ExplainedAnswer struct {
	// Status is the status code; 0 when the request is forwarded and the
	// upstream answers.
	Status int `json:"status,omitempty"`
	// Forwarded reports that the request goes on to the upstream (or the
	// wrapped handler), after Delay.
	Forwarded bool     `json:"forwarded"`
	Delay     Duration `json:"delay,omitempty"`
	// Headers are the rate-limit fields the answer carries.
	Headers []ExplainedHeader `json:"headers,omitempty"`
	// Body is the gateway's own body, when it answers itself.
	Body string `json:"body,omitempty"`
}

// ExplainedHeader is one header field of an explained answer.
type ExplainedHeader struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Duration is a time.Duration written in JSON as Go writes durations, to
// the microsecond ("1.5s", "16h1m22.069041s").
type Duration time.Duration

// MarshalText writes d to the microsecond as time.Duration's String does.
func (d Duration) MarshalText() ([]byte, error) {
	return []byte(time.Duration(d).Round(time.Microsecond).String()), nil
}

// UnmarshalText reads what MarshalText writes.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	*d = Duration(v)
	return nil
}

// Explain says how the gateway would answer r now, and why, without
// charging anything. r goes through the admission flow of every request
// (Handle, with Peek): its identity is resolved as the gateway resolves it
// (a token is verified where a limit the request matched needs the user),
// and the state of every limit that applies is peeked at. Its answer is
// floodgate serve's, whose engines refuse a request a leaky queue would
// hold past the policy's server.timeouts.write.
func (g *Gateway) Explain(ctx context.Context, r *http.Request, o ExplainOptions) (*Explanation, error) {
	pm, ok := g.matcher.(*PolicyMatcher)
	if !ok {
		return nil, ErrNotExplainable
	}
	v := RequestOf(r)
	if wt := pm.WriteTimeout(); wt > 0 {
		v.WriteDeadline = time.Now().Add(wt)
	}
	if o.KeyName != "" {
		v.Known = &Known{KeyName: o.KeyName}
	}
	var tr policy.Explanation
	h := g.Handle(ctx, v, HandleOptions{Peek: true, Trace: &tr})
	defer h.Done(0)
	if h.Err != nil && !errors.Is(h.Err, floodgate.ErrNeverFits) {
		return nil, fmt.Errorf("gateway: explain: %w", h.Err)
	}
	m, res := h.Match, h.Result
	e := &Explanation{Method: r.Method, Host: r.Host, Path: r.URL.Path, ClientKey: m.ClientKey, Key: m.KeyID, Plan: m.Plan,
		User: m.User, UserError: m.UserError, Route: m.Route, Stage: m.Stage, Forbidden: tr.Forbidden}
	if m.ClientIP.IsValid() {
		e.ClientIP = m.ClientIP.String()
	}
	if len(m.Hits) > 0 {
		e.Degraded = res.Degraded.String()
	}
	for _, lm := range tr.Limits {
		l := lm.Limit
		le := LimitExplanation{Name: l.Name, Scope: l.Scope, Algorithm: l.Rule.Algorithm().String(), Shadow: l.Shadow,
			Matched: lm.Matched, Reason: lm.Reason, Missing: lm.Missing, CounterKey: lm.Key}
		if lm.Matched && lm.Hit < len(res.Decisions) {
			d := &res.Decisions[lm.Hit]
			le.State = &LimitState{Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining,
				ResetAfter: Duration(d.ResetAfter), RetryAfter: Duration(d.RetryAfter), Delay: Duration(d.Delay)}
			if lm.Hit == res.Binding {
				le.Binding = true
				e.Binding = l.Name
			}
		}
		e.Limits = append(e.Limits, le)
	}
	if o := m.Overload; o != nil {
		e.Overload = g.explainOverload(o, h.st)
	}
	e.Answer = ExplainedAnswer{Status: h.Status, Forwarded: h.Forwarded, Delay: Duration(h.Delay), Body: string(h.Body)}
	for _, f := range h.Fields {
		e.Answer.Headers = append(e.Answer.Headers, ExplainedHeader{Name: f.Name, Value: f.Value})
	}
	return e, nil
}

// ExplainRequest describes a request to explain, as the admin listener's
// POST /v1/explain takes it in JSON and floodgate explain from its flags.
type ExplainRequest struct {
	// Method defaults to GET; Path is required (a query is ignored).
	Method string `json:"method"`
	Path   string `json:"path"`
	Host   string `json:"host,omitempty"`
	// IP is the address the request comes from (the connection's peer,
	// default 127.0.0.1); with trusted proxies, an X-Forwarded-For header
	// is read as the gateway reads it.
	IP string `json:"ip,omitempty"`
	// Headers are the request's headers (the API key, a token ...).
	Headers map[string]string `json:"headers,omitempty"`
	// KeyName gives the API key by its name instead (ExplainOptions).
	KeyName string `json:"key_name,omitempty"`
}

// HTTPRequest builds the request to explain.
func (er *ExplainRequest) HTTPRequest(ctx context.Context) (*http.Request, ExplainOptions, error) {
	method := er.Method
	if method == "" {
		method = http.MethodGet
	}
	if !strings.HasPrefix(er.Path, "/") {
		return nil, ExplainOptions{}, fmt.Errorf("gateway: explain: the path must start with /, got %q", er.Path)
	}
	ip := er.IP
	if ip == "" {
		ip = "127.0.0.1"
	}
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return nil, ExplainOptions{}, fmt.Errorf("gateway: explain: %q is not an IP address", er.IP)
	}
	r, err := http.NewRequestWithContext(ctx, method, "http://explain"+er.Path, nil)
	if err != nil {
		return nil, ExplainOptions{}, fmt.Errorf("gateway: explain: %w", err)
	}
	r.Host = er.Host
	r.RemoteAddr = netip.AddrPortFrom(addr, 50000).String()
	for k, v := range er.Headers {
		// Add: two spellings of one name are two lines of the field, as
		// the gateway would receive them (and refuse them where it reads
		// the field for who sends the request).
		if err := AddExplainedField(r.Header, k, v); err != nil {
			return nil, ExplainOptions{}, err
		}
	}
	return r, ExplainOptions{KeyName: er.KeyName}, nil
}

// AddExplainedField adds the field name: value to the header of a request
// to explain as the gateway's parsers take a field from a client: the
// spaces and tabs at the value's ends are not part of it, and a name that
// is not a token, or a value with CR, LF or NUL, cannot be sent at all
// (an error says so).
func AddExplainedField(h http.Header, name, value string) error {
	if !httpguts.ValidHeaderFieldName(name) {
		return fmt.Errorf("gateway: explain: %q is not a header field name", name)
	}
	value = strings.Trim(value, " \t")
	if !httpguts.ValidHeaderFieldValue(value) {
		return fmt.Errorf("gateway: explain: the value of %s holds a character no header can carry", name)
	}
	h.Add(name, value)
	return nil
}

// explainOverload describes the overload control of the request of st,
// taking nothing.
func (g *Gateway) explainOverload(o *policy.Overload, st *Flow) *OverloadExplanation {
	s, ok := g.OverloadOf(o)
	if !ok { // no request reached it yet
		s = OverloadStat{Limit: o.Limit, Adaptive: o.Adaptive != nil}
		if a := o.Adaptive; a != nil {
			s.Limit = a.Initial
		}
	}
	tier := tierOf(o, st)
	e := &OverloadExplanation{Limit: s.Limit, Adaptive: s.Adaptive, Inflight: s.Inflight, Queued: s.Queued,
		Latency: Duration(s.Latency), NoLoad: Duration(s.NoLoad), Tier: o.Tiers[tier],
		Ceiling: o.Ceilings.Ceiling(tier, s.Limit), Tenant: strings.Clone(tenantOf(o, st)), MaxWait: Duration(o.MaxWait())}
	e.Admit = s.Queued == 0 && s.Inflight < e.Ceiling
	return e
}
