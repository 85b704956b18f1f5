package limiter

import (
	"context"

	"github.com/floodgate/floodgate"
)

// Op is what a Store does with a set of hits.
type Op uint8

// Store operations.
const (
	// Charge checks every hit and charges all of them only if every
	// non-shadow hit allows (all or nothing).
	Charge Op = iota + 1
	// Peek checks every hit and charges nothing.
	Peek
	// Release ends the concurrency leases named by the hits.
	Release
	// Refund gives back what an earlier Charge took for the hits (a
	// queued request whose client went away). Only algorithms whose
	// algo.Params are Refundable give anything back; others are left alone.
	Refund
)

// Hit is one limit applied to one key for one request.
type Hit struct {
	Rule *Rule
	// Key identifies the subject the limit counts for (an IP, a user, an
	// API key's hash, "global" ...). Stores use it as the Redis hash tag,
	// so all limits of one subject live in one Cluster slot.
	Key string
	// Cost is the number of units the request takes, at least 1.
	Cost int64
	// Lease names the concurrency lease to take or release.
	Lease uint64
	// Reserve marks a hit whose cost is known only after the request: a
	// charge checks it and charges it only when Limiter.Settle says what
	// it cost (Stores ignore the flag).
	Reserve bool
}

// Store keeps the counts. Apply runs op on all hits and writes one decision
// per hit into out (len(out) == len(hits)).
//
// For Charge, a hit whose rule is not shadow and that denies stops every
// other hit from being charged; then each out[i] is the decision as peeked.
// A shadow hit is charged when it allows and never stops the others.
type Store interface {
	Apply(ctx context.Context, op Op, hits []Hit, out []floodgate.Decision) error
}
