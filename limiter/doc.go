// Package limiter is Floodgate's engine: it checks and charges the set of
// limits that apply to one request, all or nothing, against a Store, and
// applies each limit's failure policy when the store cannot answer in time.
//
// # One engine under every front end
//
// Engine is the one interface the front ends decide through: the gateway
// (package gateway), Envoy's rate-limit service (package rls), the HTTP
// check API (package httpapi) and a Go program using the engine directly.
// A front end does two things only: it turns its request into a Request of
// Hits, and it turns the Result into its wire format (with package fields
// for the RateLimit fields). The verdict is worked out here and nowhere
// else: the binding hit (the first non-shadow denial, or the hit with the
// fewest units left), the longest RetryAfter among the denials, the delay
// of a leaky queue, and each hit's Decision and flags. A new front end is a
// file next to the others that does those two translations; it passes its
// FrontEnd in the Request so that metrics tell it apart.
//
// Every decision is reported once, to Options.Observer (package metrics
// counts them by front end and limit): allowed, denied, shadow-denied,
// degraded with its reason, near the limit, and the store's latency.
//
// # Requests
//
// A request is a slice of Hits, most specific first (plan, route, stage,
// global). Decide asks the store to decide them in one step: every hit is
// charged only if every non-shadow hit allows. Shadow rules are decided and
// reported but never deny.
//
// Concurrency limits hold a lease per request: Decide gives every
// concurrency hit whose Lease is 0 a random one (written into the caller's
// hits) and Release hands the leases back; a holder that dies loses its
// lease when it expires. Refund gives back the charges of rate algorithms
// for a request that will not go ahead (a queued client that left).
//
// # Reservations
//
// A hit marked Reserve has a cost known only after the request (the
// tokens of a completion, a login that counts only failures): its Cost is
// an estimate. Decide reserves it together with the request's other hits,
// all or nothing, under the Request's Reservation ID (a random one, like a
// lease), so that requests in flight count against the limit; the store
// keeps a settle record per reserved hit for Request.TTL. Settle ends the
// reservation with the actual costs: below an estimate the difference is
// given back, in the window or period the reservation charged; above it
// the excess is charged as far as the limit allows, never below zero
// credit, and what did not fit is reported as Decision.Overrun. A
// reservation not settled within its TTL settles at its estimate (its
// charge stays). The same Settle sent again within SettledTTL (the same
// actual costs: its answer was lost) is answered as the first was and
// changes nothing; one at other costs is ErrReservationUnknown. A
// reservation decided by failure policies while the store failed holds
// nothing to settle.
//
// Crash bound: a process that dies between reserve and settle loses no
// charge; each of its reservations in flight settles at its estimate when
// its TTL passes, so the count is off by at most the difference between
// each such request's estimate and actual cost (too high when the
// estimate was high; too low by the excess when it was low).
//
// Both of Floodgate's stores keep reservations (package memstore, and
// package redisstore on a server or a Cluster). A store that does not
// implement Reserver, such as one written outside this module, is asked
// the older way: reserved hits are only checked, and Settle charges the
// actual cost as a new charge, so requests in flight do not count and
// concurrent requests can pass a limit counted by outcome together.
//
// Limits given in requests (an Envoy descriptor's own limit) are compiled
// once and kept in a bounded RequestLimits, which any front end can use.
//
// # Stores
//
// A store implements Store, one verb: Decide, a charge (all or nothing, as
// Verdict works it out) or a peek. Everything else is optional, each an
// interface of its own that New looks for once, in the manner of
// database/sql/driver:
//
//   - Releaser ends concurrency leases. A concurrency limit on a store
//     without it is refused: Decide returns ErrUnsupported.
//   - Refunder gives charges back (Refund). Without it every charge stays.
//   - Reserver keeps reservations (Reserve and Settle, whose answers are
//     Settled). Without it, reservations are asked the older way (above).
//   - Leaser grants leases of units for leased rules. Without it, every
//     rule is exact.
//   - InProcess and ReplyClock say how calls are timed (see Failure).
//
// Every verb answers the same on every store: package storetest holds a
// store to Store, Releaser and Refunder (Run) and to Reserver
// (RunReservations). A verb that answers nothing (Release, Refund) leaves
// nothing to differ.
//
// What a consumer of rules works out once per rule (a store's script
// arguments or key hash, the engine's local fallback rules, a front end's
// response fields, a metric's series) it keeps on the rule, in a Slot of
// its own (Rule.Prepared): it lives as long as the rule, a reload that
// replaces its rules frees it with them, and there is no cache to bound.
//
// # Fewer store calls
//
// Two things spare a shared store (package redisstore) calls, both for
// stores outside this process only. The deny cache (DenyCacheOptions, on
// by default) answers a request whose every hit the store reported as
// having no unit left, until the instant one unit comes back, with the
// answer the store would give; it never denies what the store would allow
// while counters only grow, and lives at most a second past a change it
// cannot see. Leased rules (RuleOptions.Consistency, LeaseOptions) are
// spent from units each instance takes from the store in advance, for a
// stated bound on over-admission; the default is exact. Decisions made
// this way are flagged Cached or Leased.
//
// # Failure
//
// Every store call has a deadline (Options.Timeout). When the store fails
// or times out, each hit follows its rule's OnFailure: FailOpen allows,
// FailClosed denies, FailLocal decides with Options.Local (a memstore) at
// the rule's limit divided by the number of instances (SplitRule).
//
// The deadline and the circuit breaker judge the store, not this process.
// A store that implements ReplyClock (the Redis store) is judged by its
// progress: a call fails at Timeout only when no reply at all arrived on
// its connections for that long (a stopped, unreachable or stuck server),
// so a stopped server fails every call within Timeout; while replies keep
// arriving (a busy server, or this process waiting for CPU, whose own
// queue makes calls slow) a call waits up to Options.HardTimeout, and one
// that reaches it is decided by its policy without being held against the
// store (Stats.SlowCalls, Stats.HardTimeouts). A check that runs long
// after it was due and sees no reply looks again once this process has
// had time to run (half of Timeout later): it did not run, so the replies
// may be waiting unread, or read and not yet recorded. When the second
// look sees no reply either, it ends the call, but not held against the
// store (Stats.LateDeadlines). ProgressCheck is that rule, for calls a
// program makes on a store's own client that must end as the engine's do.
//
// At most Options.MaxInFlight calls are in flight at once; a call beyond
// that waits for a slot (backpressure on the callers rather than a longer
// queue in front of the store), within the same deadline. For a store
// without a ReplyClock only the time the store held a call counts against
// it: a call that never left this process (ErrNotSent), one that spent
// most of its deadline waiting here, and one whose deadline was noticed
// late because this process did not run are decided by their policies
// without being held against the store (Stats.QueueTimeouts,
// Stats.LateDeadlines). The breaker opens on a failure rate over a
// window, or on a run of failures with no success among them (see
// BreakerOptions); while open, one request at a time, at most every probe
// interval, probes the store, and the first success closes it. A store
// whose servers fail apart from each other (a Redis Cluster's nodes, see
// Partitioner) gets a breaker per server, and a call goes through those
// of the servers its hits touch: one that fails opens its own and costs
// only the calls that touch it. The breakers read Options.Now, so
// tests can move their clock. The engine starts no goroutines: a call
// never waits longer than its deadline (or the hard timeout, for a store
// that keeps answering), provided the store honours its context.
//
// # Over-admission while degraded
//
// FailClosed admits only what the store admitted. FailOpen admits
// everything while the store fails. FailLocal is bounded: with N instances
// sharing a store and a limit of L per window (a burst of L), the requests
// admitted over one window are at most
//
//	L + k × max(1, L/N)
//
// where k is the number of instances that decided by their local fallback
// in it: the store admits at most L, and each such instance at most its
// share from its own local counter, which lives on across its outages
// (at most 2L when every instance degrades). A call whose deadline passed
// may still have been applied by the store: it then counts there too,
// which only lowers what the store admits. For a rate (a token bucket
// with rate r and burst B) over a span t the same holds with L = B + r·t.
// The bound assumes N is the true number of instances (Options.Instances
// or InstancesFunc; fewer counted than run admits more) and that the local
// store keeps its counters (a memstore evicting them under its memory cap
// starts a share afresh). TestLocalFallbackOverAdmissionBound holds it.
package limiter
