package config

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// IdentityHeaders name the request headers through which the gateway tells
// the upstream who it identified. An empty name sets no header. Whatever
// the names, the gateway removes every copy of them a client sent, so that
// an upstream can believe them.
type IdentityHeaders struct {
	// KeyName carries the API key's name (never the key), or "?" and a
	// hash prefix for a key the policy does not know.
	KeyName string `yaml:"key_name"`
	// Plan carries the API key's usage plan.
	Plan string `yaml:"plan"`
	// User carries the request's user (a verified token's claim, or a
	// trusted proxy's user header).
	User string `yaml:"user"`
	// ClientIP carries the client's address, as resolved through the
	// trusted proxies.
	ClientIP string `yaml:"client_ip"`
	// Remaining carries the fewest units left among the limits that
	// admitted the request.
	Remaining string `yaml:"remaining"`
}

// Names returns the header names set, in the order of the fields.
func (h IdentityHeaders) Names() []string {
	var out []string
	for _, n := range []string{h.KeyName, h.Plan, h.User, h.ClientIP, h.Remaining} {
		if n != "" {
			out = append(out, n)
		}
	}
	return out
}

// Refusal says how the gateway's 429 answers look: their status (as
// NGINX's limit_req_status), body, content type and extra header fields.
// The RateLimit fields and Retry-After stay whatever it says.
type Refusal struct {
	// Status is 429 (default) or 503.
	Status int `yaml:"status"`
	// Body replaces the JSON body ({"message":"Too Many Requests"}, or
	// Limit Exceeded for a quota); empty keeps it. At most 64 KiB.
	Body string `yaml:"body"`
	// ContentType is the body's type (default application/json).
	ContentType string `yaml:"content_type"`
	// Headers are added to the answer; they cannot replace the fields the
	// gateway sets itself (Content-Type, Content-Length, Retry-After, the
	// RateLimit fields and the binding limit's, framing and connection
	// fields).
	Headers []HeaderField `yaml:"headers"`
}

// HeaderField is one header field of a refusal.
type HeaderField struct {
	Name  string `yaml:"name"`
	Value string `yaml:"value"`
}

// Access lists addresses and networks (CIDRs, or single addresses) that
// are refused before any limit is charged (Deny: 403), and those that are
// exempt from some limits (Allow: health checkers, internal callers).
// A denied address is refused even when an allow entry also covers it.
// The admin API adds entries at run time (shared through Redis).
type Access struct {
	// Deny lists the networks answered 403 before any limit.
	Deny []string `yaml:"deny"`
	// Allow lists networks with the limits they are exempt from.
	Allow []AllowEntry `yaml:"allow"`
	// MaxEntries bounds the networks of the file and of the admin API
	// together (default DefaultAccessMaxEntries).
	MaxEntries int `yaml:"max_entries"`

	// DenyPrefixes is Deny parsed (single addresses as full-length
	// prefixes).
	DenyPrefixes []netip.Prefix `yaml:"-"`
}

// AllowEntry is networks exempt from limits.
type AllowEntry struct {
	// Networks are CIDRs or single addresses.
	Networks []string `yaml:"networks"`
	// Exempt names the limits the networks are exempt from, or is [all]
	// for every limit.
	Exempt []string `yaml:"exempt"`

	// Prefixes is Networks parsed.
	Prefixes []netip.Prefix `yaml:"-"`
}

// ExemptAll, as the one name of an allow entry's exempt list, exempts its
// networks from every limit.
const ExemptAll = "all"

// DefaultAccessMaxEntries bounds the networks of the access lists.
const DefaultAccessMaxEntries = 10000

// Ban is a rule of the penalty box: a key that offends After times within
// Within is banned for Ban, and for Ban × Growth, × Growth² ... up to
// MaxBan for each repeat offence within MaxBan of its last ban's end.
type Ban struct {
	// Name identifies the rule in metrics, the admin API and logs.
	Name string `yaml:"name"`
	// Key is what is banned: client_ip (default), api_key or user.
	Key string `yaml:"key"`
	// After offences within Within ban the key.
	After  int64         `yaml:"after"`
	Within time.Duration `yaml:"within"`
	// Ban is the first ban's length; MaxBan the longest (default Ban).
	Ban    time.Duration `yaml:"ban"`
	MaxBan time.Duration `yaml:"max_ban"`
	// Growth multiplies a repeat offender's ban (default 2).
	Growth int64 `yaml:"growth"`
	// CountOn lists the answer statuses that are offences, the gateway's
	// own (401, 403) or the upstream's (failed logins: [401, 403]); empty
	// (the default), an offence is a refusal by a limit whose key holds
	// what the rule bans (client_ip, api_key, user), whatever status its
	// refusal answers: a refusal by a limit clients share, or by a failure
	// policy while the store does not answer, is none.
	CountOn []int `yaml:"count_on"`
}

// Values of a ban's key.
const (
	BanKeyClientIP = KeyClientIP
	BanKeyAPIKey   = KeyAPIKey
	BanKeyUser     = KeyUser
)

// reservedFields are the fields a refusal's headers cannot set: the
// gateway writes them itself.
var reservedFields = []string{"Content-Type", "Content-Length", "Retry-After", "Ratelimit", "Ratelimit-Policy",
	"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Transfer-Encoding", "Connection",
	"Keep-Alive", "Upgrade", "Trailer", "Te", "Date", "Server"}

// maxRefusalBody bounds a refusal's body.
const maxRefusalBody = 64 << 10

// refusal validates a refusal and fills in its defaults.
func (v *validator) refusal(r *Refusal, path string) {
	if r == nil {
		return
	}
	switch {
	case r.Status == 0:
		r.Status = http.StatusTooManyRequests
	case r.Status != http.StatusTooManyRequests && r.Status != http.StatusServiceUnavailable:
		v.errorf(path+".status", "a refusal's status is 429 or 503, got %d", r.Status)
	}
	if len(r.Body) > maxRefusalBody {
		v.errorf(path+".body", "a refusal's body is at most %d bytes, got %d", maxRefusalBody, len(r.Body))
	}
	if r.ContentType == "" {
		r.ContentType = "application/json"
	} else if !validFieldValue(r.ContentType) || !strings.Contains(r.ContentType, "/") {
		v.errorf(path+".content_type", "%q is not a media type", r.ContentType)
	}
	for i, h := range r.Headers {
		hp := fmt.Sprintf("%s.headers[%d]", path, i)
		switch {
		case !validToken(h.Name):
			v.errorf(hp+".name", "%q is not a valid header name", h.Name)
		case slices.Contains(reservedFields, httpCanonical(h.Name)):
			v.errorf(hp+".name", "%s is set by the gateway itself (content_type sets Content-Type)", httpCanonical(h.Name))
		case v.f.Server.Headers.BindingLimit != "" && httpCanonical(h.Name) == httpCanonical(v.f.Server.Headers.BindingLimit):
			v.errorf(hp+".name", "%s is set by the gateway itself (server.headers.binding_limit)", httpCanonical(h.Name))
		case !validFieldValue(h.Value):
			v.errorf(hp+".value", "a header value may not hold control characters")
		}
	}
}

// identityHeaders validates the names of identity headers.
func (v *validator) identityHeaders(h *IdentityHeaders, path string) {
	if h == nil {
		return
	}
	seen := map[string]bool{}
	for _, f := range []struct {
		field string
		name  *string
	}{{"key_name", &h.KeyName}, {"plan", &h.Plan}, {"user", &h.User}, {"client_ip", &h.ClientIP}, {"remaining", &h.Remaining}} {
		if *f.name == "" {
			continue
		}
		c := httpCanonical(*f.name)
		switch {
		case !validToken(*f.name):
			v.errorf(path+"."+f.field, "%q is not a valid header name", *f.name)
		case slices.Contains(reservedFields, c) || c == "Host" || c == "Authorization" || c == "Cookie" ||
			c == "X-Forwarded-For" || c == "Forwarded" || c == "X-Real-Ip":
			v.errorf(path+"."+f.field, "%s cannot carry an identity: the gateway or the client sets it for another purpose", c)
		case seen[c]:
			v.errorf(path+"."+f.field, "%s is named twice", c)
		case c == httpCanonical(v.f.Server.APIKeyHeader):
			v.errorf(path+"."+f.field, "%s is the API key header", c)
		}
		seen[c] = true
	}
}

// access validates the access lists.
func (v *validator) access(a *Access, limits map[string]bool) {
	if a.MaxEntries == 0 && !v.written("server.access.max_entries") {
		a.MaxEntries = DefaultAccessMaxEntries
	}
	if a.MaxEntries < 1 {
		v.errorf("server.access.max_entries", "must be at least 1, got %d", a.MaxEntries)
	}
	n := 0
	a.DenyPrefixes = nil
	for i, c := range a.Deny {
		if p, ok := v.network(c, fmt.Sprintf("server.access.deny[%d]", i)); ok {
			a.DenyPrefixes = append(a.DenyPrefixes, p)
		}
		n++
	}
	for i := range a.Allow {
		e := &a.Allow[i]
		path := fmt.Sprintf("server.access.allow[%d]", i)
		if len(e.Networks) == 0 {
			v.errorf(path+".networks", "an allow entry needs networks")
		}
		e.Prefixes = nil
		for j, c := range e.Networks {
			if p, ok := v.network(c, fmt.Sprintf("%s.networks[%d]", path, j)); ok {
				e.Prefixes = append(e.Prefixes, p)
			}
			n++
		}
		if err := CheckExempt(e.Exempt, func(name string) bool { return limits[name] }); err != nil {
			var ee *ExemptError
			if errors.As(err, &ee) && ee.Index >= 0 {
				v.errorf(fmt.Sprintf("%s.exempt[%d]", path, ee.Index), "%s", ee.Msg)
			} else {
				v.errorf(path+".exempt", "%v", err)
			}
		}
	}
	if a.MaxEntries > 0 && n > a.MaxEntries {
		v.errorf("server.access", "%d networks, more than max_entries (%d)", n, a.MaxEntries)
	}
}

// ExemptError is the fault CheckExempt finds in an exempt list.
type ExemptError struct {
	// Index is the place of the offending name, or -1 when the list as a
	// whole is at fault.
	Index int
	// Msg says what is wrong.
	Msg string
}

func (e *ExemptError) Error() string {
	if e.Index < 0 {
		return e.Msg
	}
	return fmt.Sprintf("exempt[%d]: %s", e.Index, e.Msg)
}

// CheckExempt checks the exempt list of an allow entry, the policy file's
// or the admin API's: it is [all] alone, or it names limits that exist
// (known reports whether one does), each once, so it is never longer than
// the limits are many. It returns the first fault as an *ExemptError, or
// nil.
func CheckExempt(exempt []string, known func(name string) bool) error {
	if len(exempt) == 0 {
		return &ExemptError{Index: -1, Msg: "an allow entry needs exempt: the names of the limits it is exempt from, or [all]"}
	}
	seen := make(map[string]bool, min(len(exempt), 64))
	for j, name := range exempt {
		switch {
		case name == ExemptAll:
			if len(exempt) > 1 {
				return &ExemptError{Index: j, Msg: "all stands alone: it exempts from every limit"}
			}
		case !known(name):
			return &ExemptError{Index: j, Msg: fmt.Sprintf("unknown limit %s", quoteShort(name))}
		case seen[name]:
			return &ExemptError{Index: j, Msg: fmt.Sprintf("limit %q is named twice", name)}
		}
		seen[name] = true
	}
	return nil
}

// quoteShort quotes s, cut to its first 64 bytes so that a long name
// does not make a long message.
func quoteShort(s string) string {
	const max = 64
	if len(s) <= max {
		return strconv.Quote(s)
	}
	return strconv.Quote(strings.ToValidUTF8(s[:max], "")) + fmt.Sprintf("... (%d bytes)", len(s))
}

// network parses a CIDR or a single address of an access list.
func (v *validator) network(c, path string) (netip.Prefix, bool) {
	p, err := ParseNetwork(c)
	if err != nil {
		v.errorf(path, "%v", err)
		return netip.Prefix{}, false
	}
	return p, true
}

// ParseNetwork parses a CIDR (without host bits) or a single address (a
// full-length prefix). IPv4-mapped IPv6 networks are refused: write them
// as IPv4.
func ParseNetwork(c string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(c); err == nil {
		switch {
		case p.Masked() != p:
			return netip.Prefix{}, fmt.Errorf("%s has host bits set; did you mean %s?", c, p.Masked())
		case p.Addr().Is4In6():
			return netip.Prefix{}, fmt.Errorf("%s is an IPv4-mapped network; write it as IPv4", c)
		}
		return p, nil
	}
	if a, err := netip.ParseAddr(c); err == nil && a.Zone() == "" {
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	return netip.Prefix{}, fmt.Errorf("%q is not a CIDR or an IP address", c)
}

// bans validates the penalty box's rules and fills in their defaults.
func (v *validator) bans() {
	bs := v.f.Server.Bans
	v.names("server.bans", len(bs), func(i int) string { return bs[i].Name })
	for i := range bs {
		b := &bs[i]
		path := fmt.Sprintf("server.bans[%d]", i)
		switch b.Key {
		case "":
			b.Key = BanKeyClientIP
		case BanKeyClientIP, BanKeyAPIKey, BanKeyUser:
		default:
			v.errorf(path+".key", "key must be %s, got %q", wordList(choices["server.bans[].key"]), b.Key)
		}
		if b.After < 1 {
			v.errorf(path+".after", "after must be at least 1, got %d", b.After)
		}
		if b.Within <= 0 {
			v.errorf(path+".within", "within must be a positive duration")
		}
		if b.Ban <= 0 {
			v.errorf(path+".ban", "ban must be a positive duration")
		}
		if b.MaxBan == 0 && !v.written(path+".max_ban") {
			b.MaxBan = b.Ban
		}
		if b.MaxBan < b.Ban {
			v.errorf(path+".max_ban", "max_ban (%s) must be at least ban (%s)", b.MaxBan, b.Ban)
		}
		if b.Growth == 0 && !v.written(path+".growth") {
			b.Growth = 2
		}
		if b.Growth < 1 || b.Growth > 100 {
			v.errorf(path+".growth", "growth must be from 1 to 100, got %d", b.Growth)
		}
		for j, st := range b.CountOn {
			if st < 100 || st > 599 {
				v.errorf(fmt.Sprintf("%s.count_on[%d]", path, j), "%d is not an HTTP status", st)
			}
		}
	}
}

// gatekeeping validates the settings of points where the gateway answers
// before or around the limits: identity headers, refusals, access lists
// and bans.
func (v *validator) gatekeeping() {
	f := v.f
	s := &f.Server
	v.identityHeaders(&s.Upstream.IdentityHeaders, "server.upstream.identity_headers")
	v.refusal(s.Refusal, "server.refusal")
	limits := map[string]bool{}
	for _, l := range f.Limits {
		limits[l.Name] = true
	}
	for _, st := range f.Stages {
		limits["stage."+st.Name] = true
	}
	for _, p := range f.Plans {
		limits[p.Name+".rate"], limits[p.Name+".quota"] = true, true
	}
	if f.Account != nil {
		limits["account"] = true
	}
	limits["unknown-api-key"] = true
	v.access(&s.Access, limits)
	v.bans()
	for i := range f.Routes {
		r := &f.Routes[i]
		path := fmt.Sprintf("routes[%d]", i)
		v.identityHeaders(r.IdentityHeaders, path+".identity_headers")
		v.refusal(r.Refusal, path+".refusal")
	}
	for i := range f.Limits {
		v.refusal(f.Limits[i].Refusal, fmt.Sprintf("limits[%d].refusal", i))
	}
}

// validFieldValue reports whether s can be a header field's value: no
// control characters but tab.
func validFieldValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

func httpCanonical(name string) string { return http.CanonicalHeaderKey(name) }

// Transport returns u without the settings that follow a policy reload
// (identity headers, strip_credentials): what a change of needs a
// restart.
func (u Upstream) Transport() Upstream {
	u.IdentityHeaders, u.StripCredentials = IdentityHeaders{}, false
	return u
}
