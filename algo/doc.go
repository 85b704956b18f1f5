// Package algo holds Floodgate's rate-limiting algorithms as pure state
// machines: every decision takes the state, the instant (Unix nanoseconds)
// and the cost, and returns a floodgate.Decision. Nothing here reads a clock,
// allocates per decision or does I/O.
//
// Compile turns a floodgate.Limit into Params once; Params.Decide then
// answers requests against a State, one per key, which the stores keep. The
// rules follow the contract sheet (reference semantics §9):
//
//   - A cost below 1 is floodgate.ErrInvalidCost, an instant before
//     State.Last is floodgate.ErrTimeBackwards, and a cost above the
//     capacity comes back as a filled-in denial with floodgate.ErrNeverFits.
//   - A denial and a peek change nothing, not even State.Last.
//   - Remaining is the whole units admissible now, after charging;
//     RetryAfter the earliest wait after which the same cost passes with no
//     other traffic (a capped hint for concurrency); ResetAfter the time
//     until the key is as good as new, which stores use as its TTL.
//
// The token bucket, GCRA, the leaky bucket meter and the leaky queue share
// one core: a theoretical arrival time kept exactly, as nanoseconds plus a
// fraction in units of 1/Rate, so a rate such as 3 per second neither
// drifts nor rounds over any run. Products such as cost·Per go through
// math/bits in 128 bits; an instant that would overflow is ErrOverflow.
// Windows are aligned to the Unix epoch; quota periods follow the calendar
// of the limit's time zone (QuotaPeriod).
//
// # Adding an algorithm
//
// Everything outside the algorithm's own code reads floodgate.Traits
// (family, kind, parameters, refundability, leasability): validation, the response
// fields, the stores, the engine, the decision services and the command
// line. An algorithm of an existing family touches three places:
//
//  1. floodgate/limit.go: its Algorithm constant and its row in the traits
//     table (name, family, kind, parameters, refundable, leasable; a
//     leasable one also needs its branch in apply.lua's lease op).
//  2. algo: its decision (a decide function and its case in
//     Params.DecideInto; Compile only if it needs values of its own) and,
//     for a counting algorithm, how a reservation settles on it (its case
//     in settle.go's RefundAt and ChargeUpTo).
//  3. store/redisstore/apply.lua (and refund.lua): its id in the ALG
//     table, which TestScriptAlgorithmIDs holds equal to the Go constant,
//     its function in the dispatch, and its branch of the settle op and of
//     the refund.
//
// Then go generate ./schema writes its name into the JSON Schema's enum
// of algorithms (a test holds the committed schema to the generated one).
// The conformance suite (store/storetest) and the differential test of
// the Redis store against the embedded one then check the new algorithm
// in both stores; the deny cache and the decision services need nothing.
//
// # Overload control
//
// Adaptive is a concurrency limit that learns from the upstream's latency
// instead of a number someone chose: it grows while the latency stays near
// its no-load value and cuts, by the gradient rule, to just below the
// concurrency at which the upstream starts to queue. It learns the no-load
// latency without ever lowering the limit to measure it (the design note
// in adaptive.go says how). Like the algorithms above it is a pure state
// machine: instants are passed in, it never allocates, and its callers
// hold a lock.
//
// Tiers shares a capacity (a fixed concurrency limit or Adaptive.Limit)
// among criticality tiers: each tier reserves a share that the tiers below
// it cannot take, so under overload the lowest tier is refused first and
// the most critical one keeps its reserve (tiers.go).
//
// FairQueue holds the requests waiting for a slot, by tenant (an API key, a
// plan, a client address), and serves the tenants in turn by deficit round
// robin, so a tenant at twenty times its share waits on its own backlog.
// It is bounded per tenant and in all, hands back the items that waited
// too long, and forgets a tenant as soon as it has nothing waiting, so its
// memory is bounded whatever the number of tenants (fairqueue.go).
//
// A new family also needs its parameters (package floodgate's doc.go
// lists the places of a new one), in Capacity and Describe, and in the
// RateLimit-Policy window of package fields.
package algo
