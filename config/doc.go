// Package config reads Floodgate's policy file: a YAML document with the
// server settings, the routes, the stages, the usage plans with their API
// keys, and the named limits.
//
// Load and Parse decode the file, apply defaults and validate everything at
// once: every problem is reported in an Errors value whose items carry the
// file, line, column and field path (limits[2].burst), formatted as
// "file:line:col: field: message". A File that Load returns without error
// is complete and consistent; package policy compiles it into the rules the
// engine checks.
//
// # The format
//
// The top-level sections are all optional:
//
//	version: 1
//	server:   listen, admin_listen, grpc_listen (with rls_config,
//	          grpc_tls_cert, grpc_tls_key), api_listen, store
//	          (memory | redis://… | rediss://… | redis+cluster://… |
//	          redis+sentinel://MASTER@…), state_file, store_timeout,
//	          instances, headers {ratelimit, x_ratelimit, binding_limit},
//	          trusted_proxies, forwarded_header, ipv6_prefix,
//	          api_key_header, user {jwt {alg, key_file | jwks_file, claim,
//	          header, issuer, audience, leeway} | header}, upstream
//	          {timeout, dial_timeout, idle_timeout}
//	routes:   - {name, match {methods, paths, hosts}, upstream, stage,
//	          api_key_required}
//	stages:   - {name, <limit parameters>}       keyed by the stage
//	plans:    - {name, rate, per, burst, quota {limit, period, time_zone,
//	          anchor_day, offset, start}, routes, on_failure}
//	keys:     - {name, plan, sha256}
//	limits:   - {name, <limit parameters>, match {methods, paths, hosts,
//	          stages, routes}, key, cost, count_on, scope}
//	account:  {<limit parameters>}               keyed globally
//
// The limit parameters are algorithm (token_bucket, gcra, leaky_bucket,
// leaky_queue, fixed_window, sliding_log, sliding_window, concurrency,
// quota), rate, per, burst, delay, limit, window, lease_ttl, period,
// time_zone, anchor_day, offset, start, on_failure (allow, deny, local) and
// shadow. Writing a parameter that the algorithm does not read is an error.
//
// A limit's key is client_ip (the default), api_key, user, route, stage,
// global or header:NAME, or a list of them for a composite key. A request
// that lacks a part (no user, no such header, no API key) is not counted by
// that limit.
//
// Limits are evaluated most specific first: the usage plan of the
// request's API key (its rate, then its quota), then the limits of scope
// method, route (the default) and stage, the stage's own limit, the limits
// of scope global, and the account limit; within a scope, in file order.
//
// examples/school.yaml is a complete file, and schema/floodgate.schema.json
// describes the format for editors.
package config
