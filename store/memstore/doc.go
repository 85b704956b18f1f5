// Package memstore is Floodgate's embedded store: the counts of every
// (limit, key) pair in this process's memory, behind the limiter.Store
// interface. It implements every optional verb but leases:
// limiter.Releaser, limiter.Refunder and limiter.Reserver, and
// limiter.InProcess (the engine calls it without a deadline).
//
// The keys are spread over a power-of-two number of shards, each guarded by
// its own mutex and padded against false sharing. A key's place comes from
// a hash of its limit's rule ID (worked out once per rule and kept on the
// rule, limiter.Rule.IDHash, with a seed of this process) mixed with the
// key under a multiplier of the store's own seed. A decision for a key that
// is already known allocates nothing. Keys whose limit is back to full are
// idle: they are treated as new and removed, lazily on access and by a
// periodic sweep. Options.MaxKeys and Options.MaxBytes cap the number of
// keys and their memory.
//
// # Eviction
//
// A full shard makes room by value, not by recency: it weighs a few of its
// keys (8, from where its last eviction stopped, walking the entries in
// order) and removes the one whose loss changes least. A key whose state
// gives what a fresh key gives (a full bucket, a window that has ended)
// goes first and costs nothing (Stats().Expired); then the key that holds
// the least of its limit (algo.Params.Held: how far a TAT runs ahead of now
// against its tolerance, how full a window or quota is); a key that is
// denying (its last decision was a denial and the same cost would still be
// denied now), or a concurrency limit's key holding a lease (forgotten, it
// would let more than its limit run at once), only when every key weighed,
// up to 64 of them, is such a key too, and that eviction is counted in
// Stats().DenyingEvictions. So a flood
// of new keys, each holding a little of its limit, evicts its own kind and
// cannot reset the counter of a client that is being held back
// (TestDenyingKeySurvivesFlood: a login limit of 5 an hour used up, then
// 1.1 million distinct keys through a store of 10,000, and the attacker is
// still denied). An eviction visits a bounded number of entries (at most
// 1,024, free ones included), whatever the number of keys.
//
// A request's hits are checked and charged all or nothing: the shards they
// live in are locked in ascending order, every hit is decided on a copy of
// its state, and the copies are written back only if every non-shadow hit
// allows.
//
// # Clock
//
// Unless Options.Now is set, decisions do not read the system clock each
// time: they use an instant that a goroutine refreshes every millisecond
// while decisions are being made (and that stops when none are), and every
// 16th decision of a shard reads the system clock itself. A decision's
// instant can thus lag the wall clock by up to about a millisecond (more
// only while the process is starved of CPU and decisions are rare), as if
// the request had come that much earlier: the algorithms see less time gone
// by since earlier requests, and a request just after a window boundary
// may count in the window before it. With Options.Now set, every decision
// calls it.
//
// Two clocks are read. Calendar quotas follow the wall clock, since their
// periods are days of a calendar. Every other algorithm (rates, windows,
// leases) follows the store's timeline: the monotonic time since the store
// started, counted from the wall-clock reading of that moment, or from
// where the state file leaves off (below): a step of the wall clock, back
// or forward, neither freezes nor refills them. A wall clock stepped back
// does not take a quota's period back either: a quota counted in a period
// keeps its count until the wall clock leaves that period, and a denial's
// wait (and the key's reset) counts to the period's end by the wall clock.
// Options.Elapsed sets that clock beside Options.Now. Decisions report
// (Decision.At) their instant on the timeline less the shift the state
// file made, the wall clock's instant as the store reckons it.
//
// # State file
//
// With Options.StatePath set, the store writes a snapshot of every live key
// every Options.SnapshotInterval (default one second; skipped while no
// state has changed since the last one) and on Close, to a
// temporary file that is synced and then renamed over the state file, so a
// reader sees either the old or the new snapshot, never a mix. The file
// starts with a magic number, a version, a CRC-32C of the rest of the
// header, and the body's length and CRC-32C; New loads it and, if any of
// these does not match, reports the problem (Stats().LoadError and a
// warning on the logger) and starts empty rather than loading part of it.
// So it does for a file whose checksums hold but that no store could have
// written: a state with a negative count, or whose entries do not add up
// to its count, or an instant after about the year 2116 (half the int64
// range of nanoseconds), past which the timeline would overflow within a
// limit's span and every decision fail.
//
// A snapshot records when it was taken: the instant of the store's
// timeline, the wall clock, and the boot clock (Options.Boot; on Linux the
// boot ID and the time since boot, which run on across restarts of the
// process and no step of the wall clock moves). Its states are on the
// timeline of the store that wrote it, which started from that store's
// wall clock: a clock that ran an hour fast leaves states an hour in the
// future of a store started with the right clock, and would freeze every
// rate and window for that hour. A state from the future is never trusted:
// New moves its own timeline (Stats().Rebased) so that the states keep
// their age, and only then loads them.
//
//   - Started on the same boot, the store continues from the snapshot's
//     instant plus the time the boot clock says went by: exactly as if the
//     wall clock had never been wrong, whether it ran fast or slow when the
//     snapshot was taken, or does now.
//   - After a reboot only the wall clock can say how long the store was
//     away. A snapshot from the future continues from its own instant, as
//     if no time had gone by since it was taken (a bucket refills from what
//     it held, a window keeps its count). A snapshot from the past is as
//     old as the wall clock says: one from a clock that ran an hour slow
//     looks an hour older than it is, and its limits have had that hour to
//     refill and its windows of up to an hour have ended, as after an hour
//     away.
//
// TestStateAcrossAClockError restarts a store 11 s after a snapshot taken
// with the wall clock an hour fast and an hour slow. A shift under a
// second is ignored. The timeline keeps the shift for as long as the store
// runs and passes it on to its snapshots, so windows that count from the
// epoch (fixed windows, sliding window counters) end that much off the
// wall clock's boundaries; calendar quotas follow the wall clock and are
// not shifted.
//
// Crash-loss bound: after a crash (kill -9, power loss after the rename was
// synced) the store restarts from the last completed snapshot. The charges
// made after that snapshot began are lost: at most one SnapshotInterval
// plus the time one snapshot takes to write. Shards are copied one at a
// time, so a request that charged keys in two shards while a snapshot was
// being written may appear charged in one and not the other. Lost charges
// only make the restored counts lower than the true ones; a lost release
// leaves a concurrency lease held until it expires (Limit.LeaseTTL).
// TestCrashLoss checks the bound by killing a child process with SIGKILL.
//
// # Memory
//
// A key costs its 80-byte entry, its share of the index (5 bytes a slot,
// 4/3 to 8/3 slots a key) and its own bytes, which the store copies into
// pages of its own (16 KiB each) rather than keeping the caller's string:
// BenchmarkMemory1M measures 99 bytes a key for a million keys of 7 bytes.
// Sliding logs and concurrency limits take more, 24 bytes for each entry
// or lease they hold. Options.MaxBytes counts what the allocator hands out
// for all of it, rounded as the allocator rounds: the chunks of entries and
// the index as allocated, and the keys' bytes half as much again (what the
// pages of removed keys may waste before the shard copies its live keys
// into fresh pages). That count is a bound, not an estimate: filled with
// twice as many client-address keys as fit, a store capped at 8 MiB keeps
// 0.90 of the cap in heap (TestHeapWithinCap), and BenchmarkRSSAtCap
// measures the resident set after a collection against the cap.
//
// The cap bounds what is live, not the garbage the collector has yet to
// reclaim: evicted keys, the pages a compaction leaves behind, and the
// caller's own. Left to GOGC, a process lets its heap grow to twice what is
// live before it collects, so a process whose store is full peaks near
// twice the cap (BenchmarkRSSAtCap reports that peak, VmHWM, as
// peak-rss/cap). A process that wants the cap to bound its memory sets a
// soft memory limit (runtime/debug.SetMemoryLimit) a little above it, as
// floodgate serve does (server.memory.soft_limit): there, flooded with
// twice as many keys as fit, the peak grew past the process's baseline by
// 0.96 of a 64 MiB cap and 1.07 of a 256 MiB one (scripts/bench-memory.sh).
//
// The package registers the scheme "memory" with package store.
package memstore
