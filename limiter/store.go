package limiter

import (
	"context"
	"errors"
	"time"

	"github.com/floodgate/floodgate"
)

// Store keeps the counts: the one interface every store implements. The
// engine discovers what else a store does, once, in New: Releaser
// (concurrency leases), Refunder (giving charges back), Reserver
// (reservations), Leaser (leased rules), InProcess and ReplyClock (how its
// calls are timed), Partitioner (a circuit breaker per server). A store
// that implements only Store takes every limit but concurrency
// (ErrUnsupported), keeps every charge, and is asked for reservations the
// older way (see Reserver).
type Store interface {
	// Decide decides every hit and writes one decision per hit into out
	// (len(out) == len(hits)). Every cost is at least 1.
	//
	// With peek false it is a charge, all or nothing: the hits are
	// decided in order (a later hit on the same limit and key sees what
	// the hits before it charged), and charged only if the request goes
	// ahead by Verdict; then a hit marked Check is not charged, nor is a
	// hit of a group that denied, and a shadow hit is charged when it
	// allows. When the request does not go ahead nothing is charged and
	// each out[i] is the decision as peeked. A concurrency hit takes the
	// lease Hit.Lease (again, for a lease it holds: a renewal). Hit.Reserve
	// and Hit.TTL are ignored.
	//
	// With peek true it charges nothing, and each out[i] is what a charge
	// of that hit alone would decide.
	Decide(ctx context.Context, hits []Hit, peek bool, out []floodgate.Decision) error
}

// Releaser is implemented by stores that keep concurrency leases. The
// engine refuses a concurrency limit on a store without it: Decide returns
// an error wrapping ErrUnsupported, before the store is asked.
type Releaser interface {
	// Release ends the concurrency leases named by the hits (Hit.Lease
	// on the hit's rule and key). Other hits are ignored, and so is a
	// lease that is not held: releasing is idempotent.
	Release(ctx context.Context, hits []Hit) error
}

// Refunder is implemented by stores that can give back what a charge took
// (a queued request whose client went away). Without it, the engine's
// Refund gives nothing back: every charge stays.
type Refunder interface {
	// Refund gives back Hit.Cost units (at least 1) of each hit whose
	// algorithm is Refundable (algo.Params.Refund: a bucket never fills
	// beyond full), and of each window, sliding log or quota hit that
	// names the Decision.Mark of its charge (algo.Params.RefundAt: from
	// the window, entry or period that counted it, if it has not passed
	// since); the other hits are left alone.
	Refund(ctx context.Context, hits []Hit) error
}

// Reserver is implemented by stores that keep reservations: memstore and
// redisstore do. The engine asks a store that does not (one written
// outside this module) for the next best thing: a reservation is checked
// (a peek) without being held, and its settle charges the actual cost as a
// new decision. That keeps the request's other limits all or nothing, but
// requests in flight do not count against the reserved limits, and
// nothing is ever given back.
type Reserver interface {
	// Reserve is a charge (Store.Decide with peek false) that also keeps
	// a settle record for every hit marked Reserve that was charged: the
	// reservation Hit.Lease, its cost (the estimate) and where it was
	// charged (the instant, hence the window or period), until a Settle
	// ends it or Hit.TTL passes. A reservation whose record expires
	// settles at its estimate: its charge stays. A concurrency hit marked
	// Reserve takes the lease Hit.Lease, which its Settle releases. The
	// hits of a reservation are neither checks nor grouped.
	Reserve(ctx context.Context, hits []Hit, out []floodgate.Decision) error
	// Settle ends the reservations named by the hits (Hit.Lease, on the
	// hit's rule and key), with Hit.Cost as the actual cost (0 or more),
	// and writes one Settled per hit into out (len(out) == len(hits)).
	// Below the estimate, the difference is given back in the window or
	// period the reservation charged (algo.Params.RefundAt); above it,
	// the excess is charged now as far as the limit allows
	// (algo.Params.ChargeUpTo), and what did not fit is the Overrun. A
	// concurrency reservation's lease is released. A reservation that is
	// not found (settled already, expired, or never charged: a shadow hit
	// that denied) changes nothing. The same settle sent again within
	// SettledTTL of the first (at the same actual cost: its caller never
	// got the first answer) is answered as the first was and changes
	// nothing; one at another cost is not found.
	Settle(ctx context.Context, hits []Hit, out []Settled) error
}

// SettledTTL is how long a Reserver keeps what a settle did, so that the
// same settle sent again, when its answer was lost on the way, is
// answered alike rather than not found. It covers the retries of a
// caller's timeout (the Go client sends a settle again until an answer
// comes within its own).
const SettledTTL = time.Minute

// Settled is what a Settle did to one reservation: every store answers
// these fields alike (storetest.RunReservations holds them to it).
type Settled struct {
	// Found reports that the reservation was held, and settled now. The
	// other fields are zero when it was not.
	Found bool
	// Remaining is the number of units free afterwards.
	Remaining int64
	// Overrun is the part of the actual cost above the estimate that did
	// not fit.
	Overrun int64
}

// ErrUnsupported reports a hit that the store cannot decide: a concurrency
// limit on a store that does not implement Releaser.
var ErrUnsupported = errors.New("limiter: the store cannot keep this limit")

// storeOp is what the engine asks of a store: a verb of Store or of one of
// the optional interfaces.
type storeOp uint8

const (
	opCharge  storeOp = iota + 1 // Store.Decide
	opPeek                       // Store.Decide, peek
	opRelease                    // Releaser.Release
	opRefund                     // Refunder.Refund
	opReserve                    // Reserver.Reserve
	opSettle                     // Reserver.Settle
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
	// Cost is an estimate, reserved by Reserver.Reserve and settled with
	// the actual cost by Reserver.Settle. Store.Decide ignores it.
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
	// Mark is, for a refund, the Decision.Mark of the charge to give
	// back. With it, the charge of a fixed or sliding window, a sliding log
	// or a quota is given back from the window, log entry or period that
	// counted it, if that has not passed since (algo.Params.RefundAt);
	// without it (0) only the rate algorithms' charges are. Other verbs
	// ignore it.
	Mark int64
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
