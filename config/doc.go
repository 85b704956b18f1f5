// Package config reads Floodgate's policy file: a YAML document with the
// server settings, the routes, the stages, the usage plans with their API
// keys, and the named limits.
//
// Load and Parse decode the file, apply defaults and validate everything at
// once: every problem is reported in an Errors value whose items carry the
// file, line, column and field path (limits[2].burst), formatted as
// "file:line:col: field: message", one per line. Unknown fields (with a
// suggestion when one is close), fields given twice, YAML merge keys (<<)
// and files whose aliases expand to more than 262,144 values are problems
// too, and so is a boolean that is not YAML's true or false (True, TRUE,
// False and FALSE too), unquoted: 1, t, yes, on and "true" are refused at
// their field. The descriptor files of the rate-limit service (package rls) are
// read by the same decoder and report their problems in the same format.
// The rules of a limit's parameters are those of floodgate.Limit
// (Limit.Problems): validation picks the algorithm, fills in the defaults,
// converts the written values and reports each problem of the limit at the
// field of the parameter it names.
// A File that Load returns without error is complete and consistent, its
// defaults written in; package policy compiles it into the rules the
// engine checks.
//
// # The format
//
// The top-level sections are all optional:
//
//	version: 1
//	server:   listen, admin_listen, ops_listen, ops_hosts, grpc_listen (with rls_config,
//	          grpc_tls_cert, grpc_tls_key, grpc_tls_client_ca,
//	          grpc_tls_client_san), api_listen (with api_tls_cert,
//	          api_tls_key, api_tls_client_ca, api_tls_client_san), store
//	          (memory | redis://… | rediss://… | redis+cluster://… |
//	          redis+sentinel://…/MASTER | redis+unix:///…; checked by the
//	          stores' own rules, package store), state_file, store_timeout,
//	          instances, headers {ratelimit, x_ratelimit, binding_limit},
//	          trusted_proxies, forwarded_header, ipv6_prefix,
//	          api_key_header, user {jwt {alg, key_file | jwks_file, claim,
//	          header, issuer, audience, leeway} | header}, upstream
//	          {timeout, dial_timeout, idle_timeout, drain_timeout, drain_bytes,
//	          tls {ca, cert, key, server_name}, identity_headers {key_name,
//	          plan, user, client_ip, remaining}, strip_credentials}, tls
//	          {certs [{cert, key}], client_ca, client_auth (none | request
//	          | require), min_version ("1.2" | "1.3")}, refusal {status,
//	          body, content_type, headers}, bans [...], access {deny,
//	          allow, max_entries}
//	routes:   - {name, match {methods, paths, hosts}, upstream (a URL, or
//	          none) | upstreams [URL, ...], balance (round_robin |
//	          least_requests), health {path, interval, timeout, healthy,
//	          unhealthy, failures, eject}, upstream_tls {ca, cert, key,
//	          server_name}, stage, api_key_required, on_invalid_token,
//	          grpc_stream (per_stream | per_message), overload {limit |
//	          adaptive {min, max, initial, tolerance, backoff, growth,
//	          window, min_samples}, queue {size, per_tenant, max_wait},
//	          tenant, tiers [{name, reserve}], tier, tier_header},
//	          identity_headers, strip_credentials, refusal}
//	stages:   - {name, <limit parameters>}       keyed by the stage
//	plans:    - {name, rate, per, burst, quota {limit, period, time_zone,
//	          anchor_day, offset, start}, routes, on_failure, tier}
//	keys:     - {name, plan, sha256}
//	limits:   - {name, <limit parameters>, match {methods, paths, hosts,
//	          stages, routes}, key, cost, count_on, estimate {header |
//	          body, default}, actual {header | body}, reserve_ttl, scope,
//	          refusal}
//	account:  {<limit parameters>}               keyed globally
//
// A match's methods naming GET match HEAD too, as NGINX's limit_except GET
// and Go's ServeMux pattern "GET /x" do: upstreams answer HEAD with their
// GET handlers, so a HEAD request is routed and limited as its GET.
//
// The limit parameters are algorithm (token_bucket, gcra, leaky_bucket,
// leaky_queue, fixed_window, sliding_log, sliding_window, concurrency,
// quota), rate, per, burst, delay, limit, window, lease_ttl, period,
// time_zone, anchor_day, offset, start, on_failure (allow, deny, local) and
// shadow. Writing a parameter that the algorithm does not read is an error.
//
// A limit's key is client_ip (the default), api_key, plan (the usage plan
// of the request's API key: an organisation whose keys share a count),
// user, route, stage, global or header:NAME, or a list of them for a
// composite key. A request that lacks a part (no user, no such header, no
// API key) is not counted by that limit. A header that carries a
// credential (the API key header, the token's header, Authorization,
// Proxy-Authorization, Cookie) is counted by the SHA-256 of its value,
// which no counter key holds as it is. An API key sent as
// "Bearer KEY" (api_key_header: authorization, as OpenAI-style clients
// send it) is read without its scheme.
//
// A limit's cost is cost units per request unless the request or the
// response tells it. estimate reads it from a request header or a dotted
// JSON field of the request body (max_tokens), with default when the
// request does not tell. actual makes it known after the response: the
// estimate is reserved before the request is forwarded and settled with
// the cost read from a response header or a JSON field of the response
// body (usage.total_tokens; in a Server-Sent Events stream, the last event
// that carries it); a response that does not tell keeps the estimate.
// count_on keeps a reservation only for the statuses it lists and gives it
// back for the others, as soon as the upstream's status is known. A reservation not settled within reserve_ttl
// (default 5m) keeps its estimate. A request holds its reservation while
// it waits in its route's overload queue, so a limit whose reserve_ttl is
// not longer than the queue's max_wait, on a route where the limit may
// apply (their paths read as the gateway reads them: PathReading), is
// refused.
//
// Limits are evaluated most specific first: the usage plan of the
// request's API key (its rate, then its quota), then the limits of scope
// method, route (the default) and stage, the stage's own limit, the limits
// of scope global, and the account limit; within a scope, in file order.
//
// Every route names its upstream, the http:// or https:// URL its
// requests are forwarded to. A route that the reverse proxy is not to
// forward (one that only the check API of the decision service, or the
// gateway used as middleware in front of a handler, serves) says so with
// "upstream: none"; the reverse proxy answers its requests 404 Not Found.
// A route that names no upstream at all is a problem, so that a forgotten
// line shows up in floodgate check rather than as 404s.
//
// A route with upstreams has a pool: targets that differ only in scheme,
// host and port (at least one; the same target twice is a problem),
// spread round robin or to the one with the fewest requests awaiting an
// answer. Passive health takes a target out for eject (default 10s) after
// failures (default 3; 0 turns it off) requests in a row found no
// connection or a 5xx answer; with health.path, each target is also asked
// GET path every interval (default 5s, within timeout, default 2s), and
// unhealthy failed checks in a row (default 3) take it out until healthy
// passes in a row (default 2) bring it back. A request goes to another
// target only when nothing of it was sent (no connection) or it is
// idempotent (GET, HEAD, OPTIONS, TRACE, PUT, DELETE) with a body the
// gateway can send again and its answer did not time out; when every
// target is out, one is tried anyway.
//
// https:// upstreams trust server.upstream.tls.ca (else the system's CAs),
// present its cert and key when asked, and verify server_name (else the
// URL's host); a route's upstream_tls, when it says anything, replaces it.
// server.tls serves the gateway listener over TLS: every certificate of
// certs (each checked against its key when the file is loaded) is chosen
// by the name the client asks for (SNI; exact names, then wildcards, else
// the first), and read again when its files change or on SIGHUP;
// client_ca with client_auth require (the default with a client CA)
// refuses clients without a certificate of it at the handshake.
//
// The addresses (listen, admin_listen, ops_listen, grpc_listen, api_listen) are
// host:port with a numeric port from 0 to 65535 and a host that is empty,
// an IP address or a host name.
//
// Every listener that takes TLS (tls, grpc_tls_*, api_tls_*, admin.tls_*) reads
// its certificate again when its files change, and with a client CA
// (…client_ca) requires client certificates it signed, with …client_san
// among their DNS names when that is given (mutual TLS).
//
// # Users from tokens
//
// server.user.jwt verifies a token with exactly one algorithm and its key,
// with these rules (those of package identity), checked when the file is
// loaded:
//
//   - HS256: the key_file holds a secret of at least 32 bytes (a final
//     newline is not counted).
//   - RS256: an RSA public key (PEM, or a certificate) of at least 2048
//     bits.
//   - ES256: an ECDSA public key on the P-256 curve.
//   - jwks_file: a JSON Web Key Set whose keys follow the same rules;
//     tokens pick theirs by kid.
//
// A token must carry exp (tokens without one are refused), verify with
// that algorithm and key (never "none"), and match issuer and audience
// when they are set; exp and nbf are checked with the leeway (default
// 10s). The user is the claim (default sub), which must be a string. A
// request without a token has no user: per-user limits skip it. A request
// with a bad token (forged, expired, over 8 KiB, or with a crit header) is
// answered 401 on a route with a limit that counts per user, after the
// limits that need no user were charged, unless the route's
// on_invalid_token is anonymous: then it is taken as a request without a
// user.
//
// # Overload control
//
// A route's overload block protects its upstream rather than counting
// callers: after the route's limits allowed a request, and just before it
// is forwarded, the request needs a place under the route's cap on
// requests in flight, a fixed limit or one that adaptive learns from the
// upstream's latency (algo.Adaptive), exclusively. Each request has a
// criticality tier: the one a trusted proxy names in tier_header, else
// the tier of its API key's plan (plans[].tier), else the route's tier.
// A tier keeps its reserve of the cap from the tiers below it
// (algo.Tiers), so under overload the lowest tier is refused first. A
// request that does not fit waits in the queue, if the route has one,
// its tenant (tenant: client_ip, api_key, plan, user or header:NAME)
// served in turn with the others (algo.FairQueue), for at most max_wait;
// otherwise, or when the queue is full, it is refused with 503 Service
// Unavailable and Retry-After. docs/overload.md tells the whole story.
//
// # In front of a public API
//
// server.upstream.identity_headers names the headers that tell the
// upstream who the gateway identified (key_name, plan, user, client_ip,
// remaining); every copy a client sent of a named header is removed,
// and strip_credentials removes the API key header and Authorization; a
// route's identity_headers and strip_credentials replace the server's.
// A refusal (server.refusal, routes[].refusal, limits[].refusal; the
// binding limit's wins, then the route's) sets the status of the
// gateway's 429s (429 or 503), their body, content type and extra
// headers; the RateLimit fields and Retry-After stay. server.bans are the
// rules of the penalty box (package penalty) and server.access the allow
// and deny lists (package access), whose networks are CIDRs without host
// bits or single addresses, checked with their positions.
// docs/gateway.md has the details.
//
// # Defaults
//
// Defaults are defined once, by the package whose behaviour they are:
// the store deadline and the upstream timeouts in package floodgate
// (floodgate.DefaultStoreTimeout, DefaultUpstreamTimeout ...), the IPv6
// prefix, the API key header and the token settings in package identity.
// The constants of this package are the file's own (DefaultListen,
// DefaultAdminListen, DefaultStore).
//
// examples/school.yaml is a complete file, and schema/floodgate.schema.json
// describes the format for editors (its "default" values are tested
// against the Go ones).
package config
