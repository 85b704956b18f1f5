// Package rls is Floodgate's Envoy rate-limit service: it answers
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit (RLS v3)
// from descriptor files in the envoyproxy/ratelimit format, and decides
// with Floodgate's engine over the embedded store or Redis. It is meant as
// a drop-in for envoyproxy/ratelimit: every construct of its files, its
// answers (in the compatibility mode), its statistics and its HTTP
// endpoints; "floodgate rls" adds its environment variables. The
// migration guide, with every difference shown on a request, is
// docs/envoy.md.
//
// # Serving
//
// New builds the Service from the engine (a limiter.Engine) and a Config
// (Load or Parse); NewServer wraps it in a gRPC server that also carries
// the standard health service (grpc.health.v1, SERVING while Serve runs,
// for "" and for ServiceName), keepalive parameters and enforcement, and
// optional TLS from PEM files. Server.Serve stops gracefully when its
// context ends. SetConfig swaps the configuration while serving.
// JSONHandler serves envoyproxy/ratelimit's /json endpoint, Health its
// /healthcheck, DebugHandler its debug port (/rlconfig is Config.Dump).
// Stats counts its statistics, exposed under the names its Prometheus
// exporter gives them.
//
// # Browsers
//
// /json takes no token, as envoyproxy/ratelimit's, and a browser that
// reaches it sends what any page it opens asks: a page of another site can
// post without a CORS preflight (a form, a no-cors fetch of text/plain),
// and one whose name was rebound to the service's address (DNS rebinding)
// calls it as its own origin and reads the answers. So /json answers no
// browser, where envoyproxy/ratelimit serves them: a request carrying
// Origin (which browsers add to every POST, "null" when the page hides its
// origin) or Sec-Fetch-Site (which they add to requests for a loopback or
// https address) is 403 and charges nothing. Services, Envoy among them,
// send neither. The gRPC port needs nothing of the kind: a page cannot
// make a browser send a gRPC call (no browser speaks HTTP/2 without TLS,
// and gRPC's content type needs a CORS preflight, which gRPC does not
// grant).
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
//	      requests_per_unit: 100    # 0 (or missing) refuses every request
//	      replaces: [{name: other}] # drop the named limits when this one applies
//	      # unlimited: true         # never limit
//	    shadow_mode: true           # count, never answer OVER_LIMIT
//	    quota_mode: true            # over the limit only when all quota descriptors are
//	    detailed_metric: true       # statistics per value
//	    value_to_metric: true       # the request's value in the statistics' names
//	    metadata: {team: sms}       # returned in the dynamic metadata when it passes
//	  - key: file
//	    value: "files/*"            # '*' anywhere, any number of times
//	    share_threshold: true       # all matching values share one counter
//	    rate_limit: {unit: hour, requests_per_unit: 10}
//
// Load reads files or directories (their .yaml and .yml files, in name
// order, not recursively, unless LoadOptions say otherwise: every file,
// sub-directories, dot files, as envoyproxy/ratelimit reads its runtime
// directory). Each domain is defined once, unless LoadOptions.MergeDomains
// lets several files add to it. The files are read by the decoder of
// Floodgate's policy file and report problems the same way: every problem
// of every file at once, one per line, each naming the file, line, column
// and field path, e.g.
//
//	limits.yaml:12:7: descriptors[1].rate_limit.unit: unknown unit "fortnight" (want second, minute, hour, day, week, month or year)
//	limits.yaml:14:7: descriptors[1].rate_limit.brust: unknown field (did you mean "burst"?)
//
// What envoyproxy/ratelimit's loader refuses is refused (unknown fields,
// duplicate descriptors, a limit replacing itself, a unit next to
// unlimited, share_threshold without a wildcard ...); what it reads and
// ignores is read and ignored, and listed by Config.Warnings. The error is
// an ErrConfig (errors.Is) and holds a config.Errors (errors.As) with one
// item per problem.
//
// Watch follows the files while serving, by the rules of package
// internal/watch: a file closed by its writer, replaced by a rename or by a
// Kubernetes ConfigMap update is applied at the next look (1s by default;
// inotify, on Linux); otherwise a new version is applied once two looks a
// poll interval apart saw the same sizes, modification times and
// contents; a file being written is held back. Logs name each
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
//	  time_zone: Europe/Paris # IANA zone of the calendar (default UTC;
//	                          # not Local, which differs between machines)
//	  anchor_day: 15          # month quotas: the day the month starts
//	on_failure: deny          # allow | deny | local (default): what the limit
//	                          # does while the store fails (see package limiter)
//
// and "compat: true" at the top of a file puts its domain in the
// compatibility mode. The leaky queue and concurrency algorithms are not
// offered: RLS can neither hold a request nor release a lease.
//
// # Matching
//
// Each descriptor of a request is matched on its own, as envoyproxy/ratelimit
// does: entry by entry down the nested lists, taking at each level the
// descriptor with the same key and value, else a wildcard value that
// matches, else the same key with no value (any value). There is no
// backtracking, and the request's entries must end exactly at a descriptor
// with a rate_limit; otherwise that descriptor has no limit (status OK, no
// current_limit). Each distinct list of entries counts on its own (a
// wildcard with share_threshold counts as one value). Among several
// wildcards that match, the one with the most literal characters wins; in
// compatibility mode the first in the file, as there. A limit whose name
// appears in the replaces list of another limit of the same request is
// dropped from that request.
//
// # Two modes
//
// By default a request is decided as a whole, by one engine call: all its
// limits are checked and charged only if it passes, so a request over the
// limit takes nothing. A descriptor's hits_addend of 0 looks (would one
// more unit pass?) without charging (limiter.Hit.Check); quota_mode
// descriptors are one group of hits (limiter.Hit.Group) that stops a
// request only when all of them are over their limits, and then only
// those under their limits are charged: atomic, in the same call. A limit
// given in the request (limit override) replaces the configured numbers
// for that request, with its own counter.
//
// In the compatibility mode (per domain, or LoadOptions.Compat), also one
// engine call, each descriptor is counted on its own, in the request's
// order, as envoyproxy/ratelimit counts it: its
// hits are added to a fixed window of its unit aligned to the epoch
// (7-day weeks, 30-day months), even past the limit, and it is over the
// limit when the count then exceeds requests_per_unit. This is emulated
// with a counting rule per unit that never refuses (see countRule): what
// it has left tells the count, so no store operation of its own is
// needed. limit_remaining is 0 once over, duration_until_reset the whole
// seconds until the window ends, current_limit carries the configured name
// only, and limit overrides count on the descriptor's counter.
//
// # Answers
//
// Every status of a limited descriptor has current_limit {name,
// requests_per_unit, unit}, limit_remaining and duration_until_reset. In
// Floodgate's mode duration_until_reset is, for an OVER_LIMIT descriptor,
// how long until the same cost passes (for requests_per_unit 0 and a cost
// above the capacity, which never pass, the length of the unit), and
// otherwise the time until the limit is back to full. An unlimited
// descriptor is OK with limit_remaining 4294967295. In Floodgate's mode
// response_headers_to_add carries RateLimit-Policy and RateLimit
// (draft-ietf-httpapi-ratelimit-headers-10 syntax, e.g. "d.k";q=10;w=60 and
// "d.k";r=3;t=42, the binding limit first) for the non-shadow limits, and
// on OVER_LIMIT a Retry-After in whole seconds (Options.Fields,
// Options.NoFields); Options.PeerHeaders adds envoyproxy/ratelimit's three
// headers in both modes. Options.ShadowMode (the global shadow mode),
// QuotaMode and DynamicMetadata are its SHADOW_MODE, QUOTA_MODE and
// RESPONSE_DYNAMIC_METADATA. hits_addend is the cost (0 means 1); a
// descriptor's own hits_addend, when set, overrides it; a cost past every
// limit is over the limit (counted as 2^32), never refused. A request of
// more than Options.MaxDescriptors descriptors, or with a descriptor of
// more than Options.MaxEntries entries (64 each by default), is refused
// with InvalidArgument (400 on /json), before it is decoded. A request the
// engine cannot decide at all is answered with gRPC Unavailable, so Envoy
// applies its failure_mode_deny setting; a failing store normally does not
// get that far, because each limit's on_failure policy decides instead.
//
// # Measuring
//
// scripts/bench-rls.sh runs "floodgate rls-bench": 50 concurrent callers
// over 4 connections send ShouldRateLimit for 10,000 keys (KEYS="1 10000"
// adds one hot key) to this service on the embedded store and on a Redis
// that the script starts, in both modes, to "floodgate rls" itself with its
// default settings, and to a bare grpc-go server that answers OK without
// doing anything, and prints decisions per second, p50/p99 latency, the
// service's CPU time per decision (from /proc/PID/stat), the degraded
// decisions and the ratios of rate and CPU to the bare server.
// docs/envoy.md (section 8) says where the CPU goes.
package rls
