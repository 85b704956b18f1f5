package limiter

import (
	"context"
	"time"

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
	// Reserve is a Charge (all or nothing) that also keeps a settle record
	// for every hit marked Reserve that was charged: the reservation
	// Hit.Lease, its cost (the estimate) and where it was charged (the
	// instant, hence the window or period), until a Settle ends it or
	// Hit.TTL passes. A reservation whose record expires settles at its
	// estimate: its charge stays. A concurrency hit marked Reserve takes
	// the lease Hit.Lease, which its Settle releases.
	Reserve
	// Settle ends the reservations named by the hits (Hit.Lease, on the
	// hit's rule and key), with Hit.Cost as the actual cost (0 or more).
	// Below the estimate, the difference is given back in the window or
	// period the reservation charged (algo.Params.RefundAt); above it, the
	// excess is charged now as far as the limit allows
	// (algo.Params.ChargeUpTo), and what did not fit is out[i].Overrun. A
	// concurrency reservation's lease is released. out[i].Allowed reports
	// that the reservation was found: false when it was settled already,
	// expired or never charged (a shadow hit that denied), and then
	// nothing changes. Remaining is the units free afterwards.
	Settle
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
	// Lease names the concurrency lease to take or release, or for a hit
	// marked Reserve the reservation (the Request's Reservation).
	Lease uint64
	// TTL is, for a hit marked Reserve, how long its store keeps the
	// reservation before it settles at its estimate.
	TTL time.Duration
	// Reserve marks a hit whose cost is known only after the request: its
	// Cost is an estimate, reserved by a Reserve op and settled with the
	// actual cost by a Settle op. Other ops ignore it.
	Reserve bool
	// Check marks a hit that is decided (would Cost more units pass?) and
	// never charged: it can stop the request, as any hit, but takes
	// nothing when the request goes ahead. Its decision's Remaining is the
	// units free now. A later hit of the request on the same limit and key
	// sees what the hits before it charged, and a check sees them too.
	Check bool
	// Group, when not 0, puts the hit in a group whose hits stop the
	// request only together: the request goes ahead past the group when
	// one of its non-shadow hits allows; then the hits of the group that
	// allow are charged and those that deny are not (an Envoy descriptor
	// in quota mode).
	Group uint8
}

// Verdict works out whether a charge goes ahead from its hits' decisions,
// the way every store must: it does unless a non-shadow hit outside a
// group denies, or every non-shadow hit of some group denies. The zero
// Verdict is ready; Add each hit's decision, then ask Refused.
type Verdict struct {
	refused      bool
	seen, passed [4]uint64 // one bit per group
}

// Add counts hit h's decision.
func (v *Verdict) Add(h *Hit, allowed bool) {
	if h.Rule.Shadow() {
		return
	}
	if h.Group == 0 {
		v.refused = v.refused || !allowed
		return
	}
	g := h.Group
	v.seen[g>>6] |= 1 << (g & 63)
	if allowed {
		v.passed[g>>6] |= 1 << (g & 63)
	}
}

// Refused reports whether the charge is refused.
func (v *Verdict) Refused() bool { return v.refused || v.seen != v.passed }

// Store keeps the counts. Apply runs op on all hits and writes one decision
// per hit into out (len(out) == len(hits)).
//
// For Charge, a hit whose rule is not shadow and that denies stops every
// other hit from being charged; then each out[i] is the decision as peeked.
// A shadow hit is charged when it allows and never stops the others.
// Reserve is a Charge as far as the decisions go. Every op but Release and
// Settle takes costs of at least 1 (Settle takes 0 or more).
type Store interface {
	Apply(ctx context.Context, op Op, hits []Hit, out []floodgate.Decision) error
}
