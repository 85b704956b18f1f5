// Package redisstore keeps Floodgate's counters in Redis (standalone,
// Sentinel or Cluster), so that every instance of a service counts in one
// place. It implements limiter.Store with github.com/redis/rueidis, whose
// automatic pipelining lets many goroutines share one connection.
//
// # One script per decision
//
// All hits of a request that live in one Cluster slot (all of them on a
// standalone server) are decided by one call of an embedded Lua script
// (apply.lua), atomically: every hit is checked first, and the hits are
// charged only if every non-shadow hit allows. Scripts run with EVALSHA and
// fall back to EVAL on NOSCRIPT, so a restart or SCRIPT FLUSH never reaches
// a caller.
//
// # Time
//
// The script reads the server's clock (TIME), so every instance shares one
// clock. Redis' TIME has microsecond resolution, which is the resolution of
// every decision: Unix microseconds are exact in Lua's doubles until the
// year 2255. Spans are computed in nanoseconds relative to now, and the rate
// algorithms keep their theoretical arrival time as whole seconds,
// nanoseconds and a fraction in 1/Rate ns, exactly as package algo does, so
// that decisions at the same instant are the same as algo's (the tests
// compare them field by field). The arithmetic stays exact while the spans
// involved (a burst's worth of time, a window) are below 2^53 ns (104
// days), and while burst·Rate stays below 2^53; beyond that it is rounded
// to doubles. A server clock that steps back is clamped: state never moves
// backwards (a newer window or quota period stays current).
//
// Calendar quotas are cut in Go, in the limit's time zone (algo.QuotaPeriod):
// the script receives the boundaries around the caller's clock and picks
// the period that holds the server's clock, so a difference between the two
// clocks cannot misplace a boundary.
//
// # Keys
//
// A rule's counter for a subject is the key <prefix>{<subject>}:<rule id>
// (plus <key>:h, a companion hash, for the sliding log and concurrency). The
// hash tag keeps all limits of one subject in one slot. Every key carries a
// TTL: the time until its state would be back to full or idle. Counters and
// arrival times are stored as packed doubles (the struct library of Redis'
// Lua), which spares a text conversion in every decision; the sliding log
// and the leases are a sorted set and a hash.
//
// # Cluster: the over-count bound
//
// Hits in different slots cannot share a script. Apply charges the slots
// one after the other, in the order of the hits; when a slot denies, the
// rest are only peeked and the slots already charged are refunded by a
// second script (refund.lua) before Apply returns (or in the background if
// the request's deadline passes first). Between a charge and its refund,
// other requests see the charged units: a limit can then count up to the
// sum of the costs of the requests that are in flight on it and will be
// refunded, each for about two round trips (the later slot's call and the
// refund). That error only ever denies too much, never admits too
// much. A refund that fails (the node went away) leaves its charge in place
// until the window or period passes or the key's TTL runs out; such
// failures are counted (RefundErrors) and logged. On a standalone server or
// within one slot there is no such error.
package redisstore
