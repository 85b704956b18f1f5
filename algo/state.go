package algo

// State is the per-key state of any algorithm. What A, B and C hold depends
// on the algorithm; the zero value is a key never seen before (a full bucket,
// an empty window). Stores keep one State per key and hand it to Decide.
//
// What the fields hold, by algorithm (all instants in Unix nanoseconds):
//
//   - TokenBucket, GCRA, LeakyBucket, LeakyQueue: A = the theoretical
//     arrival time (TAT) in whole ns, B = its fraction in units of 1/Rate ns
//     (0 ≤ B < Rate), so that the emission interval Per/Rate adds up exactly.
//   - FixedWindow: A = window index ⌊now/Window⌋, B = units counted in it.
//   - SlidingLog: Ext.Entries[C:] = admitted arrivals in time order (At,
//     Weight), A = the sum of their weights; Ext.Entries[:C] are dropped
//     entries not yet compacted away.
//   - SlidingWindow: A = current window index, B = its count, C = the
//     previous window's count.
//   - Concurrency: Ext.Entries[C:] = leases in order of expiry (At = expiry,
//     Weight = cost, ID = lease), A = the sum of their weights, B = the
//     largest lease ID charged so far (as uint64 bits); as for the sliding
//     log, Ext.Entries[:C] wait to be compacted away.
//   - Quota: A = units counted in the period, B = period start, C = period
//     end (0 for a fresh key).
type State struct {
	// Last is the latest instant (Unix nanoseconds) this state was decided
	// at; a decision at an earlier instant is ErrTimeBackwards.
	Last    int64
	A, B, C int64
	// Ext holds the variable-size part of the state: the sliding log's
	// entries and the concurrency limit's leases. Nil for the others.
	Ext *Ext
}

// Ext is the variable-size part of a State.
type Ext struct {
	Entries []Entry
}

// Entry is one element of a sliding log (At is the arrival instant, Weight
// the cost) or one concurrency lease (At is the expiry, Weight the cost, ID
// the lease).
type Entry struct {
	At     int64
	Weight int64
	ID     uint64
}

// Request is one question put to an algorithm.
type Request struct {
	// Now is the instant of the request in Unix nanoseconds.
	Now int64
	// Cost is the number of units the request takes, at least 1.
	Cost int64
	// Peek asks for the decision without charging anything.
	Peek bool
	// Lease identifies a concurrency lease (Concurrency only).
	Lease uint64
}
