// Package rls is Floodgate's Envoy rate-limit service: the
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit gRPC API,
// configured with the descriptor files of envoyproxy/ratelimit, deciding
// with Floodgate's engine (embedded store or Redis).
//
// TODO: full documentation of the format and the differences.
package rls
