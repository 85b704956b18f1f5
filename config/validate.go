package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/accesslog"
	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/identity"
	"github.com/floodgate/floodgate/internal/hostcheck"
	"github.com/floodgate/floodgate/internal/storeurl"
	"github.com/floodgate/floodgate/internal/yamlfile"
	"github.com/floodgate/floodgate/internal/zone"
)

// Key parts a limit can be counted per.
const (
	KeyClientIP = "client_ip"
	KeyAPIKey   = "api_key"
	// KeyPlan is the usage plan of the request's API key: the keys of one
	// plan (an organisation) share the count.
	KeyPlan   = "plan"
	KeyUser   = "user"
	KeyRoute  = "route"
	KeyStage  = "stage"
	KeyGlobal = "global"
	// KeyHeaderPrefix starts a header part: "header:X-Tenant".
	KeyHeaderPrefix = "header:"
)

// Scopes order limits: usage plans first, then method, route, stage and
// global limits.
const (
	ScopeMethod = "method"
	ScopeRoute  = "route"
	ScopeStage  = "stage"
	ScopeGlobal = "global"
)

// HashKey returns the lowercase hex SHA-256 of an API key, as written in a
// Key's sha256 field.
func HashKey(raw string) string {
	sum := sha256.Sum256([]byte(raw))
	return hex.EncodeToString(sum[:])
}

type validator struct {
	f   *File
	dir string
	d   *yamlfile.Decoder // the decoder of f: positions and problems
}

// errorf records a problem at field, unless one is already recorded there
// (a bad duration need not also be reported as a missing one).
func (v *validator) errorf(field, format string, args ...any) {
	v.d.Errorf(field, format, args...)
}

// written reports whether the field at path was in the file.
func (v *validator) written(path string) bool {
	return v.d.Written(path)
}

func (v *validator) validate() {
	f := v.f
	if f.Version != 1 {
		v.errorf("version", "unsupported version %d (want 1)", f.Version)
	}
	v.server()
	routes := v.names("routes", len(f.Routes), func(i int) string { return f.Routes[i].Name })
	stages := v.names("stages", len(f.Stages), func(i int) string { return f.Stages[i].Name })
	plans := v.names("plans", len(f.Plans), func(i int) string { return f.Plans[i].Name })
	v.names("keys", len(f.Keys), func(i int) string { return f.Keys[i].Name })
	v.names("limits", len(f.Limits), func(i int) string { return f.Limits[i].Name })
	for i := range f.Limits {
		switch f.Limits[i].Name {
		case "account":
			v.errorf(fmt.Sprintf("limits[%d].name", i), `the name "account" is reserved for the account limit`)
		case "unknown-api-key":
			v.errorf(fmt.Sprintf("limits[%d].name", i), `the name "unknown-api-key" is reserved for the limit of requests with a missing or unknown API key (server.unknown_key_limit)`)
		}
	}

	// Generated limit names must not meet: plan "stage" and stage "rate"
	// would both make "stage.rate".
	generated := map[string]string{}
	for i := range f.Stages {
		generated["stage."+f.Stages[i].Name] = fmt.Sprintf("stages[%d].name", i)
	}
	for i := range f.Plans {
		for _, suffix := range []string{".rate", ".quota"} {
			if other, dup := generated[f.Plans[i].Name+suffix]; dup {
				v.errorf(fmt.Sprintf("plans[%d].name", i), "plan %q makes the limit name %q, as %s does; rename one",
					f.Plans[i].Name, f.Plans[i].Name+suffix, other)
			}
		}
	}
	for i := range f.Routes {
		v.route(i, stages)
	}
	for i := range f.Stages {
		s := &f.Stages[i]
		s.Compiled = v.params(&s.Params, fmt.Sprintf("stages[%d]", i), "stage."+s.Name, 1)
	}
	for i := range f.Plans {
		v.plan(i, routes)
	}
	v.planTiers()
	hashes := map[string]int{}
	for i := range f.Keys {
		k := &f.Keys[i]
		path := fmt.Sprintf("keys[%d]", i)
		if k.Plan == "" {
			v.errorf(path+".plan", "plan is required")
		} else if !plans[k.Plan] {
			v.errorf(path+".plan", "unknown plan %q", k.Plan)
		}
		h := strings.ToLower(k.SHA256)
		if b, err := hex.DecodeString(h); err != nil || len(b) != sha256.Size {
			v.errorf(path+".sha256", "want the 64 hex digits of the key's SHA-256 (floodgate key new prints it)")
		} else if j, dup := hashes[h]; dup {
			v.errorf(path+".sha256", "same key as keys[%d]", j)
		} else {
			hashes[h] = i
		}
		k.SHA256 = h
	}
	for i := range f.Limits {
		v.limit(i, routes, stages)
	}
	v.queuedReservations()
	if f.Account != nil {
		f.Account.Compiled = v.params(&f.Account.Params, "account", "account", 1)
	}
	v.gatekeeping()
}

// names checks that every item of a section has a valid, unique name and
// returns the set of names.
func (v *validator) names(section string, n int, name func(int) string) map[string]bool {
	seen := make(map[string]int, n)
	for i := 0; i < n; i++ {
		path := fmt.Sprintf("%s[%d].name", section, i)
		nm := name(i)
		switch {
		case nm == "":
			v.errorf(path, "name is required")
			continue
		case !validName(nm):
			v.errorf(path, "name %q may only have letters, digits, '-' and '_' (at most 64)", nm)
		}
		if j, dup := seen[nm]; dup {
			v.errorf(path, "duplicate name %q (also %s[%d])", nm, section, j)
			continue
		}
		seen[nm] = i
	}
	set := make(map[string]bool, len(seen))
	for nm := range seen {
		set[nm] = true
	}
	return set
}

// ValidName reports whether s can name a route, stage, plan, key or
// limit: 1 to 64 letters, digits, '-' and '_'.
func ValidName(s string) bool { return validName(s) }

func validName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// validToken reports whether s is an HTTP token (a header name, a method).
func validToken(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

func (v *validator) server() {
	s := &v.f.Server
	if s.Listen == "" {
		v.errorf("server.listen", "listen address is required")
	}
	if s.AdminListen == "off" {
		s.AdminListen = ""
	}
	if s.OpsListen == "off" {
		s.OpsListen = ""
	}
	for _, l := range []struct{ field, addr string }{
		{"listen", s.Listen}, {"admin_listen", s.AdminListen}, {"ops_listen", s.OpsListen}, {"grpc_listen", s.GRPCListen}, {"api_listen", s.APIListen},
	} {
		if l.addr == "" {
			continue
		}
		if msg := checkListenAddr(l.addr); msg != "" {
			v.errorf("server."+l.field, "%s", msg)
		}
	}
	v.hostNames("server.ops_hosts", s.OpsHosts)
	if s.GRPCListen != "" && len(s.RLSConfig) == 0 {
		v.errorf("server.grpc_listen", "grpc_listen needs rls_config: the descriptor files of the rate-limit service")
	}
	if s.GRPCListen == "" && len(s.RLSConfig) > 0 {
		v.errorf("server.rls_config", "rls_config needs grpc_listen, the address of the rate-limit service")
	}
	v.listenerTLS("server.grpc_tls_", s.GRPCTLSCert, s.GRPCTLSKey, s.GRPCTLSClientCA, s.GRPCTLSClientSAN)
	v.listenerTLS("server.api_tls_", s.APITLSCert, s.APITLSKey, s.APITLSClientCA, s.APITLSClientSAN)
	if s.APIListen == "" && s.APITLSCert != "" {
		v.errorf("server.api_tls_cert", "api_tls_cert needs api_listen, the address of the check API")
	}
	switch s.Store {
	case "memory":
	case "":
		v.errorf("server.store", `store is required: "memory" or a redis:// URL`)
	default:
		// The stores' own checks (package store's registry): a URL
		// accepted here is one the store opens.
		if err := storeurl.Check(s.Store); err != nil {
			v.errorf("server.store", "%v", err)
		}
	}
	if s.StoreTimeout <= 0 {
		v.errorf("server.store_timeout", "store timeout must be positive")
	}
	if s.StoreHardTimeout < s.StoreTimeout && !v.written("server.store_hard_timeout") {
		s.StoreHardTimeout = s.StoreTimeout // the default cap is below the deadline asked for
	} else if s.StoreHardTimeout < s.StoreTimeout {
		v.errorf("server.store_hard_timeout", "store_hard_timeout (%s) must be at least store_timeout (%s)", s.StoreHardTimeout, s.StoreTimeout)
	}
	if s.Instances < 1 {
		v.errorf("server.instances", "instances must be at least 1, got %d", s.Instances)
	}
	if s.IPv6Prefix < 1 || s.IPv6Prefix > 128 {
		v.errorf("server.ipv6_prefix", "ipv6 prefix must be between 1 and 128, got %d", s.IPv6Prefix)
	}
	if !validToken(s.APIKeyHeader) {
		v.errorf("server.api_key_header", "%q is not a valid header name", s.APIKeyHeader)
	}
	if b := s.Headers.BindingLimit; b != "" && !validToken(b) {
		v.errorf("server.headers.binding_limit", "%q is not a valid header name", b)
	} else if b != "" && slices.Contains(reservedFields, httpCanonical(b)) {
		v.errorf("server.headers.binding_limit", "%s is set by the gateway itself", httpCanonical(b))
	}
	switch strings.ToLower(s.ForwardedHeader) {
	case "", "x-forwarded-for", "forwarded":
	default:
		v.errorf("server.forwarded_header", "forwarded header must be x-forwarded-for or forwarded, got %q", s.ForwardedHeader)
	}
	s.TrustedProxyPrefixes = nil
	for i, c := range s.TrustedProxies {
		path := fmt.Sprintf("server.trusted_proxies[%d]", i)
		if p, err := netip.ParsePrefix(c); err == nil {
			if p.Masked() != p {
				v.errorf(path, "%s has host bits set; did you mean %s?", c, p.Masked())
				continue
			}
			s.TrustedProxyPrefixes = append(s.TrustedProxyPrefixes, p)
		} else if a, err := netip.ParseAddr(c); err == nil && a.Zone() == "" {
			s.TrustedProxyPrefixes = append(s.TrustedProxyPrefixes, netip.PrefixFrom(a, a.BitLen()))
		} else {
			v.errorf(path, "%q is not a CIDR or an IP address", c)
		}
	}
	if h := s.User.Header; h != "" && !validToken(h) {
		v.errorf("server.user.header", "%q is not a valid header name", h)
	}
	if h := s.User.Header; h != "" && len(s.TrustedProxies) == 0 {
		v.errorf("server.user.header", "a user header is only believed from trusted proxies; set server.trusted_proxies")
	}
	if j := s.User.JWT; j != nil {
		v.jwt(j)
	}
	for _, u := range []struct {
		name string
		d    time.Duration
	}{{"timeout", s.Upstream.Timeout}, {"dial_timeout", s.Upstream.DialTimeout}, {"idle_timeout", s.Upstream.IdleTimeout}, {"drain_timeout", s.Upstream.DrainTimeout}} {
		if u.d <= 0 {
			v.errorf("server.upstream."+u.name, "must be a positive duration")
		}
	}
	v.hardening()
	v.admin(&s.Admin)
	v.gatewayTLS(&s.TLS)
	v.upstreamTLS("server.upstream.tls", &s.Upstream.TLS)
}

// hardening validates the settings that keep the gateway bounded and its
// limits hard to walk around.
func (v *validator) hardening() {
	s := &v.f.Server
	oneOf := func(field, got string) {
		if want := choices["server."+field]; !slices.Contains(want, got) {
			v.errorf("server."+field, "%s must be %s, got %q", field, wordList(want), got)
		}
	}
	oneOf("path_matching", s.PathMatching)
	oneOf("format_suffix", s.FormatSuffix)
	oneOf("escaped_slash", s.EscapedSlash)
	oneOf("method_override", s.MethodOverride)
	oneOf("api_auth", s.APIAuth)
	oneOf("redis_eviction", s.RedisEviction)
	oneOf("engine", s.Engine)
	oneOf("memory.soft_limit", s.Memory.SoftLimit)
	for _, t := range []struct {
		name string
		d    time.Duration
	}{{"read_header", s.Timeouts.ReadHeader}, {"read", s.Timeouts.Read}, {"write", s.Timeouts.Write}, {"idle", s.Timeouts.Idle}, {"send", s.Timeouts.Send}} {
		if t.d < 0 || (t.d == 0 && t.name != "write" && v.written("server.timeouts."+t.name)) {
			v.errorf("server.timeouts."+t.name, "must be a positive duration")
		}
	}
	if s.Timeouts.Read > 0 && s.Timeouts.Read < s.Timeouts.ReadHeader {
		v.errorf("server.timeouts.read", "read (%s) bounds the headers too, so it cannot be shorter than read_header (%s)", s.Timeouts.Read, s.Timeouts.ReadHeader)
	}
	if s.MaxConnections < 0 {
		v.errorf("server.max_connections", "must not be negative, got %d", s.MaxConnections)
	}
	if s.Upstream.MaxConnsPerHost < 0 {
		v.errorf("server.upstream.max_conns_per_host", "must not be negative, got %d", s.Upstream.MaxConnsPerHost)
	}
	if s.Upstream.DrainBytes < 1 {
		v.errorf("server.upstream.drain_bytes", "must be at least 1, got %d", s.Upstream.DrainBytes)
	}
	if s.Memory.MaxBytes < 1<<20 {
		v.errorf("server.memory.max_bytes", "must be at least 1 MiB, got %d", s.Memory.MaxBytes)
	}
	if _, err := accesslog.ParseFormat(s.AccessLog.Format); err != nil {
		v.errorf("server.access_log.format", "format must be %s, got %q", wordList(choices["server.access_log.format"]), s.AccessLog.Format)
	}
	if s.AccessLog.MaxSize < 1<<16 {
		v.errorf("server.access_log.max_size", "must be at least 65536 bytes, got %d", s.AccessLog.MaxSize)
	}
	if s.AccessLog.MaxFiles < 1 {
		v.errorf("server.access_log.max_files", "must be at least 1, got %d", s.AccessLog.MaxFiles)
	}
	if s.Memory.MaxKeyBytes < 64 {
		v.errorf("server.memory.max_key_bytes", "must be at least 64 (a SHA-256 in hex), got %d", s.Memory.MaxKeyBytes)
	}
	if p := s.UnknownKeyLimit; p != nil {
		p.Compiled = v.params(p, "server.unknown_key_limit", "unknown-api-key", 1)
	}
	names := map[string]bool{}
	for i, t := range s.APITokens {
		path := fmt.Sprintf("server.api_tokens[%d]", i)
		if t.Name == "" {
			v.errorf(path+".name", "a token needs a name")
		} else if names[t.Name] {
			v.errorf(path+".name", "two tokens named %q", t.Name)
		}
		names[t.Name] = true
		if b, err := hex.DecodeString(t.SHA256); err != nil || len(b) != sha256.Size {
			v.errorf(path+".sha256", "want the token's SHA-256 as 64 lowercase hex digits")
		}
	}
	if s.APIListen != "" && s.APIAuth == APIAuthToken && len(s.APITokens) == 0 {
		v.errorf("server.api_listen", "the check API needs api_tokens (the SHA-256 of each caller's bearer token), or api_auth: none to leave it open")
	}
}

// checkListenAddr says what is wrong with an address to listen on, or
// returns "". The port is a number from 0 to 65535 (0 picks a free one);
// the host is empty (every interface), an IP address or a host name.
func checkListenAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return fmt.Sprintf("%q is not a host:port address (such as :8080 or 127.0.0.1:9090)", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 || strings.TrimLeft(port, "0123456789") != "" {
		return fmt.Sprintf("%q: the port must be a number from 0 to 65535, got %q", addr, port)
	}
	if host == "" {
		return ""
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return ""
	}
	if !validHostName(host) {
		return fmt.Sprintf("%q: %q is neither an IP address nor a host name", addr, host)
	}
	return ""
}

// hostNames checks the names of a listener's hosts setting at path and
// writes them in lower case without their final dot.
func (v *validator) hostNames(path string, names []string) {
	for i, h := range names {
		if !validHostName(h) {
			v.errorf(fmt.Sprintf("%s[%d]", path, i), "%q is not a host name (no port, no scheme; IP addresses and localhost are always taken)", h)
		}
		names[i] = strings.ToLower(strings.TrimSuffix(h, "."))
	}
}

// validHostName reports whether s is a DNS host name (hostcheck.ValidName).
func validHostName(s string) bool {
	return hostcheck.ValidName(s)
}

func (v *validator) jwt(j *JWT) {
	const p = "server.user.jwt"
	if j.Header == "" {
		j.Header = identity.DefaultJWTHeader
	}
	if j.Claim == "" {
		j.Claim = identity.DefaultJWTClaim
	}
	if j.Leeway == 0 {
		j.Leeway = identity.DefaultLeeway
	}
	ok := true
	switch algs := choices[p+".alg"]; {
	case slices.Contains(algs, j.Alg):
	case j.Alg == "":
		v.errorf(p+".alg", "alg is required: %s", wordList(algs))
		ok = false
	default:
		v.errorf(p+".alg", "alg must be %s, got %q", wordList(algs), j.Alg)
		ok = false
	}
	switch {
	case j.KeyFile == "" && j.JWKSFile == "":
		v.errorf(p, "jwt needs key_file or jwks_file")
		return
	case j.KeyFile != "" && j.JWKSFile != "":
		v.errorf(p+".jwks_file", "give key_file or jwks_file, not both")
		return
	}
	field := p + ".key_file"
	if j.KeyFile != "" {
		j.KeyPath = v.rel(j.KeyFile)
	} else {
		j.JWKSPath = v.rel(j.JWKSFile)
		field = p + ".jwks_file"
	}
	if !ok {
		if _, err := os.Stat(j.KeyPath + j.JWKSPath); err != nil {
			v.errorf(field, "%v", err)
		}
		return
	}
	if _, err := identity.NewVerifier(j.Options()); err != nil {
		v.errorf(field, "%s", strings.TrimPrefix(err.Error(), "identity: "))
	}
}

// Options returns the identity options of the JWT settings.
func (j *JWT) Options() identity.JWTOptions {
	return identity.JWTOptions{Header: j.Header, Claim: j.Claim, Alg: j.Alg, KeyFile: j.KeyPath,
		JWKSFile: j.JWKSPath, Issuer: j.Issuer, Audience: j.Audience, Leeway: j.Leeway}
}

// IdentityOptions returns the options of an identity.Resolver for the
// server settings.
func (s *Server) IdentityOptions() identity.Options {
	o := identity.Options{TrustedProxies: s.TrustedProxyPrefixes, IPv6Prefix: s.IPv6Prefix,
		UserHeader: s.User.Header, ForwardedHeader: s.ForwardedHeader}
	if s.User.JWT != nil {
		j := s.User.JWT.Options()
		o.JWT = &j
	}
	return o
}

func (v *validator) rel(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(v.dir, p)
}

func (v *validator) route(i int, stages map[string]bool) {
	r := &v.f.Routes[i]
	path := fmt.Sprintf("routes[%d]", i)
	v.match(&r.Match, path+".match", nil, nil)
	if len(r.Match.Stages) > 0 {
		v.errorf(path+".match.stages", "a route's match cannot name stages; set the route's stage")
	}
	if len(r.Match.Routes) > 0 {
		v.errorf(path+".match.routes", "a route's match cannot name routes")
	}
	if r.Stage != "" && !stages[r.Stage] {
		v.errorf(path+".stage", "unknown stage %q", r.Stage)
	}
	switch want := choices["routes[].on_invalid_token"]; {
	case r.OnInvalidToken == "":
		r.OnInvalidToken = InvalidTokenReject
	case !slices.Contains(want, r.OnInvalidToken):
		v.errorf(path+".on_invalid_token", "on_invalid_token must be %s, got %q", wordList(want), r.OnInvalidToken)
	}
	switch want := choices["routes[].grpc_stream"]; {
	case r.GRPCStream == "":
		r.GRPCStream = GRPCStreamPerStream
	case !slices.Contains(want, r.GRPCStream):
		v.errorf(path+".grpc_stream", "grpc_stream must be %s, got %q", wordList(want), r.GRPCStream)
	}
	if r.Overload != nil {
		v.overload(r.Overload, path+".overload")
	}
	if v.pool(r, path) {
		return
	}
	switch r.Upstream {
	case "":
		v.errorf(path+".upstream", "a route needs an upstream: an http:// or https:// URL, or none if the gateway is not to forward it")
	case NoUpstream:
	default:
		if u, why := upstreamURL(r.Upstream, "upstream"); why != "" {
			v.errorf(path+".upstream", "%s", why)
		} else {
			r.UpstreamURL = u
		}
	}
}

// match validates a Match; routes and stages are the known names (nil when
// the match may not name them).
func (v *validator) match(m *Match, path string, routes, stages map[string]bool) {
	for i, meth := range m.Methods {
		if !validToken(meth) || strings.ToUpper(meth) != meth {
			v.errorf(fmt.Sprintf("%s.methods[%d]", path, i), "%q is not an upper-case HTTP method", meth)
		}
	}
	for i, p := range m.Paths {
		if err := CheckPathPattern(p); err != nil {
			v.errorf(fmt.Sprintf("%s.paths[%d]", path, i), "%v", err)
		} else {
			m.Paths[i] = TrimPathPattern(p)
		}
	}
	for i, h := range m.Hosts {
		// A request's host is matched without a final dot (the absolute
		// form of a name, "api.example.com."), and so is a pattern.
		hh := strings.TrimPrefix(strings.TrimSuffix(h, "."), "*.")
		if hh == "" || strings.HasSuffix(hh, ".") || strings.ContainsAny(hh, "*/: ") || strings.ToLower(h) != h {
			v.errorf(fmt.Sprintf("%s.hosts[%d]", path, i), "%q is not a lower-case host name or *.domain", h)
		} else {
			m.Hosts[i] = strings.TrimSuffix(h, ".")
		}
	}
	if stages != nil {
		for i, s := range m.Stages {
			if !stages[s] {
				v.errorf(fmt.Sprintf("%s.stages[%d]", path, i), "unknown stage %q", s)
			}
		}
	}
	if routes != nil {
		for i, r := range m.Routes {
			if !routes[r] {
				v.errorf(fmt.Sprintf("%s.routes[%d]", path, i), "unknown route %q", r)
			}
		}
	}
}

// TrimPathPattern returns a path pattern (CheckPathPattern) as it is
// matched: without a trailing slash, but for "/". A request's path is
// matched with one trailing slash removed, so "/accounts/login/" is the
// pattern "/accounts/login", and meets the requests it names.
func TrimPathPattern(p string) string {
	if len(p) > 1 && p[len(p)-1] == '/' {
		return p[:len(p)-1]
	}
	return p
}

// CheckPathPattern reports what is wrong with a path pattern, if anything:
// besides its syntax, a segment that no path is matched with, as paths are
// matched decoded, with their dot segments resolved and their path
// parameters (";...") removed, so that a limit cannot load and then apply
// to no request.
func CheckPathPattern(p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("path pattern %q must start with /", p)
	}
	segs := strings.Split(p[1:], "/")
	for i, s := range segs {
		switch {
		case s == "**":
			if i != len(segs)-1 {
				return fmt.Errorf("path pattern %q: ** may only be the last segment", p)
			}
		case s == "*":
		case strings.HasPrefix(s, "{") || strings.HasSuffix(s, "}"):
			if len(s) < 3 || !strings.HasPrefix(s, "{") || !strings.HasSuffix(s, "}") || strings.ContainsAny(s[1:len(s)-1], "{}*") {
				return fmt.Errorf("path pattern %q: bad parameter segment %q (want {name})", p, s)
			}
		case strings.Contains(s, "*"):
			return fmt.Errorf("path pattern %q: * must be a whole segment", p)
		case s == "" && i != len(segs)-1:
			return fmt.Errorf("path pattern %q has an empty segment", p)
		case s == "." || s == "..":
			return fmt.Errorf("path pattern %q: a %q segment matches no path (a path is matched with its dot segments resolved)", p, s)
		case strings.IndexByte(s, ';') >= 0:
			return fmt.Errorf("path pattern %q: %q matches no path (a path is matched without its path parameters, \";...\")", p, s)
		}
		if d := decodeSegment(s); d != s {
			return fmt.Errorf("path pattern %q: %q matches no path (a path is matched decoded); write %q", p, s, d)
		}
	}
	return nil
}

// decodeSegment returns a pattern's segment as the paths it could match
// spell it: its escapes decoded but for an escaped slash, which a path
// read with the slash inside its segment holds as "%2F" (the policy's
// second reading of such a path); a segment whose escapes do not decode is
// returned as it is (a path may hold "%" decoded).
func decodeSegment(s string) string {
	if strings.IndexByte(s, '%') < 0 {
		return s
	}
	parts := strings.Split(strings.ReplaceAll(s, "%2f", "%2F"), "%2F")
	for i, part := range parts {
		d, err := url.PathUnescape(part)
		if err != nil {
			return s
		}
		parts[i] = d
	}
	return strings.Join(parts, "%2F")
}

func (v *validator) plan(i int, routes map[string]bool) {
	p := &v.f.Plans[i]
	path := fmt.Sprintf("plans[%d]", i)
	if fp, err := floodgate.ParseFailurePolicy(p.OnFailure); err != nil {
		v.errorf(path+".on_failure", "on_failure must be allow, deny or local, got %q", p.OnFailure)
	} else {
		p.OnFailure = fp.String()
	}
	for j, r := range p.Routes {
		if !routes[r] {
			v.errorf(fmt.Sprintf("%s.routes[%d]", path, j), "unknown route %q", r)
		}
	}
	if p.Rate == 0 && p.Quota == nil {
		v.errorf(path, "a plan needs a rate, a quota or both")
	}
	if p.Consistency != "" && p.Rate == 0 {
		v.errorf(path+".consistency", "consistency applies to a plan's rate, and the plan has none")
	}
	if p.Rate != 0 || v.written(path+".burst") || v.written(path+".per") {
		tp := Params{Algorithm: "token_bucket", Rate: p.Rate, Per: p.Per, Burst: p.Burst, Consistency: p.Consistency}
		p.Throttle = v.paramsAt(&tp, path, p.Name+".rate", 1, true)
		p.Per, p.Burst, p.Consistency = tp.Per, tp.Burst, tp.Consistency
	}
	if a := p.Alarms; a != nil {
		v.alarms(a, path+".alarms", p.Quota != nil)
	}
	if q := p.Quota; q != nil {
		qp := Params{Algorithm: "quota", Max: q.Limit, Period: q.Period, TimeZone: q.TimeZone,
			AnchorDay: q.AnchorDay, Offset: q.Offset, Start: q.Start}
		p.QuotaLimit = v.paramsAt(&qp, path+".quota", p.Name+".quota", 1, true)
		q.TimeZone = qp.TimeZone
	}
}

func (v *validator) alarms(a *Alarms, path string, quota bool) {
	if !quota {
		v.errorf(path, "alarms need a quota")
	}
	if len(a.Thresholds) == 0 {
		a.Thresholds = []int{80, 100}
	}
	for j, t := range a.Thresholds {
		if t < 1 || t > 100 {
			v.errorf(fmt.Sprintf("%s.thresholds[%d]", path, j), "a threshold is a percentage from 1 to 100, got %d", t)
		}
	}
	if a.Webhook != "" {
		if u, err := url.Parse(a.Webhook); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			// Not the URL itself: its path or query may hold the
			// receiver's token.
			got := "no URL with a host"
			if err == nil && u.Scheme != "" && u.Host != "" {
				got = "a " + u.Scheme + ":// URL"
			}
			v.errorf(path+".webhook", "want an http:// or https:// URL, got %s", got)
		}
		if a.SecretFile == "" {
			v.errorf(path+".secret_file", "a webhook needs secret_file, the secret that signs its body")
		}
	}
	if a.SecretFile != "" {
		a.SecretPath = v.rel(a.SecretFile)
	}
}

// admin validates the admin settings.
func (v *validator) admin(a *Admin) {
	seen := map[string]int{}
	for i := range a.Tokens {
		t := &a.Tokens[i]
		path := fmt.Sprintf("server.admin.tokens[%d]", i)
		if t.Name == "" {
			v.errorf(path+".name", "a token needs a name (it names its holder in the audit log)")
		}
		h := strings.ToLower(t.SHA256)
		if b, err := hex.DecodeString(h); err != nil || len(b) != sha256.Size {
			v.errorf(path+".sha256", "want the 64 hex digits of the token's SHA-256")
		} else if j, dup := seen[h]; dup {
			v.errorf(path+".sha256", "same token as server.admin.tokens[%d]", j)
		}
		seen[h] = i
		t.SHA256 = h
	}
	v.listenerTLS("server.admin.tls_", a.TLSCert, a.TLSKey, a.TLSClientCA, a.TLSClientSAN)
	v.hostNames("server.admin.hosts", a.Hosts)
	if a.MaxKeys < 1 {
		v.errorf("server.admin.max_keys", "must be at least 1, got %d", a.MaxKeys)
	}
}

func (v *validator) limit(i int, routes, stages map[string]bool) {
	l := &v.f.Limits[i]
	path := fmt.Sprintf("limits[%d]", i)
	if l.Cost == 0 && !v.written(path+".cost") {
		l.Cost = 1
	}
	if l.Cost < 1 {
		v.errorf(path+".cost", "cost must be at least 1, got %d", l.Cost)
	}
	l.Compiled = v.params(&l.Params, path, l.Name, max(l.Cost, 1))
	v.match(&l.Match, path+".match", routes, stages)
	if len(l.Key.Parts) == 0 {
		l.Key.Parts = []string{KeyClientIP}
	}
	seen := map[string]bool{}
	keyParts := choices["limits[].key"]
	for j, part := range l.Key.Parts {
		kp := path + ".key"
		if v.written(fmt.Sprintf("%s[%d]", kp, j)) {
			kp = fmt.Sprintf("%s[%d]", kp, j)
		}
		if h, ok := strings.CutPrefix(part, KeyHeaderPrefix); !(ok && validToken(h)) && !slices.Contains(keyParts, part) {
			v.errorf(kp, "unknown key %q (want %s)", part, wordList(append(slices.Clip(keyParts), KeyHeaderPrefix+"NAME")))
		}
		if seen[strings.ToLower(part)] {
			v.errorf(kp, "key part %q given twice", part)
		}
		seen[strings.ToLower(part)] = true
	}
	if seen[KeyGlobal] && len(l.Key.Parts) > 1 {
		v.errorf(path+".key", "global cannot be combined with other key parts")
	}
	for j, st := range l.CountOn {
		if st < 100 || st > 599 {
			v.errorf(fmt.Sprintf("%s.count_on[%d]", path, j), "%d is not an HTTP status", st)
		}
	}
	v.costs(l, path)
	switch scopes := choices["limits[].scope"]; {
	case l.Scope == "":
		l.Scope = ScopeRoute
	case !slices.Contains(scopes, l.Scope):
		v.errorf(path+".scope", "scope must be %s, got %q", wordList(scopes), l.Scope)
	}
}

// costs validates where a limit's cost comes from when the request or the
// response tells it, and fills in the defaults.
func (v *validator) costs(l *Limit, path string) {
	if e := l.Estimate; e != nil {
		ep := path + ".estimate"
		v.costSource(ep, e.Header, e.Body)
		if e.Default == 0 && !v.written(ep+".default") {
			e.Default = max(l.Cost, 1)
		}
		if e.Default < 1 {
			v.errorf(ep+".default", "default must be at least 1, got %d", e.Default)
		}
	}
	if a := l.Actual; a != nil {
		v.costSource(path+".actual", a.Header, a.Body)
	}
	reserves := l.Actual != nil || len(l.CountOn) > 0
	switch {
	case v.written(path+".reserve_ttl") && !reserves:
		v.errorf(path+".reserve_ttl", "reserve_ttl applies only to a limit with actual or count_on")
	case !reserves:
	case l.ReserveTTL == 0 && !v.written(path+".reserve_ttl"):
		l.ReserveTTL = floodgate.DefaultReservationTTL
	case l.ReserveTTL <= 0 || l.ReserveTTL > floodgate.MaxReservationTTL:
		v.errorf(path+".reserve_ttl", "reserve_ttl must be above 0 and at most %s, got %s", floodgate.MaxReservationTTL, l.ReserveTTL)
	}
}

// costSource validates an estimate's or an actual cost's source: exactly
// one of a header name and a dotted JSON path.
func (v *validator) costSource(path, header, body string) {
	switch {
	case header != "" && body != "":
		v.errorf(path, "give either header or body, not both")
	case header == "" && body == "":
		v.errorf(path, "give a header or a body field to read the cost from")
	case header != "" && !validToken(header):
		v.errorf(path+".header", "%q is not a header name", header)
	case body != "":
		for _, part := range strings.Split(body, ".") {
			if part == "" {
				v.errorf(path+".body", "%q is not a dotted JSON path (max_tokens, usage.total_tokens)", body)
				break
			}
		}
	}
}

// params validates a limit's parameters at path and returns the compiled
// limit; cost is the cost one request takes.
func (v *validator) params(p *Params, path, name string, cost int64) floodgate.Limit {
	return v.paramsAt(p, path, name, cost, false)
}

// consistency checks a limit's consistency setting and writes in its
// canonical name (exact when it was left out).
func (v *validator) consistency(c *string, a floodgate.Algorithm, shadow bool, field string) {
	cons, err := floodgate.ParseConsistency(*c)
	if err == nil {
		*c = cons.String()
	}
	switch {
	case err != nil:
		v.errorf(field, "consistency must be exact or leased, got %q", *c)
	case cons == floodgate.Leased && !a.Traits().Leasable:
		v.errorf(field, "%s cannot be leased: %s can", a, floodgate.AlgorithmList(func(t *floodgate.Traits) bool { return t.Leasable }))
	case cons == floodgate.Leased && shadow:
		v.errorf(field, "a shadow limit cannot be leased")
	}
}

// paramsAt compiles the parameters at path into a limit. It picks the
// algorithm, fills in the defaults the file left out and converts the
// written values; the rules the values must follow are the limit's own
// (floodgate.Limit.Problems), whose problems it reports at the fields of
// the parameters. Synthetic parameters (a plan's) hold only those that
// apply.
func (v *validator) paramsAt(p *Params, path, name string, cost int64, synthetic bool) floodgate.Limit {
	l := floodgate.Limit{Name: name}
	field := func(f floodgate.Param) string { return path + "." + f.String() }
	// The algorithm.
	switch {
	case p.Algorithm != "":
		a, err := floodgate.ParseAlgorithm(p.Algorithm)
		if err != nil {
			v.errorf(path+".algorithm", "unknown algorithm %q (want one of %s)", p.Algorithm, algorithmList())
			return floodgate.Limit{}
		}
		l.Algorithm = a
	case p.Rate != 0 || v.written(field(floodgate.ParamRate)):
		l.Algorithm = floodgate.TokenBucket
	case p.Period != "" || v.written(field(floodgate.ParamPeriod)):
		l.Algorithm = floodgate.Quota
	case p.Window != 0 || v.written(field(floodgate.ParamWindow)):
		l.Algorithm = floodgate.SlidingWindow
	default:
		v.errorf(path, "algorithm is required (or give rate, window or period)")
		return floodgate.Limit{}
	}
	params := l.Algorithm.Traits().Params
	if !synthetic {
		for f := range floodgate.AllParams.Each() {
			if v.written(field(f)) && !params.Has(f) {
				v.errorf(field(f), "%s does not apply to %s", f, l.Algorithm)
			}
		}
	}
	if fp, err := floodgate.ParseFailurePolicy(p.OnFailure); err != nil {
		v.errorf(path+".on_failure", "on_failure must be allow, deny or local, got %q", p.OnFailure)
	} else {
		p.OnFailure = fp.String()
	}
	v.consistency(&p.Consistency, l.Algorithm, p.Shadow, path+".consistency")

	// bad holds the parameters whose problem is told already: a value that
	// did not decode or convert. from maps a parameter the file left out to
	// the one its default came from (a burst is the rate).
	var bad floodgate.Param
	for f := range params.Each() {
		if v.d.Bad(field(f)) {
			bad |= f
		}
	}
	from := map[floodgate.Param]floodgate.Param{}
	if p.Per == 0 && params.Has(floodgate.ParamPer) && !v.written(field(floodgate.ParamPer)) {
		p.Per = time.Second
	}
	if p.Burst == 0 && params.Has(floodgate.ParamBurst) && !params.Has(floodgate.ParamDelay) &&
		!v.written(field(floodgate.ParamBurst)) {
		p.Burst = p.Rate
		from[floodgate.ParamBurst] = floodgate.ParamRate
	}
	convert := func(f floodgate.Param, format string, args ...any) {
		v.errorf(field(f), format, args...)
		bad |= f
	}
	l.Rate, l.Per, l.Burst, l.Max, l.Window, l.LeaseTTL = p.Rate, p.Per, p.Burst, p.Max, p.Window, p.LeaseTTL
	l.AnchorDay, l.Offset = p.AnchorDay, p.Offset
	if p.Delay.Set {
		l.Delay = p.Delay.Value
	}
	if p.Period != "" && params.Has(floodgate.ParamPeriod) {
		if per, err := floodgate.ParsePeriod(p.Period); err != nil {
			convert(floodgate.ParamPeriod, "period must be DAY, WEEK or MONTH, got %q", p.Period)
		} else {
			l.Period = per
		}
	}
	if params.Has(floodgate.ParamTimeZone) {
		l.Location = time.UTC
		if p.TimeZone == "" {
			p.TimeZone = l.Location.String()
		} else if loc, err := loadZone(p.TimeZone); err != nil {
			convert(floodgate.ParamTimeZone, "unknown time zone %q (want an IANA name such as Asia/Kolkata)", p.TimeZone)
		} else {
			l.Location = loc
		}
	}
	if p.Start != "" && params.Has(floodgate.ParamStart) {
		if st, err := parseStart(p.Start, l.Location); err != nil {
			convert(floodgate.ParamStart, "start must be a date (2026-01-15) or an RFC 3339 time, got %q", p.Start)
		} else {
			l.Start = st
		}
	}

	// A problem that reads a parameter with another problem follows from
	// that one, which is the one told.
	problems := l.Problems()
	wrong := bad
	for _, e := range problems {
		wrong |= e.Param
	}
	for _, e := range problems {
		switch {
		case (e.Param|e.With)&bad != 0, (e.With|from[e.Param])&wrong != 0:
		case e.Param == 0:
			v.errorf(path, "%s", e.Msg)
		default:
			v.errorf(field(e.Param), "%s", e.Msg)
		}
	}
	if len(problems) > 0 || bad != 0 {
		return floodgate.Limit{}
	}
	var pe *floodgate.ParamError
	if err := l.ValidateCost(cost); errors.As(err, &pe) {
		v.errorf(field(pe.Param), "%s", pe.Msg)
		return floodgate.Limit{}
	}
	// A limit the file's store cannot decide exactly (a count past what
	// the Redis store keeps).
	if err := storeurl.CheckLimit(v.f.Server.Store, &l); errors.As(err, &pe) {
		v.errorf(field(pe.Param), "%s", pe.Msg)
		return floodgate.Limit{}
	}
	return l
}

// loadZone loads an IANA zone; "Local" and paths are refused so that a
// file means the same on every machine (zone.Load).
func loadZone(name string) (*time.Location, error) {
	return zone.Load(name)
}

// parseStart reads a quota's start: a date is the first instant of that
// date in the quota's zone (loc), which is not 00:00 where the clocks skip
// it that day; an RFC 3339 time is that instant.
func parseStart(s string, loc *time.Location) (time.Time, error) {
	if d, err := time.Parse("2006-01-02", s); err == nil {
		return algo.DayStart(d.Year(), d.Month(), d.Day(), loc), nil
	}
	return time.Parse(time.RFC3339, s)
}

func algorithmList() string {
	var names []string
	for _, a := range floodgate.Algorithms() {
		names = append(names, a.String())
	}
	return strings.Join(names, ", ")
}

// listenerTLS checks a listener's TLS settings, named prefix+"cert",
// "key", "client_ca" and "client_san": a certificate and its key go
// together, a client CA needs them, and a client SAN a client CA.
func (v *validator) listenerTLS(prefix, cert, key, clientCA, clientSAN string) {
	name := prefix[strings.LastIndex(prefix, ".")+1:]
	switch {
	case (cert == "") != (key == ""):
		v.errorf(prefix+"cert", "%scert and %skey go together", name, name)
	case clientCA != "" && cert == "":
		v.errorf(prefix+"client_ca", "%sclient_ca asks for client certificates over TLS: it needs %scert and %skey", name, name, name)
	case clientSAN != "" && clientCA == "":
		v.errorf(prefix+"client_san", "%sclient_san needs %sclient_ca, the CA that signs the client certificates", name, name)
	}
}
