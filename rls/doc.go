// Package rls is Floodgate's Envoy rate-limit service: it answers
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit (RLS v3)
// from descriptor files in the envoyproxy/ratelimit format, and decides
// with Floodgate's engine over the embedded store or Redis.
//
// # Serving
//
// New builds the Service from the engine (a limiter.Engine) and a Config
// (Load or Parse); NewServer wraps it in a gRPC server that also carries
// the standard health service (grpc.health.v1, SERVING while Serve runs,
// for "" and for ServiceName), keepalive parameters and enforcement, and
// optional TLS from PEM files. Server.Serve stops gracefully when its
// context ends. SetConfig swaps the configuration while serving.
//
// # Configuration
//
// A file holds one domain, exactly as envoyproxy/ratelimit reads it:
//
//	domain: messaging
//	descriptors:
//	  - key: message_type
//	    value: marketing
//	    descriptors:
//	      - key: to_number
//	        rate_limit: {unit: day, requests_per_unit: 5}
//	  - key: to_number
//	    rate_limit:
//	      name: per_number          # optional; default: the path messaging.to_number
//	      unit: day                 # second, minute, hour, day, week, month, year
//	      requests_per_unit: 100    # 0 blocks every request
//	      replaces: [{name: other}] # drop the named limits when this one applies
//	      # unlimited: true         # never limit (no unit or requests_per_unit)
//	    shadow_mode: true           # count, never answer OVER_LIMIT
//	    detailed_metric: true       # accepted; decisions are counted per limit by package metrics
//
// Load reads files or directories (their .yaml and .yml files, in name
// order, not recursively); several domains may be loaded, each once. The
// files are read by the decoder of Floodgate's policy file (package config)
// and report problems the same way: every problem of every file at once,
// one per line, each naming the file, line, column and field path, e.g.
//
//	limits.yaml:12:7: descriptors[1].rate_limit.unit: unknown unit "fortnight" (want second, minute, hour, day, week, month or year)
//	limits.yaml:14:7: descriptors[1].rate_limit.brust: unknown field (did you mean "burst"?)
//
// Unknown fields, fields given twice, wrong types, YAML merge keys (<<),
// aliases that expand to a huge tree, duplicate descriptors, a domain
// defined twice and bad values are all problems. The error is an ErrConfig
// (errors.Is) and holds a config.Errors (errors.As) with one item per
// problem.
//
// Watch follows the files while serving: it applies a new version once two
// looks a poll interval apart (1s by default) saw the same sizes,
// modification times and contents, so a file caught half-written is never
// applied, while a file replaced by a rename or a Kubernetes ConfigMap
// update is applied one interval after it is first seen. Logs name each
// version by the first 12 hexadecimal digits of its SHA-256.
//
// Floodgate's extensions are optional keys inside rate_limit:
//
//	algorithm: token_bucket   # fixed_window (default), token_bucket, gcra,
//	                          # leaky_bucket, sliding_window, sliding_log, quota
//	burst: 20                 # token_bucket, gcra, leaky_bucket: capacity
//	                          # (default requests_per_unit); the rate is
//	                          # requests_per_unit per unit
//	quota:                    # calendar quota (units day, week, month)
//	  time_zone: Europe/Paris # IANA zone of the calendar (default UTC)
//	  anchor_day: 15          # month quotas: the day the month starts
//	on_failure: deny          # allow | deny | local (default): what the limit
//	                          # does while the store fails (see package limiter)
//
// The leaky queue and concurrency algorithms are not offered: RLS can
// neither hold a request nor release a lease.
//
// # Matching
//
// Each descriptor of a request is matched on its own, as envoyproxy/ratelimit
// does: entry by entry down the nested lists, taking at each level the
// descriptor with the same key and value, else a wildcard value ("foo*"
// matches any value starting with "foo"), else the same key with no value
// (any value). There is no backtracking, and the request's entries must end
// exactly at a descriptor with a rate_limit; otherwise that descriptor has
// no limit (status OK, no current_limit). Each distinct list of entries
// counts on its own: a key with no value or a wildcard gives every value
// its own counter. A descriptor's limit override (limit.requests_per_unit,
// unit, unit_multiplier) replaces the configured numbers for that request
// and also applies where the file has no limit, counting separately from
// the configured limit. A limit whose name appears in the replaces list of
// another limit of the same request is dropped from that request.
//
// # Answers
//
// Every status of a limited descriptor has current_limit {name,
// requests_per_unit, unit} and
// limit_remaining. duration_until_reset is, for an OVER_LIMIT descriptor, how
// long until the same cost passes (the wait a client needs; for
// requests_per_unit 0 and for a cost above the capacity, which never pass,
// the length of the unit), and otherwise the time until the limit is back
// to full (the window's end for windows).
// An unlimited descriptor is OK with limit_remaining 4294967295.
// response_headers_to_add carries RateLimit-Policy and RateLimit
// (draft-ietf-httpapi-ratelimit-headers-10 syntax, e.g. "d.k";q=10;w=60 and
// "d.k";r=3;t=42, the binding limit first) for the non-shadow limits, and on
// OVER_LIMIT a Retry-After in whole seconds, rounded up, never earlier than
// the binding t (Options.NoHeaders leaves them out; Options.LegacyHeaders
// adds X-RateLimit-Limit, -Remaining and -Reset, Reset in delay seconds). hits_addend is the
// cost (0 means 1); a descriptor's own hits_addend, when above 0,
// overrides it.
// A request the engine cannot decide at all is answered with gRPC
// Unavailable, so Envoy applies its failure_mode_deny setting; a failing
// store normally does not get that far, because each limit's on_failure
// policy decides instead.
//
// # Measuring
//
// scripts/bench-rls.sh runs "floodgate rls-bench": 50 concurrent callers
// send ShouldRateLimit for 1 key and for 10,000 keys to this service on the
// embedded store, on a Redis that the script starts, and to a bare grpc-go
// server that answers OK without doing anything, and prints decisions per
// second, p50/p99 latency, the service's CPU time per decision (from
// /proc/PID/stat) and the ratios to the bare server.
//
// # Differences from envoyproxy/ratelimit
//
//   - All descriptors of a request are checked and charged together, by ONE
//     engine call, all or nothing: if any non-shadow descriptor is over its
//     limit, none is charged. envoyproxy/ratelimit counts every descriptor
//     independently and also counts requests that end over the limit, so a
//     client that keeps hammering stays blocked and a denied request still
//     uses up the other descriptors' limits. With Floodgate a denied request
//     consumes nothing, and a cost above a limit's capacity is OVER_LIMIT at
//     once without being counted.
//   - requests_per_unit: 0 answers OVER_LIMIT without counting anything.
//   - Units second, minute, hour and day are fixed windows aligned to the
//     Unix epoch (a day is a UTC day), as in envoyproxy/ratelimit. A week is
//     the ISO calendar week from Monday 00:00 UTC, where envoyproxy/ratelimit
//     uses 7-day windows from the epoch (which start on Thursdays). A month is
//     the calendar month in UTC (or in quota.time_zone, from
//     quota.anchor_day); envoyproxy/ratelimit uses, depending on its
//     version, a fixed 30-day window or a window as long as the current
//     month, in both cases aligned to the epoch rather than to the first of
//     the month. A year is a 365-day window aligned to the epoch in both.
//   - Among several wildcard values that match, the longest prefix wins;
//     envoyproxy/ratelimit takes the first in file order.
//   - duration_until_reset of an OVER_LIMIT descriptor is the retry wait
//     (see above), not always the end of the window; the two agree for
//     fixed windows.
//   - RateLimit-Policy, RateLimit and Retry-After are added by default;
//     envoyproxy/ratelimit can add the older X-RateLimit-* fields, which
//     Options.Fields.Legacy adds as well.
//   - is_negative_hits (refunds) is rejected with InvalidArgument.
//   - The global shadow mode, the local over-limit cache, the near-limit
//     statistics and xDS configuration are not implemented; detailed_metric
//     is accepted; every decision is counted per limit by the engine's
//     metrics (front_end="rls").
package rls
