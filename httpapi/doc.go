// Package httpapi is Floodgate's HTTP check API: services that do not sit
// behind the gateway or Envoy ask it whether an action may happen.
//
// # Requests
//
// POST /v1/check checks and charges; POST /v1/peek answers what a check
// would answer (remaining counts the peeked cost as taken) without
// charging anything. The body is one hit
//
//	{"limit": "login", "key": "1.2.3.4", "cost": 1}
//
// or a batch
//
//	{"hits": [{"limit": "login", "key": "1.2.3.4"}, {"limit": "global"}]}
//
// "limit" names a limit of the policy (required); "key" is the subject it
// counts for (default "", one shared counter); "cost" is a whole number of
// units, at least 1 (default 1). Unknown fields are rejected. The hits of a
// batch are checked together and charged only if all allow (all or
// nothing); list them most specific first.
//
// # Answers
//
// A decision is JSON with status 200 when allowed and 429 when denied
// (with Retry-After in whole seconds, rounded up). /v1/peek always answers
// 200. Both carry the RateLimit-Policy and RateLimit fields of the
// non-shadow limits, the binding one first:
//
//	{"allowed": false, "limit": 5, "remaining": 0, "retry_after": 41.2,
//	 "reset": 41.2, "binding_limit": "login",
//	 "decisions": [{"limit": "login", "key": "1.2.3.4", "allowed": false,
//	   "capacity": 5, "remaining": 0, "retry_after": 41.2, "reset": 41.2}]}
//
// Durations are seconds with millisecond resolution (rounded up).
// "limit", "remaining" and "reset" at the top are those of the binding
// limit: the first non-shadow limit that denied, or when allowed the one
// with the fewest units left. "delay" (leaky queues: hold the action this
// long), "shadow" and "degraded" (decided by a failure policy while the
// store failed) appear when they apply.
//
// Errors are JSON {"error": "...", "code": "..."}: 400 bad_json,
// bad_request or invalid_cost (cost below 1 or not a whole number); 404
// unknown_limit; 405 method_not_allowed; 413 too_large (body over
// Options.MaxBodyBytes, 64 KiB by default); 422 never_fits (a cost above
// the limit's capacity, which no wait can fix) or unsupported_limit
// (concurrency limits, which need a release); 503 unavailable. An invalid
// request is rejected before the engine is asked and changes no count.
package httpapi
