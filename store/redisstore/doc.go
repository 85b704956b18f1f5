// Package redisstore keeps Floodgate's counters in Redis (standalone,
// Sentinel or Cluster), so that every instance of a service counts in one
// place. It implements limiter.Store and every optional verb
// (limiter.Releaser, limiter.Refunder, limiter.Reserver, limiter.Leaser)
// with github.com/redis/rueidis, whose automatic pipelining lets many
// goroutines share one connection. What the scripts need of a rule is
// turned into strings once and kept on the rule (limiter.Rule.Prepared).
//
// # One script call for many decisions
//
// All hits of a request that live in one Cluster slot (all of them on a
// standalone server) are decided by an embedded Lua script (apply.lua),
// atomically: every hit is checked first, and the hits are charged only if
// every non-shadow hit allows. The script takes many requests at once and
// decides them in order, each exactly as if it had been sent alone at the
// same instant: a later request sees what an earlier one charged, and its
// answer is the one it would get one by one (TestBatchDecidesAsOneByOne
// holds them equal, for every algorithm, mixed costs, shadow hits, peeks
// and releases). The cost of a script call (parsing, dispatch, the reply)
// is then paid once for many decisions: a rule's parameters travel once
// per call, the requests in one packed argument, the state strings are
// read with one MGET, and the answers come back as one string.
//
// Requests are gathered in lanes: the server, or one Cluster slot. A lane
// sends a request at once when nothing waits and no call is in flight, or
// one call of a single request (two callers then take turns without
// waiting for each other), so a lone caller never waits for a batch;
// requests that arrive while calls are in flight wait, and go together, up
// to Options.MaxBatch of them, in the next call. A further call beside the
// one in flight (up to Options.BatchesInFlight) goes once MaxBatch/8
// requests wait (16 by default) and no fewer than the calls in flight
// carry (many callers then fill a few large calls: 64 callers on loopback
// 0.038-0.040 calls a decision instead of 0.062, 5-8% more decisions a
// second at 48 to 256 callers), and a call that ends while another is
// still in flight leaves a shorter queue to that one: so a few callers
// share one call instead of sending one each beside it (8 callers on
// loopback: 0.25–0.32 calls a decision instead of 0.43, at a lower p50),
// while a long queue keeps up to three calls in flight. There is no timer:
// batches form only from the queue behind the calls in flight, so batching
// adds no latency at low load and takes the per-call cost out of high load.
// The defaults are 128 requests a call and 3 calls in flight. Batch sizes
// from 16 to 256 were within the noise of each other at 64 and 256
// callers once batches held more than about 16 requests. A third call in
// flight keeps Redis busy while one reply travels and the callers it
// answered come back with their next requests: on a 2-core machine shared
// with Redis it gave 6-8% more decisions a second than two at 64 callers,
// 11% at 32, and took floodgate rls on Redis from 0.72-0.74 to 0.76-0.77
// of a bare gRPC server. Where Redis itself is the bound (a core of its
// own), the smaller batches cost 2-5%. A fourth added nothing measurable.
// A third call goes only once MaxBatch/8 requests, and as many as the two
// in flight carry, wait beside them, so a few callers are decided as with
// two. 128 requests hold
// Redis for well under a millisecond. Options.MaxBatch 1 sends one call
// per request. A call may name any number of keys (128 requests of 64 hits,
// as many as Envoy's rate-limit service takes, name 8,192): the script
// hands them to Redis in parts of 4,000, where one Lua unpack of more than
// about 8,000 would fail the call and every request in it.
//
// Scripts run with EVALSHA and fall back to EVAL on NOSCRIPT, so a restart
// or SCRIPT FLUSH never reaches a caller. A NOSCRIPT reply means that the
// call did not run, so nothing is charged twice.
//
// # When a batch fails
//
// A call that fails (a connection error, an error reply, its deadline)
// fails every request in it; the engine then decides each by its own
// limits' failure policies. Nothing is retried: a call whose deadline
// passed may still have been applied by Redis (it was sent), so its
// requests may have been charged although their callers were answered by
// policy; that can only count too much, never admit too much (a reserve
// applied so keeps its charge until its settle records expire, which
// settles it at its estimate). A request
// whose context ends while it still waits in its lane is never sent and
// fails with an error wrapping limiter.ErrNotSent: it was not charged, and
// the engine does not hold it against Redis unless Redis made no progress
// meanwhile (below). A batch's call ends when its answer comes, as soon as
// every caller waiting for it has left, or at the latest deadline of its
// requests when they all have one, so no caller waits beyond its own.
//
// A Cluster slot being moved to another node (resharding) is followed
// without failing decisions: the client follows MOVED and ASK, and a call
// that Redis refuses with TRYAGAIN (its keys are split between the two
// nodes for now; nothing ran) is sent again, a batch as one call per
// request, each of which is sent again after 1 ms, doubling up to 32 ms,
// for at most 2 s or until its context ends (TestSlotMigrationUnderLoad).
//
// # Progress
//
// The store tells the engine when Redis last answered
// (limiter.ReplyClock), so that a slow call is judged by whether Redis
// makes progress rather than by how long the call took: the engine fails a
// call at its deadline only when no reply at all arrived on its
// connection for that long, and while replies keep arriving (a busy
// Redis, or this process waiting for CPU, so that the replies queue up
// unread) lets it wait up to its hard timeout without holding it against
// Redis. The store wraps every connection it dials (Options.URL; not
// those of a client given to NewFromClient), marks the instant of each
// read that returns bytes, and counts the commands written and the replies
// read (whole RESP values): a server that owes no reply, or whose answer
// waits unread in the receive buffer, is not silent, since a call still
// waiting then waits in this process. It keeps one such record for the
// server of a standalone or Sentinel-managed Redis (the sentinels'
// connections do not count), and one per node of a Cluster, whose node
// for a slot it reads from the Cluster itself (CLUSTER SLOTS) when it
// opens and again while calls outlast their deadline. A stopped, unreachable or stuck Redis (or
// Cluster node) therefore still fails every call within the deadline,
// while the other nodes of a Cluster keep answering theirs.
//
// While a Cluster node answers nothing, the store reads the slot map every
// 250 ms; once the Cluster has moved the node's slots to its replica (the
// replica won the election), it closes its connections to the node, and
// the client reads the new topology at once rather than at its periodic
// refresh (every 10 s), after a random wait of up to 1 s of its own.
// Measured with TestClusterFollowsFailover (2-s cluster-node-timeout),
// which fails above 2 s: on a 2-core machine compiling beside it,
// decisions on the moved slots were answered by the new primary 1.0–1.3 s
// after it won the election (7.1 s before the store read the slot map).
//
// A standalone or Sentinel-managed server that answers a script call
// READONLY has become a replica, as after a failover behind one address
// (a managed Redis' primary endpoint, a DNS name or a virtual IP moved to
// the promoted replica): Redis keeps the connections made to the old
// primary open, and would refuse every decision on them. The store closes
// the connections made before that call was sent, logs a warning (at most
// one a second), and sends the call once more, on a new connection; a
// replica refuses a script's first write, so the refused call wrote
// nothing (TestFailoverBehindOneAddress).
//
// # Time
//
// The script reads the server's clock (TIME), so every instance shares one
// clock; one batch shares one instant. Redis' TIME has microsecond
// resolution, which is the resolution of every decision: Unix microseconds
// are exact in Lua's doubles until the year 2255. Spans are computed in
// nanoseconds relative to now, and the rate algorithms keep their
// theoretical arrival time as whole seconds, nanoseconds and a fraction in
// 1/Rate ns, exactly as package algo does, so that decisions at the same
// instant are the same as algo's (the tests compare them field by field).
// The arithmetic stays exact while the spans involved (a burst's worth of
// time, a window) are below 2^53 ns (104 days), and while burst·Rate stays
// below 2^53 (a sliding window counter's weighted count, count·window,
// which passes 2^53 with a window of days and counts of thousands, is
// kept as a quotient and a remainder, exactly); beyond that it is rounded
// to doubles, never cut short: a
// year's window (Envoy's unit: year) reports its whole wait and its key
// lives until the window ends. Counts (a window's, a log's, a quota's, the
// leases of a concurrency limit) are exact up to MaxCount, 2^53-1: past
// 2^53 a double stops growing by one, so a counting limit above MaxCount
// is decided as one of MaxCount (denying before its limit rather than
// admitting every request once its count got there), and floodgate serve
// refuses a file that gives one with a Redis store (CheckLimit). A server
// clock that
// steps back is clamped: state never moves backwards (a newer window or
// quota period stays current, and a denial's wait and the key's TTL count
// to its end by the server's clock).
//
// Calendar quotas are cut in Go, in the limit's time zone (algo.QuotaPeriod):
// the script receives the boundaries around the caller's clock and picks
// the period that holds the server's clock, so a difference between the two
// clocks cannot misplace a boundary.
//
// # Keys
//
// A rule's counter for a subject is the key <prefix>{<subject>}:<rule id>
// (plus <key>:h, a companion hash, for the sliding log and concurrency, and
// <key>:r:<id> per reservation in flight, see Reservations). The
// hash tag keeps all limits of one subject in one slot. Every key carries a
// TTL: the time until its state would be back to full or idle; a rate
// algorithm's key lives two to three seconds longer, so that a key charged
// steadily keeps its TTL (SET ... KEEPTTL, whose command costs Redis 0.15
// µs against 0.4 µs for SET ... PX) and gets a new one once every second
// or two, not on every charge (the deadline is spelt in its state, see
// apply.lua). Counters and arrival times are stored as packed doubles (the
// struct library of Redis' Lua), which spares a text conversion in every
// decision; the sliding log and the leases are a sorted set and a hash.
// A denial by a full log or concurrency limit reads its entries oldest
// first, a page at a time, until enough of them pass or expire to admit
// the request (most often the first page): on a log of 7,000 entries a
// denial is answered in 0.3 ms, where reading every entry took 4 ms. Entries
// that have passed go to Redis in parts of 4,000 too, so a log or limit
// of any size is decided.
//
// # Cluster: the over-count bound
//
// Hits in different slots cannot share a script call. Decide charges the
// slots one after the other, in the order of the hits (each in its slot's
// lane, batched with that slot's other requests); when a slot denies, the
// rest are only peeked and the slots already charged are refunded by a
// second script (refund.lua) before Decide returns (or in the background if
// the request's deadline passes first). Between a charge and its refund,
// other requests see the charged units: a limit can then count up to the
// sum of the costs of the requests that are in flight on it and will be
// refunded, each for about two round trips (the later slot's call and the
// refund). That error only ever denies too much, never admits too much. A
// refund is given up after 10 seconds without an answer; one answered
// after a second is logged as applied late. A refund that Redis refuses
// leaves its charge in place until the window or period passes or the
// key's TTL runs out, and so may one that gets no answer (the node went
// away; Redis gives the charge back if the call reached it): both are
// counted (RefundErrors) and logged, each as what it is. At most 1024
// refunds are in flight at once (each holds a goroutine until it is
// answered or given up): while that many wait, for a node that stopped
// answering while requests charged there were denied elsewhere, a further
// refund is not sent, its charge left in place as a failed one's is, and
// counted (RefundErrors) and logged at most once a second. On a
// standalone server or within one slot there is no such error.
//
// # Reservations
//
// The store keeps reservations (limiter.Reserver: Reserve and Settle), in
// the same script and batches as every other request. A Reserve
// is a charge that also writes, for every reserved hit it charged, a
// settle record: the key <counter key>:r:<reservation ID>, in the
// counter's slot through its hash tag, holding the estimate and where it
// was charged (a fixed or sliding window's index, a quota period's start,
// else the server's instant, which names a sliding log's entry), with the
// reservation's TTL as its PX. A record that expires settles its
// reservation at its estimate: the charge stays, and nothing is left to
// do. A Settle reads each hit's record in the script that applies it:
// without one (settled already, expired, never made, or a shadow hit that
// denied) the hit answers not found and nothing changes. It replaces the
// record by what it did (the actual cost and its answer, 48 bytes) for
// limiter.SettledTTL: the same settle sent again (its answer lost) is
// answered alike and changes nothing, one at another cost not found.
// Below the estimate it applies the exact inverse of the charge where the
// charge was made, as refund.lua does (a rate algorithm's arrival time
// moves back; a window or quota period is lowered when it is still the one
// charged, a sliding log's entry loses the weight; one that has passed is
// left alone); above it, it charges as much of the excess as the limit
// has now, never below zero credit, and answers the rest as the overrun;
// a concurrency reservation's lease is released. A reservation in flight,
// or settled within the last limiter.SettledTTL, takes about 230 bytes of
// Redis memory (its record, for a subject of 32 bytes).
//
// On a Cluster a Reserve goes slot by slot as a charge does: when a later
// slot denies, the refund of each slot reserved before it also deletes the
// settle records written there, in the same call, so that the reservation
// holds nothing anywhere (with the over-count bound above in between). A
// Settle is applied per slot, each call atomic in its slot, one slot after
// the other; when a call fails, Settle returns its error and stops there:
// the reservations in that slot (which may have been settled after all)
// and in the slots after it settle at their estimates when their TTLs
// pass. A refund that fails leaves its slot's charge and settle records in
// place until they expire (RefundErrors). A process that dies between a
// reserve and its settle loses no charge: its records expire and its
// reservations settle at their estimates.
//
// # Leases
//
// Store.Lease (limiter.Leaser) serves the engine's leased rules (see
// limiter.LeaseOptions): in one request of a batch, it gives back the
// unspent units of an earlier lease (a fixed window only within the window
// it was taken in), then takes the units wanted if the key has them, else
// the request's own cost, else nothing, and answers for the request's cost
// as a charge would; a request that wants nothing only gives back (the
// engine's ReturnLeases, and the leases it drops to keep within
// LeaseOptions.Keys). Token bucket, GCRA, leaky bucket and fixed window
// limits can be leased.
//
// # Redis settings
//
// Floodgate needs a Redis that keeps its keys until they expire:
//
//   - maxmemory-policy noeviction. Every key Floodgate writes has a TTL, so
//     the volatile-* policies evict them as readily as the allkeys-* ones;
//     an evicted counter starts afresh and its limit admits again what it
//     had counted. New checks the policy at once and Options.EvictionCheck
//     (every minute by default) after that, with CONFIG GET or, where CONFIG
//     is disabled, INFO memory; a Redis that may evict is logged as a
//     warning and reported by Eviction (a gauge for metrics), and
//     Options.RefuseEvictable makes New fail with ErrEvictable.
//   - maxmemory sized for the keys: about 190 bytes per counter of a rate
//     or window algorithm with a short subject (measured: 184–186 bytes with
//     the key, its packed state, its TTL and Redis' own tables), plus the
//     length of longer subjects; more for a sliding log (one member per
//     request in its window) and for concurrency (one member per lease). With
//     noeviction a full Redis refuses writes: decisions then fail and follow
//     their failure policies, which is loud, rather than silently forget.
//   - persistence is a trade-off: without it a restart forgets every count
//     (limits start afresh, quotas included); AOF with appendfsync everysec
//     loses at most a second of counts; RDB snapshots lose what happened
//     since the last one. Quotas over days want AOF; short windows can do
//     without.
//
// docs/redis.md says the same for operators.
//
// # Opening by URL
//
// The package registers the schemes ParseURL reads with package store:
// redis, rediss, redis+cluster, rediss+cluster, redis+sentinel,
// rediss+sentinel and redis+unix:///path (a standalone server on a Unix
// socket, opened as redis:// is: the same client settings, its connection
// tracked for progress and read raw, RefuseEvictable honoured). Store.Client
// lends the store's client to the state a program keeps beside its
// counters (floodgate serve's console), with the store's TLS settings.
package redisstore
