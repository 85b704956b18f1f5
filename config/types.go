package config

import (
	"net/netip"
	"net/url"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/storeurl"
	"github.com/floodgate/floodgate/internal/yamlfile"
)

// File is a whole, validated configuration file. Fields tagged yaml:"-" are
// filled by validation from the written ones (parsed URLs, CIDRs, compiled
// limits) so that consumers need not parse anything again.
type File struct {
	// Path is the name the file was loaded from (or given to Parse).
	Path string `yaml:"-"`
	// Version is the format version; 1 (the default) is the only one.
	Version int `yaml:"version"`
	// Server holds the settings of the gateway and the decision service.
	Server Server `yaml:"server"`
	// Routes are matched in file order; the first match is the request's
	// route (its upstream, its stage, whether it needs an API key).
	Routes []Route `yaml:"routes"`
	// Stages carry the default limit of every route on the stage.
	Stages []Stage `yaml:"stages"`
	// Plans are the usage plans API keys attach to.
	Plans []Plan `yaml:"plans"`
	// Keys are the API keys, stored only as SHA-256 hashes.
	Keys []Key `yaml:"keys"`
	// Limits are the named limits, each with its match and its key.
	Limits []Limit `yaml:"limits"`
	// Account is the account-wide (global) limit checked last, if set.
	Account *Account `yaml:"account"`

	pos yamlfile.Positions
}

// Position returns the position of the value at a field path such as
// "limits[2].burst", or of its nearest written parent.
func (f *File) Position(field string) Pos {
	return f.pos.Of(field)
}

// Server holds the settings of the processes that serve traffic. Zero
// values written in the file are replaced by the documented defaults.
type Server struct {
	// Listen is the gateway's address (default ":8080").
	Listen string `yaml:"listen"`
	// AdminListen serves the admin API, the dashboard, /v1/explain, and
	// /healthz, /readyz and /metrics as OpsListen does (default
	// "127.0.0.1:9090"; "off" disables it). serve refuses to start with
	// it on an address other than loopback while Admin.Tokens lists none.
	AdminListen string `yaml:"admin_listen"`
	// OpsListen serves /healthz, /readyz and /metrics only, no data
	// about keys: the listener for probes and scrapes (default
	// "127.0.0.1:9102"; "off" disables it).
	OpsListen string `yaml:"ops_listen"`
	// OpsHosts are the names, besides IP addresses and localhost, by which
	// the ops listener may be reached (the Host of its requests, without
	// the port), such as a service's name that scrapes use. A request
	// naming another host is answered 421, so that a page whose name was
	// made to point at the listener (DNS rebinding) cannot read /metrics.
	// Probes and scrapes of the pod's address need none.
	OpsHosts []string `yaml:"ops_hosts"`
	// GRPCListen, when set, serves Envoy's rate-limit service (RLS v3).
	GRPCListen string `yaml:"grpc_listen"`
	// APIListen, when set, serves the HTTP decision API (/v1/check).
	APIListen string `yaml:"api_listen"`
	// RLSConfig lists the descriptor files or directories, in the
	// envoyproxy/ratelimit format, of the rate-limit service on
	// GRPCListen; relative paths are relative to the policy file.
	RLSConfig []string `yaml:"rls_config"`
	// GRPCTLSCert and GRPCTLSKey, when both set, serve the rate-limit
	// service over TLS with this certificate and key (PEM files, read
	// again when they change).
	GRPCTLSCert string `yaml:"grpc_tls_cert"`
	GRPCTLSKey  string `yaml:"grpc_tls_key"`
	// GRPCTLSClientCA, with TLS, requires client certificates signed by
	// this CA (PEM); GRPCTLSClientSAN, a DNS name among theirs.
	GRPCTLSClientCA  string `yaml:"grpc_tls_client_ca"`
	GRPCTLSClientSAN string `yaml:"grpc_tls_client_san"`
	// APITLSCert and APITLSKey, when both set, serve the check API over
	// TLS (PEM files, read again when they change); APITLSClientCA and
	// APITLSClientSAN require client certificates, as for gRPC.
	APITLSCert      string `yaml:"api_tls_cert"`
	APITLSKey       string `yaml:"api_tls_key"`
	APITLSClientCA  string `yaml:"api_tls_client_ca"`
	APITLSClientSAN string `yaml:"api_tls_client_san"`
	// Store is "memory" (default) or a Redis URL: redis://host:port/db,
	// rediss:// (TLS), redis+cluster://host1,host2,
	// redis+sentinel://host1,host2/master (rediss+cluster and
	// rediss+sentinel with TLS) or redis+unix:///path/of/the.sock; the
	// stores' own checks (package store) accept or refuse it.
	Store string `yaml:"store"`
	// StateFile is where the memory store snapshots its counts, relative
	// to the configuration file; empty keeps them in memory only. Its
	// directory must exist and take new files (CheckStateFile): floodgate
	// check --files and the start of floodgate serve refuse it otherwise.
	StateFile string `yaml:"state_file"`
	// StoreTimeout is the deadline of one store call (default 250ms): a
	// call fails when the store has made no progress (no reply on its
	// connections) for that long, and every limit of it follows its
	// failure policy.
	StoreTimeout time.Duration `yaml:"store_timeout"`
	// StoreHardTimeout caps a call to a store that keeps replying (to
	// other calls) but not to this one (default 2s); a call ended there is
	// decided by its failure policies without being held against the
	// store.
	StoreHardTimeout time.Duration `yaml:"store_hard_timeout"`
	// Instances is the number of gateway instances sharing the store; the
	// local fallback of a limit is its capacity divided by it (default 1).
	Instances int `yaml:"instances"`
	// Headers switches the rate-limit response fields.
	Headers Headers `yaml:"headers"`
	// TrustedProxies are the CIDRs (or single addresses) of the proxies
	// whose X-Forwarded-For and Forwarded fields are believed. A hop such
	// a proxy forwarded that is not one plain address (0xcb.0.113.81,
	// "unknown", garbage) ends the chain: the client is counted as
	// "unknown@" and the proxy's address, never as the proxy itself.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// ForwardedHeader is the one header read from trusted proxies:
	// X-Forwarded-For (default) or Forwarded (RFC 7239), in any case.
	ForwardedHeader string `yaml:"forwarded_header"`
	// IPv6Prefix is the prefix length IPv6 clients are keyed by (default
	// 64). IPv4 clients are keyed by their whole address.
	IPv6Prefix int `yaml:"ipv6_prefix"`
	// APIKeyHeader is the request header carrying the API key, as the key
	// itself or as "Bearer KEY" (default
	// x-api-key).
	APIKeyHeader string `yaml:"api_key_header"`
	// User says where the user of a request comes from; with neither a JWT
	// nor a header, requests have no user and per-user limits skip them.
	User User `yaml:"user"`
	// Upstream holds the reverse proxy's timeouts and connection limit.
	Upstream Upstream `yaml:"upstream"`
	// UnknownKeyLimit limits, per client address, the requests refused for
	// a missing or unknown API key (default: 20 a minute, in bursts of 20;
	// policy.DefaultUnknownKeyLimit), so that guessing keys is answered 429.
	UnknownKeyLimit *Params `yaml:"unknown_key_limit"`
	// PathMatching is exact (default) or case_insensitive: whether
	// "/LOGIN" meets the limits of "/login", for upstreams that do not tell
	// them apart.
	PathMatching string `yaml:"path_matching"`
	// FormatSuffix is keep (default) or ignore: whether "/login.json"
	// meets the limits and routes of "/login", for upstreams that route a
	// path with a final ".format" as the path without it (Rails, whose
	// routes are "/login(.:format)", and Spring's suffix pattern
	// matching). With ignore, the text from the first dot of a path's last
	// segment on (but for a dot that starts the segment) is removed before
	// matching, as Spring serves "/login.a.json" as "/login".
	FormatSuffix string `yaml:"format_suffix"`
	// EscapedSlash says how a path with an escaped slash ("%2F") is read
	// for routes and limits, as the upstream reads it: both (default: read
	// decoded and with the slash kept inside its segment; a limit applies
	// when either reading matches, and a path whose two readings choose
	// different routes gets 400), segment (the slash kept inside its
	// segment, as net/http's ServeMux, Express, Rails and GitLab route
	// "/projects/group%2Fproject"), decoded (as NGINX and Django route),
	// or reject (400 for any path with one).
	EscapedSlash string `yaml:"escaped_slash"`
	// MethodOverride says what the gateway does with
	// X-HTTP-Method-Override and its kin: strip (default: remove them),
	// reject (400 when a line names a method), or honor (match with the
	// method they name and forward them; 400 when lines name two). Every
	// line of a field counts, empty ones too.
	MethodOverride string `yaml:"method_override"`
	// Engine is the HTTP engine of the gateway's listener: fast (default:
	// HTTP/1.1 on fasthttp, handing HTTP/2 with prior knowledge and
	// upgraded connections to net/http) or net/http (every request on
	// net/http).
	Engine string `yaml:"engine"`
	// Timeouts bound the gateway's client connections.
	Timeouts Timeouts `yaml:"timeouts"`
	// TLS, when it names certificates, serves the gateway listener over
	// TLS (gateway_tls.go).
	TLS ListenerTLS `yaml:"tls"`
	// MaxConnections bounds the client connections the gateway serves at
	// once; past it a new connection is answered 503 and closed (default
	// 0: half the process's open-file limit, which serve raises to its
	// hard limit at start).
	MaxConnections int `yaml:"max_connections"`
	// Memory bounds the embedded store and the keys of every store.
	Memory Memory `yaml:"memory"`
	// RedisEviction is what serve does when a Redis server may evict the
	// limiter's keys (maxmemory set with a maxmemory-policy other than
	// noeviction): warn (default: a log line and the metric
	// floodgate_store_evictable) or refuse to start.
	RedisEviction string `yaml:"redis_eviction"`
	// APIAuth is how the HTTP check API (api_listen) authenticates callers:
	// token (default: a bearer token of APITokens) or none, which answers
	// no browser (package httpapi).
	APIAuth string `yaml:"api_auth"`
	// APITokens are the check API's bearer tokens, stored as SHA-256 like
	// API keys ("floodgate key new" makes one).
	APITokens []Token `yaml:"api_tokens"`
	// Admin configures the admin API and the dashboard on AdminListen.
	Admin Admin `yaml:"admin"`
	// AccessLog configures the gateway's access log (off by default).
	AccessLog AccessLog `yaml:"access_log"`
	// Refusal is how the gateway's 429 answers look, unless a route's or
	// the binding limit's says otherwise (refusal.go).
	Refusal *Refusal `yaml:"refusal"`
	// Access lists the addresses and networks refused before any limit
	// (deny) and those exempt from some limits (allow).
	Access Access `yaml:"access"`
	// Bans are the rules of the penalty box: a key that offends too often
	// is refused for a while before any limit is charged.
	Bans []Ban `yaml:"bans"`

	// TrustedProxyPrefixes is TrustedProxies parsed (single addresses as
	// full-length prefixes).
	TrustedProxyPrefixes []netip.Prefix `yaml:"-"`
}

// StoreKind returns the scheme of Store: "memory", "redis", "rediss",
// "redis+cluster", "redis+sentinel" ...
func (s *Server) StoreKind() string {
	if s.Store == "" {
		return "memory"
	}
	return storeurl.Scheme(s.Store)
}

// Headers switches the rate-limit fields of responses: the gateway's,
// and those of the answers of the Envoy rate-limit service and the check
// API that floodgate serve runs.
type Headers struct {
	// RateLimit adds the IETF RateLimit-Policy and RateLimit fields
	// (default true).
	RateLimit bool `yaml:"ratelimit"`
	// XRateLimit adds the legacy X-RateLimit-Limit, -Remaining and -Reset
	// fields (default false).
	XRateLimit bool `yaml:"x_ratelimit"`
	// BindingLimit, when set, is the name of a response header that names
	// the limit that decided a denial (default: none); not one of the
	// fields the gateway sets for another purpose (Retry-After, the
	// RateLimit fields, framing and connection fields).
	BindingLimit string `yaml:"binding_limit"`
}

// Admin configures the admin API (/api/v1/) and the dashboard (/ui/) on
// the admin listener.
type Admin struct {
	// Tokens may call the admin API (and read the dashboard's data); with
	// none, the admin API refuses every call and the dashboard is open to
	// whoever reaches the admin listener, like /metrics.
	Tokens []Token `yaml:"tokens"`
	// TLSCert and TLSKey, when both set, serve the admin listener over
	// TLS (PEM files, relative to the configuration file, read again when
	// they change); TLSClientCA and TLSClientSAN require client
	// certificates signed by that CA (with that DNS name).
	TLSCert      string `yaml:"tls_cert"`
	TLSKey       string `yaml:"tls_key"`
	TLSClientCA  string `yaml:"tls_client_ca"`
	TLSClientSAN string `yaml:"tls_client_san"`
	// KeysFile keeps the API keys made through the admin API when the
	// store is the memory store (default: the state file's path with
	// ".keys.json", or the policy file's with ".keys.json" when there is
	// no state file), relative to the configuration file. One that exists
	// and does not load fails floodgate check --files and the start of
	// floodgate serve.
	KeysFile string `yaml:"keys_file"`
	// Hosts are the names, besides IP addresses and localhost, by which
	// the admin listener may be reached (the Host of its requests, without
	// the port). A request naming another host is answered 421, so that a
	// page whose name was made to point at the listener (DNS rebinding)
	// cannot read it.
	Hosts []string `yaml:"hosts"`
	// MaxKeys bounds the API keys the admin API keeps, revoked ones
	// included (default DefaultAdminMaxKeys): past it a new key is
	// refused (409), so that whoever holds a token cannot grow the key
	// store, and the memory and the work of each change that follow it,
	// without bound. Applied at each creation, reloads included.
	MaxKeys int `yaml:"max_keys"`
}

// AccessLog configures the gateway's access log: one line per request,
// refused ones included (package accesslog).
type AccessLog struct {
	// Path is the log file, relative to the configuration file, or "-" for
	// standard output; empty (the default) writes no access log. A file
	// floodgate cannot create, append to or rotate there (CheckLogFile)
	// fails floodgate check --files and the start of floodgate serve.
	Path string `yaml:"path"`
	// Format is json (default: a JSON object a line) or combined (NGINX's
	// combined format followed by Floodgate's fields).
	Format string `yaml:"format"`
	// MaxSize is the size in bytes past which the file is rotated (default
	// accesslog.DefaultMaxSize, 100 MiB); MaxFiles is the number of
	// rotated files kept (default accesslog.DefaultMaxFiles, 5).
	MaxSize  int64 `yaml:"max_size"`
	MaxFiles int   `yaml:"max_files"`
}

// User says where a request's user comes from.
type User struct {
	// JWT verifies a token and takes the user from one of its claims.
	JWT *JWT `yaml:"jwt"`
	// Header names a request header holding the user, believed only when
	// the peer is a trusted proxy. With JWT too, a request that presents a
	// token has the token's user or none: the header never speaks for a
	// token that does not verify, so a client could shed the proxy's user
	// by adding a token of its own; a proxy that sets the header should
	// remove the token's field from what it forwards.
	Header string `yaml:"header"`
}

// JWT configures token verification. Exactly one of KeyFile and JWKSFile
// is needed. An HS256 secret has at least 32 bytes, an RSA key at least
// 2048 bits, an ES256 key is on P-256, and tokens must carry exp (see the
// package documentation).
type JWT struct {
	// Header carries the token (default Authorization, with or without
	// the "Bearer " prefix).
	Header string `yaml:"header"`
	// Claim holds the user (default sub).
	Claim string `yaml:"claim"`
	// Alg is the only accepted algorithm: HS256, RS256 or ES256.
	Alg string `yaml:"alg"`
	// KeyFile is the HS256 secret or the PEM public key, relative to the
	// configuration file.
	KeyFile string `yaml:"key_file"`
	// JWKSFile is a JSON Web Key Set file, relative to the configuration
	// file; tokens pick their key by "kid".
	JWKSFile string `yaml:"jwks_file"`
	// Issuer and Audience, when set, must match the iss and aud claims.
	Issuer   string `yaml:"issuer"`
	Audience string `yaml:"audience"`
	// Leeway is the clock skew tolerated on exp and nbf (default 10s).
	Leeway time.Duration `yaml:"leeway"`

	// KeyPath and JWKSPath are KeyFile and JWKSFile resolved against the
	// configuration file's directory.
	KeyPath  string `yaml:"-"`
	JWKSPath string `yaml:"-"`
}

// Timeouts bound the gateway's client connections.
type Timeouts struct {
	// ReadHeader bounds reading a request's headers (default 10s).
	ReadHeader time.Duration `yaml:"read_header"`
	// Read bounds reading a whole request, body included (default 60s),
	// so that a client trickling a body cannot hold a request for ever.
	Read time.Duration `yaml:"read"`
	// Write bounds writing a response from the end of its request's
	// headers (default 0: none, so that long downloads and event streams
	// work; the upstream timeouts still bound the wait for an upstream).
	// A request a leaky queue would hold past it is refused at once (429),
	// not forwarded when its answer can no longer be written.
	Write time.Duration `yaml:"write"`
	// Idle closes a kept-alive connection idle for this long (default
	// 120s).
	Idle time.Duration `yaml:"idle"`
	// Send bounds how long one write of an answer may wait for the client
	// to take it, as NGINX's send_timeout (default 60s): an HTTP/2 client
	// that grants no flow-control window, or an HTTP/1 client that reads
	// nothing, is then taken to have left, and its concurrency leases and
	// reservation are given up as for a client that resets. It bounds each
	// write, not the whole answer, nor the time an upstream keeps silent.
	// On both engines (the edge engine's write may wait from about half of
	// it to it). An HTTP/2 connection whose writes make no progress for
	// this long (a client that stopped reading its socket) is closed.
	Send time.Duration `yaml:"send"`
}

// Memory bounds what the stores keep.
type Memory struct {
	// MaxBytes caps the embedded store's memory for keys (default 256
	// MiB), as the allocator hands it out; past it keys are evicted by
	// value: those equal to a fresh key first, then those holding least,
	// and a key that is denying last.
	MaxBytes int64 `yaml:"max_bytes"`
	// MaxKeyBytes caps a counter key's length in every store (default
	// 256); a longer key (a huge header or descriptor value) is counted
	// under its SHA-256 instead.
	MaxKeyBytes int `yaml:"max_key_bytes"`
	// SoftLimit is "auto" (default) or "off". With auto, floodgate serve
	// (and floodgate replay, for its stores) sets the Go runtime's soft
	// memory limit to MaxBytes and a tenth of it, plus what the rest of
	// the process holds and the room GOGC gives that, and keeps it
	// following the rest: the garbage a flood of distinct keys leaves is
	// collected before the process grows past that. GOMEMLIMIT in the
	// environment takes precedence over both.
	SoftLimit string `yaml:"soft_limit"`
}

// Token is a bearer token, stored as SHA-256 only.
type Token struct {
	// Name identifies the token in logs.
	Name string `yaml:"name"`
	// SHA256 is the lowercase hex SHA-256 of the token.
	SHA256 string `yaml:"sha256"`
}

// Upstream holds the reverse proxy's timeouts.
type Upstream struct {
	// Timeout bounds the wait for the upstream's response headers
	// (default 30s), and each write of a request to the upstream: an
	// upstream that takes none of a request's body for that long (at
	// least half of it on a kept connection) fails it with 504 as one
	// that does not answer.
	Timeout time.Duration `yaml:"timeout"`
	// DialTimeout bounds connecting to the upstream (default 5s).
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// IdleTimeout closes idle upstream connections (default 90s).
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxConnsPerHost bounds the connections to one upstream host; past
	// it requests wait for a free connection (default 0: a quarter of the
	// process's open-file limit).
	MaxConnsPerHost int `yaml:"max_conns_per_host"`
	// DrainTimeout bounds how long the rest of an upstream's answer is
	// read after its client left, when it may still tell the actual cost
	// of a reservation, such as the usage at the end of a stream (default
	// 60s). Past it the reservation keeps its estimate.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// DrainBytes bounds the bytes so read and discarded (default 64 MiB).
	DrainBytes int64 `yaml:"drain_bytes"`
	// IdentityHeaders name the request headers that tell the upstream who
	// the gateway identified; any copy a client sent is removed first.
	IdentityHeaders IdentityHeaders `yaml:"identity_headers"`
	// StripCredentials removes the API key header and Authorization from
	// forwarded requests.
	StripCredentials bool `yaml:"strip_credentials"`
	// TLS is how https:// upstreams are reached: the CAs trusted, a
	// client certificate, the server name (a route's upstream_tls replaces
	// it).
	TLS UpstreamTLS `yaml:"tls"`
}

// Match selects requests. Every non-empty list must match (and within a
// list, any entry); an empty Match selects every request.
type Match struct {
	// Methods are HTTP methods, upper case (GET, POST ...). GET includes
	// HEAD, as NGINX's limit_except GET and Go's ServeMux pattern "GET /x"
	// do (upstreams answer HEAD with their GET handlers); HEAD alone
	// matches HEAD alone.
	Methods []string `yaml:"methods"`
	// Paths are path patterns: literal segments, {name} or * for exactly
	// one segment, and a final /** for any rest (including none). A path
	// with an escaped slash ("%2F") is read as server.escaped_slash says:
	// by default both decoded and with the slash inside its segment
	// ("/users/a%2Fb" is "/users/{id}" to net/http's ServeMux), a limit
	// applying when either reading matches.
	// A pattern's trailing slash is ignored, as a path's is, and a pattern
	// no path could match is refused (CheckPathPattern).
	Paths []string `yaml:"paths"`
	// Hosts are host names, exact or *.example.com (any subdomain); the
	// port is ignored, and a final dot (api.example.com.), in a request's
	// host as in a pattern.
	Hosts []string `yaml:"hosts"`
	// Stages limit the match to requests on these stages (limits only).
	Stages []string `yaml:"stages"`
	// Routes limit the match to requests on these routes (limits only).
	Routes []string `yaml:"routes"`
}

// String renders the match as the check table shows it: methods, hosts,
// paths, routes and stages, or * for everything.
func (m Match) String() string {
	var parts []string
	if len(m.Methods) > 0 {
		parts = append(parts, strings.Join(m.Methods, ","))
	}
	if len(m.Hosts) > 0 {
		parts = append(parts, "host="+strings.Join(m.Hosts, ","))
	}
	if len(m.Paths) > 0 {
		parts = append(parts, strings.Join(m.Paths, ","))
	}
	if len(m.Routes) > 0 {
		parts = append(parts, "route="+strings.Join(m.Routes, ","))
	}
	if len(m.Stages) > 0 {
		parts = append(parts, "stage="+strings.Join(m.Stages, ","))
	}
	if len(parts) == 0 {
		return "*"
	}
	return strings.Join(parts, " ")
}

// NoUpstream, written as a route's upstream, says that the route has none.
const NoUpstream = "none"

// Route is one group of requests with one upstream.
type Route struct {
	// Name identifies the route in plans, limits and metrics.
	Name string `yaml:"name"`
	// Match selects the route's requests (methods, paths, hosts).
	Match Match `yaml:"match"`
	// Upstream is the URL requests are forwarded to (http or https). It is
	// required: a route that the reverse proxy does not forward (one only
	// the decision service's check API or the gateway's middleware mode
	// serves) says so with "none", and the reverse proxy answers its
	// requests 404 Not Found.
	Upstream string `yaml:"upstream"`
	// Stage names the route's stage, whose default limit applies.
	Stage string `yaml:"stage"`
	// APIKeyRequired makes a missing, unknown or unplanned API key a 403.
	APIKeyRequired bool `yaml:"api_key_required"`
	// OnInvalidToken is what a request whose token does not verify gets
	// when one of its limits counts per user: reject (default: 401, after
	// the limits that need no user were charged) or anonymous (those
	// limits do not apply to it).
	OnInvalidToken string `yaml:"on_invalid_token"`
	// GRPCStream is how the gRPC interceptors (package guard/grpcguard)
	// charge a streaming call on the route: per_stream (the default: one
	// request when the stream opens) or per_message (one request for each
	// message the client sends).
	GRPCStream string `yaml:"grpc_stream"`
	// Overload, when set, protects the route's upstream: a cap on the
	// requests in flight to it (fixed, or learnt from its latency),
	// criticality tiers that share the cap, and a queue in which tenants
	// wait in turn. It applies after the route's limits allowed a
	// request, just before it is forwarded.
	Overload *Overload `yaml:"overload"`
	// IdentityHeaders and StripCredentials, when set, replace the server's
	// (server.upstream) for the route's requests.
	IdentityHeaders  *IdentityHeaders `yaml:"identity_headers"`
	StripCredentials *bool            `yaml:"strip_credentials"`
	// Refusal, when set, replaces the server's for the route's 429s.
	Refusal *Refusal `yaml:"refusal"`
	// Upstreams, in place of Upstream, is a pool of targets that differ
	// only in scheme, host and port, balanced by Balance and watched by
	// Health (upstreams.go).
	Upstreams []string `yaml:"upstreams"`
	Balance   string   `yaml:"balance"`
	Health    Health   `yaml:"health"`
	// UpstreamTLS, when it says anything, replaces server.upstream.tls
	// for the route's https:// upstreams.
	UpstreamTLS UpstreamTLS `yaml:"upstream_tls"`

	// UpstreamURL is Upstream parsed (a pool's first target); nil for
	// "none". UpstreamURLs are the pool's targets parsed (nil without
	// upstreams).
	UpstreamURL  *url.URL   `yaml:"-"`
	UpstreamURLs []*url.URL `yaml:"-"`
}

// Params are the parameters of one limit. Which ones apply depends on the
// algorithm (see floodgate.Limit); the algorithm defaults to token_bucket
// when Rate is set, quota when Period is set, and sliding_window otherwise.
type Params struct {
	// Algorithm is token_bucket, gcra, leaky_bucket, leaky_queue,
	// fixed_window, sliding_log, sliding_window, concurrency or quota.
	Algorithm string `yaml:"algorithm"`
	// Rate units are admitted every Per (default 1s); Burst is the
	// capacity (default: Rate).
	Rate  int64         `yaml:"rate"`
	Per   time.Duration `yaml:"per"`
	Burst int64         `yaml:"burst"`
	// Delay is, for leaky_queue, how many queued requests pass at once:
	// a number or "nodelay".
	Delay Delay `yaml:"delay"`
	// Max is the count of the window algorithms, concurrency and quota.
	Max int64 `yaml:"limit"`
	// Window is the window of fixed_window, sliding_log, sliding_window.
	Window time.Duration `yaml:"window"`
	// LeaseTTL frees a concurrency slot whose holder died (default 1m).
	LeaseTTL time.Duration `yaml:"lease_ttl"`
	// Period is the quota's calendar period: DAY, WEEK (ISO, from Monday)
	// or MONTH, in any case.
	Period string `yaml:"period"`
	// TimeZone is the IANA zone the quota's periods follow (default UTC,
	// which validation writes in for quotas).
	TimeZone string `yaml:"time_zone"`
	// AnchorDay starts monthly periods on this day of the month (1-31;
	// shorter months start on their last day).
	AnchorDay int `yaml:"anchor_day"`
	// Offset units are taken from the period that contains Start.
	Offset int64 `yaml:"offset"`
	// Start is the first period's date (2026-01-15: the first instant of
	// that date in TimeZone, 01:00 where the clocks skip 00:00 that day)
	// or instant (RFC 3339).
	Start string `yaml:"start"`
	// OnFailure is allow, deny or local (the default, which validation
	// writes in): what the limit does when the store cannot answer in
	// time.
	OnFailure string `yaml:"on_failure"`
	// Shadow limits are evaluated and counted but never block.
	Shadow bool `yaml:"shadow"`
	// Consistency is exact (the default: every decision asks the store)
	// or leased (each instance spends units it takes from the store in
	// advance, for a hot key shared by many instances; token_bucket, gcra,
	// leaky_bucket and fixed_window only; the bound on over-admission is
	// in package limiter's documentation).
	Consistency string `yaml:"consistency"`

	// Compiled is the limit these parameters describe, set by validation.
	Compiled floodgate.Limit `yaml:"-"`
}

// Delay is a leaky queue's delay: a count of requests or "nodelay".
type Delay struct {
	// Value is the count, or floodgate.NoDelay for "nodelay".
	Value int64
	// Set reports whether the file gave a delay.
	Set bool
}

func (dl *Delay) decode(d *yamlfile.Decoder, n *yaml.Node, path string) {
	if yamlfile.IsNull(n) {
		return
	}
	if n.Kind == yaml.ScalarNode && n.Value == "nodelay" {
		*dl = Delay{Value: floodgate.NoDelay, Set: true}
		return
	}
	var v int64
	d.Decode(n, reflectValue(&v), path)
	*dl = Delay{Value: v, Set: true}
}

// Stage is a stage with its default limit, keyed by the stage: every
// request on the stage shares it, as API Gateway's stage throttling.
type Stage struct {
	// Name identifies the stage; its limit is named stage.NAME.
	Name   string `yaml:"name"`
	Params `yaml:",inline"`
}

// Account is the account-wide limit, keyed globally and checked last.
type Account struct {
	Params `yaml:",inline"`
}

// Plan is a usage plan: a per-key rate and burst, a per-key quota, and the
// routes it covers.
type Plan struct {
	// Name identifies the plan; its limits are named NAME.rate and
	// NAME.quota.
	Name string `yaml:"name"`
	// Rate requests every Per (default 1s), with a bucket of Burst
	// (default: Rate); zero Rate means no throttle.
	Rate  int64         `yaml:"rate"`
	Per   time.Duration `yaml:"per"`
	Burst int64         `yaml:"burst"`
	// Quota is the per-key count per calendar period, if any.
	Quota *Quota `yaml:"quota"`
	// Routes names the routes the plan covers; empty covers every route.
	Routes []string `yaml:"routes"`
	// OnFailure applies to both the throttle and the quota (default local).
	OnFailure string `yaml:"on_failure"`
	// Consistency is the throttle's: exact (default) or leased.
	Consistency string `yaml:"consistency"`
	// Alarms fire when a key's use of the quota reaches a threshold.
	Alarms *Alarms `yaml:"alarms"`
	// Tier is the criticality tier of the requests made with the plan's
	// keys on the routes with overload control that the plan covers,
	// unless a trusted proxy's tier header says otherwise; it must be one
	// of the tiers of every such route. On a route the plan does not
	// cover, its keys' requests take the route's tier.
	Tier string `yaml:"tier"`

	// Throttle and QuotaLimit are the compiled limits; Throttle.Algorithm
	// (QuotaLimit.Algorithm) is zero when the plan has none.
	Throttle   floodgate.Limit `yaml:"-"`
	QuotaLimit floodgate.Limit `yaml:"-"`
}

// Alarms are a plan's quota alarms: a log line, a metric and, when
// Webhook is set, a signed POST, once per key, threshold and period.
type Alarms struct {
	// Thresholds are percentages of the quota, 1 to 100 (default [80,
	// 100]).
	Thresholds []int `yaml:"thresholds"`
	// Webhook is the URL the alarms are posted to.
	Webhook string `yaml:"webhook"`
	// SecretFile holds the secret that signs the webhook's body (HMAC
	// SHA-256), relative to the configuration file; required with Webhook.
	// One that cannot be read, or holds only white space (ReadSecret),
	// fails floodgate check and the start of floodgate serve.
	SecretFile string `yaml:"secret_file"`
	// AllowLinkLocal lets Webhook reach link-local and cloud metadata
	// addresses, refused otherwise (alarm.CheckWebhook).
	AllowLinkLocal bool `yaml:"allow_link_local"`

	// SecretPath is SecretFile resolved against the file's directory.
	SecretPath string `yaml:"-"`
}

// Quota is a usage plan's quota.
type Quota struct {
	// Limit requests per Period (DAY, WEEK or MONTH).
	Limit  int64  `yaml:"limit"`
	Period string `yaml:"period"`
	// TimeZone is the IANA zone of the periods (default UTC).
	TimeZone string `yaml:"time_zone"`
	// AnchorDay is the billing day of monthly periods.
	AnchorDay int `yaml:"anchor_day"`
	// Offset requests are taken from the period that contains Start.
	Offset int64  `yaml:"offset"`
	Start  string `yaml:"start"`
}

// Key is an API key attached to a plan. Only the SHA-256 of the key is in
// the file; `floodgate key new` prints both.
type Key struct {
	// Name identifies the key in logs and counters (never the key itself);
	// renaming a key starts its counts afresh.
	Name string `yaml:"name"`
	// Plan is the usage plan the key belongs to.
	Plan string `yaml:"plan"`
	// SHA256 is the lowercase hex SHA-256 of the key.
	SHA256 string `yaml:"sha256"`
}

// Limit is one named limit.
type Limit struct {
	// Name identifies the limit in headers, metrics and the check API.
	Name   string `yaml:"name"`
	Params `yaml:",inline"`
	// Match selects the requests the limit applies to.
	Match Match `yaml:"match"`
	// Key is what the limit counts per: client_ip, api_key, user, route,
	// stage, global, header:NAME, or a list of them (a composite key).
	// Default client_ip. A request lacking a part (no user, no header) is
	// not counted by the limit. header:Host is the host the request is
	// routed by, as routes read it.
	Key KeySpec `yaml:"key"`
	// Cost is the units one request takes (default 1), and what a check
	// API hit of the limit that gives no cost takes.
	Cost int64 `yaml:"cost"`
	// CountOn, when set, charges only responses with these statuses: the
	// cost is reserved before the request is forwarded, so that requests
	// in flight count, and kept or given back by the response's status (a
	// login limit counts [401, 403]).
	CountOn []int `yaml:"count_on"`
	// Estimate, when set, reads the cost from the request instead of Cost:
	// from a header or a JSON body field (an LLM API's max_tokens).
	Estimate *Estimate `yaml:"estimate"`
	// Actual, when set, makes the cost known after the response: the
	// estimate (or Cost) is reserved before forwarding and settled with
	// the cost the response tells, in a header or a JSON body field (a
	// completion's usage.total_tokens, read from the final event of a
	// Server-Sent Events stream too).
	Actual *Actual `yaml:"actual"`
	// ReserveTTL is how long a reservation (a limit with Actual or
	// CountOn) is held for a request in flight; one not settled by then
	// keeps its estimate. Default floodgate.DefaultReservationTTL.
	ReserveTTL time.Duration `yaml:"reserve_ttl"`
	// Scope orders the limit among the others: method, route (default),
	// stage or global. Usage plans always come first.
	Scope string `yaml:"scope"`
	// Refusal, when set, is how a 429 this limit decides looks.
	Refusal *Refusal `yaml:"refusal"`
}

// Estimate is where a request tells its cost: one of Header and Body.
type Estimate struct {
	// Header names a request header holding a whole number.
	Header string `yaml:"header"`
	// Body is a JSON field of the request body, as a dotted path
	// (max_tokens, options.max_tokens).
	Body string `yaml:"body"`
	// Default is the cost when the request does not tell it (no such
	// header or field, not a whole number, a body too large to read).
	// Default: the limit's cost.
	Default int64 `yaml:"default"`
}

// Actual is where a response tells the real cost: one of Header and Body.
type Actual struct {
	// Header names a response header holding a whole number.
	Header string `yaml:"header"`
	// Body is a JSON field of the response body, as a dotted path
	// (usage.total_tokens); in a text/event-stream response, of the last
	// event that carries it.
	Body string `yaml:"body"`
}

// KeySpec is a limit's key: one part or a list of parts.
type KeySpec struct {
	// Parts are the key parts as written (client_ip, header:X-Tenant ...).
	Parts []string
}

func (k *KeySpec) decode(d *yamlfile.Decoder, n *yaml.Node, path string) {
	switch {
	case yamlfile.IsNull(n):
	case n.Kind == yaml.ScalarNode:
		k.Parts = []string{n.Value}
	default:
		d.Decode(n, reflectValue(&k.Parts), path)
	}
}

// Tenant values of Overload.Tenant, besides KeyHeaderPrefix and a header
// name.
const (
	TenantClientIP = KeyClientIP
	TenantAPIKey   = KeyAPIKey
	TenantPlan     = KeyPlan
	TenantUser     = KeyUser
)

// The default tiers of a route's overload control, most critical first.
const (
	TierCritical  = "critical"
	TierDefault   = "default"
	TierSheddable = "sheddable"
)

// Overload is a route's overload control. Exactly one of Limit and
// Adaptive caps the requests in flight to the upstream.
type Overload struct {
	// Limit is a fixed cap on the requests in flight to the upstream.
	Limit int `yaml:"limit"`
	// Adaptive learns the cap from the upstream's latency instead.
	Adaptive *Adaptive `yaml:"adaptive"`
	// Queue, when set, holds requests over the cap for their turn;
	// without it a request over the cap is refused at once (503).
	Queue *OverloadQueue `yaml:"queue"`
	// Tenant is what the queue serves in turn, and what the adaptive
	// limit tells apart (a window's drops of its tenant with the most are
	// left out of its drop ratio when other tenants have requests in it):
	// client_ip (the default), api_key, plan, user or header:NAME. A
	// request without the part is its own anonymous tenant.
	Tenant string `yaml:"tenant"`
	// Tiers are the criticality tiers, most critical first, each keeping
	// Reserve of the cap from the tiers below it (default: critical 0.1,
	// default 0.1, sheddable).
	Tiers []Tier `yaml:"tiers"`
	// Tier is the tier of the route's requests when neither a trusted
	// tier header nor the key's plan gives one (default: default, or the
	// lowest tier when none is named default).
	Tier string `yaml:"tier"`
	// TierHeader names a request field holding a tier name, read only
	// from a trusted proxy (server.trusted_proxies); an unknown name is
	// the route's tier. A request carrying the field more than once is
	// refused with 400.
	TierHeader string `yaml:"tier_header"`
}

// Adaptive are the bounds and the tuning of an adaptive concurrency
// limit (algo.AdaptiveOptions): zero fields take its defaults.
type Adaptive struct {
	// Min and Max bound the limit; Initial is where it starts.
	Min     int `yaml:"min"`
	Max     int `yaml:"max"`
	Initial int `yaml:"initial"`
	// Tolerance is the ratio of the latency to the no-load latency above
	// which the upstream is taken to queue (default 1.05).
	Tolerance float64 `yaml:"tolerance"`
	// Backoff is how far below the estimated knee a cut lands (default
	// 0.95).
	Backoff float64 `yaml:"backoff"`
	// Growth is the share the limit grows by after a window without
	// queueing (default 0.05).
	Growth float64 `yaml:"growth"`
	// Window is the shortest measuring window (default 500ms).
	Window time.Duration `yaml:"window"`
	// MinSamples is the fewest answers a window measures (default 100).
	MinSamples int `yaml:"min_samples"`
}

// OverloadQueue bounds the requests waiting for a place under a route's
// cap.
type OverloadQueue struct {
	// Size is the most requests waiting on the route, all tenants.
	Size int `yaml:"size"`
	// PerTenant is the most requests of one tenant waiting (default: an
	// eighth of Size, at least 1).
	PerTenant int `yaml:"per_tenant"`
	// MaxWait is the longest a request waits before it is refused.
	MaxWait time.Duration `yaml:"max_wait"`
}

// Tier is one criticality tier of a route's overload control.
type Tier struct {
	// Name names the tier in plans, headers, metrics and logs.
	Name string `yaml:"name"`
	// Reserve is the share of the cap, in [0, 1), that the tiers below
	// this one cannot take; the lowest tier reserves nothing.
	Reserve float64 `yaml:"reserve"`
}

// DefaultTiers are the tiers of a route's overload control that names
// none.
func DefaultTiers() []Tier {
	return []Tier{{Name: TierCritical, Reserve: 0.1}, {Name: TierDefault, Reserve: 0.1}, {Name: TierSheddable}}
}
