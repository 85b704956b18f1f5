// Package fields renders the rate-limit fields of an answer as plain
// name/value pairs, for every front end alike: the IETF RateLimit-Policy
// and RateLimit fields (draft-ietf-httpapi-ratelimit-headers-10: named
// items with q, w, r and t), Retry-After on a denial, and behind switches
// the legacy X-RateLimit-Limit/Remaining/Reset fields (Reset as delay
// seconds, not an epoch) and a field naming the binding limit.
//
// A policy computes each limit's part once, when it is compiled (NewLimit);
// a front end turns the engine's Result into Items (AppendResult) and asks
// its Renderer for the fields, the binding limit first. The gateway writes
// them into an http.Header, the Envoy rate-limit service into
// response_headers_to_add, the HTTP check API into its answer.
//
// A limit's name is told as it is up to MaxNameLen bytes, each quote and
// backslash counted twice as the fields escape it; a longer one (a name
// an RLS request builds from its values) by a short form that stays the
// same from answer to answer, so that the fields stay small.
package fields
