// Package limiter is Floodgate's engine: it checks and charges the set of
// limits that apply to one request, all or nothing, against a Store, and
// applies each limit's failure policy when the store cannot answer in time.
//
// A request is a slice of Hits, most specific first (plan, route, stage,
// global). Limiter.Check asks the store to decide them in one step: every
// hit is charged only if every non-shadow hit allows. The Result names the
// binding hit (the first non-shadow denial), the longest RetryAfter among
// the denials and each hit's Decision for the response headers. Shadow
// rules are decided and reported but never deny.
//
// Concurrency limits hold a lease per request: Check gives every
// concurrency hit whose Lease is 0 a random one (written into the caller's
// slice) and Limiter.Release hands the leases back; a holder that dies
// loses its lease when it expires.
//
// Every store call has a deadline (Options.Timeout, 5 ms by default). When
// the store fails or times out, each hit follows its rule's OnFailure:
// floodgate.FailOpen allows, floodgate.FailClosed denies, floodgate.FailLocal decides with Options.Local
// (a memstore) at the rule's limit divided by the number of instances
// (SplitRule). After Options.Breaker.Failures consecutive failures a circuit
// breaker stops calling the store; one request at a time, at most every
// probe interval, probes it, and the first success closes the breaker. The
// engine starts no goroutines: a call never waits longer than its
// deadline, provided the store honours its context.
//
// An Observer sees every decision (allowed, denied, shadow, degraded, store
// latency) for metrics.
package limiter
