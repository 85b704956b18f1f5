// Package gateway puts Floodgate in front of HTTP: a net/http middleware that
// any service can wrap its handler with, the reverse proxy behind
// "floodgate serve", and the answers clients can act on.
//
// For every request the middleware asks the policy which limits apply, checks
// and charges them all at once through the engine, and then either forwards
// the request (after holding it for its slot when a leaky queue shapes it)
// or answers:
//
//   - 403 {"message":"Forbidden"} for a missing or unknown API key on a route
//     that requires one;
//   - 429 {"message":"Too Many Requests"} when throttled, or
//     {"message":"Limit Exceeded"} when a quota is used up, with
//     Retry-After in whole seconds (rounded up, at least 1).
//
// Every response that a limit covered carries the IETF RateLimit-Policy and
// RateLimit fields (draft-ietf-httpapi-ratelimit-headers-10: named items
// with q, w, r and t), the binding limit first. The legacy
// X-RateLimit-Limit/Remaining/Reset fields (Reset as delay seconds, not an
// epoch) and a field naming the binding limit are behind switches. Shadow
// limits add nothing and block nothing.
package gateway
