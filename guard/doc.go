// Package guard protects a Go service with Floodgate in two lines: New
// builds everything from a policy file or from limits written in code, and
// Middleware wraps an http.Handler.
//
//	g, err := guard.New(guard.File("policy.yaml"), guard.Options{})
//	handler = g.Middleware(handler)
//
// A Guard makes the same decisions as "floodgate serve" with the same
// policy: it is the gateway's admission flow (package gateway) over the
// same engine (package limiter), so that requests over a limit get 429
// with Retry-After and the RateLimit fields, an unknown API key 403, a bad
// token 401, and the others reach the handler with the RateLimit fields
// already set on the response. What the policy file says of the limits,
// routes, stages, plans and keys, and of server.trusted_proxies,
// api_key_header, user (tokens), headers, method_override, store,
// state_file, store_timeout, instances and memory, holds; the listeners,
// the engine, the timeouts and the rest of server are "floodgate serve"'s
// and are not read. A route's upstream is not used: the handler is the
// upstream. Allow and deny lists (server.access) and the penalty box
// (server.bans) are "floodgate serve"'s too: a Guard would let through
// the addresses and keys serve refuses, so it refuses a file that has
// them, as an invalid one, naming the field at its line.
//
// File follows the file: a new valid version is applied at the next look
// after its writer closed it (Options.ReloadInterval, a second by
// default), an invalid one is logged and the running policy stays, as for
// "floodgate serve". Limits takes limits
// written in code, checked by the rules of the file's limits; they never
// change.
//
// The counts are kept in the embedded in-memory store unless the policy
// names Redis (server.store, or Options.StoreURL): the Redis store is
// opened by Options.OpenStore, which package guard/redisguard provides,
// so that a program that counts in memory compiles no Redis client.
// Options.Store takes a store the program opened itself. Close stops
// following the file and closes the stores the Guard opened (the memory
// store writes its state file, when the policy names one).
//
// This package needs nothing beyond the standard library's net/http and
// the packages of the gateway. Package guard/grpcguard puts the same
// Guard in front of a gRPC server.
package guard
