package limiter

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate/floodgate"
)

// Engine is what every front end decides through: the gateway, the Envoy
// rate-limit service, the HTTP check API and any later one. A front end
// does two things only: it turns its request into hits, and it turns the
// Result into its wire format. *Limiter is the implementation.
type Engine interface {
	// Decide checks (and unless req.Peek charges, all or nothing) the
	// hits of req and writes the verdict into res, reusing res's slices.
	Decide(ctx context.Context, req *Request, res *Result) error
	// Release ends the concurrency leases of hits as Decide filled them in.
	Release(ctx context.Context, hits []Hit) error
	// Renew extends the concurrency leases of hits, for a request still in
	// flight as its leases near their expiry; a lease that expired takes
	// its slot again where the limit has room, and an error wrapping
	// ErrLeaseLost (a *LeaseLostError) names those that could not.
	Renew(ctx context.Context, hits []Hit) error
	// Refund gives back what Decide charged for hits, for a request that
	// will not go ahead after all (a queued client that went away).
	Refund(ctx context.Context, hits []Hit) error
	// Settle ends the reservation Decide made for req (its hits marked
	// Reserve) with actual[i] as hit i's real cost, once it is known, and
	// writes each hit's state afterwards (with any Overrun) into res.
	Settle(ctx context.Context, req *Request, actual []int64, res *Result) error
}

// FrontEnd names the front end a decision was asked through; metrics are
// labelled with it.
type FrontEnd uint8

// Front ends. The zero value is a Go program using the engine directly.
const (
	FrontLibrary FrontEnd = iota
	FrontGateway
	FrontRLS
	FrontHTTPAPI
	numFrontEnds
)

var frontEndNames = [numFrontEnds]string{"library", "gateway", "rls", "http_api"}

// String returns library, gateway, rls or http_api.
func (f FrontEnd) String() string {
	if f < numFrontEnds {
		return frontEndNames[f]
	}
	return fmt.Sprintf("front_end(%d)", uint8(f))
}

// FrontEnds lists every front end, for metrics that want a series each.
func FrontEnds() []FrontEnd {
	out := make([]FrontEnd, numFrontEnds)
	for i := range out {
		out[i] = FrontEnd(i)
	}
	return out
}

// Request is one decision asked of the engine.
type Request struct {
	// Front is the front end asking, for metrics.
	Front FrontEnd
	// Peek answers without charging anything.
	Peek bool
	// Hits are the limits that apply with their keys, most specific
	// first. Decide writes a lease into every concurrency hit whose Lease
	// is 0, so that the caller can hand the same hits to Release.
	Hits []Hit
	// Reservation names the reservation of the hits marked Reserve. Decide
	// sets a random non-zero one when it is 0 and some hit is marked, and
	// writes it into those hits' Lease; Settle names it again (a caller in
	// another process rebuilds the Request with the same hits and ID).
	Reservation uint64
	// TTL is how long the reservation is held before it settles at its
	// estimate (0: floodgate.DefaultReservationTTL; at most
	// floodgate.MaxReservationTTL).
	TTL time.Duration
}

// HasReserved reports whether some hit of req is a reservation (Hit.Reserve).
func (req *Request) HasReserved() bool {
	for i := range req.Hits {
		if req.Hits[i].Reserve {
			return true
		}
	}
	return false
}

// HitFlags describe how one hit's decision came about.
type HitFlags uint8

// Hit flags.
const (
	// Shadow marks a hit of a shadow rule: decided and counted, never
	// enforced, and not shown to clients.
	Shadow HitFlags = 1 << iota
	// ShadowDenied marks a shadow hit that denied.
	ShadowDenied
	// Degraded marks a hit decided by its failure policy, because the
	// store failed, timed out or its breaker was open.
	Degraded
	// Cached marks a denial answered by the deny cache, without asking
	// the store (see DenyCacheOptions).
	Cached
	// Leased marks a hit of a leased rule decided from this instance's
	// lease, without asking the store (see LeaseOptions).
	Leased
)

// Degradation says why a decision was made by the failure policies instead
// of the store.
type Degradation uint8

// Reasons for a degraded decision. The zero value means the store decided.
const (
	NotDegraded Degradation = iota
	// DegradedDeadline: the store did not answer within its deadline.
	DegradedDeadline
	// DegradedStoreError: the store answered with an error.
	DegradedStoreError
	// DegradedBreakerOpen: the circuit breaker was open, so the store was
	// not asked.
	DegradedBreakerOpen
	numDegradations
)

var degradationNames = [numDegradations]string{"", "deadline", "store_error", "breaker_open"}

// String returns "", deadline, store_error or breaker_open.
func (d Degradation) String() string {
	if d < numDegradations {
		return degradationNames[d]
	}
	return fmt.Sprintf("degradation(%d)", uint8(d))
}

// Result is the verdict on one request: the one place where the binding
// limit, the wait and the delay are worked out, for every front end.
type Result struct {
	// Allowed reports whether every non-shadow hit allowed.
	Allowed bool
	// Binding is the index of the hit that decides the answer: the first
	// (most specific) non-shadow hit that denied, or when allowed the
	// non-shadow hit with the fewest units remaining (the first of equals),
	// for the response fields; when every hit is in shadow mode, the
	// shadow hit with the fewest left. It is -1 when there are no hits.
	Binding int
	// RetryAfter is the largest RetryAfter among the non-shadow denials.
	RetryAfter time.Duration
	// Delay is, when allowed, the longest Delay among the non-shadow hits
	// (leaky queues): how long to hold the request before passing it on.
	Delay time.Duration
	// Decisions holds one decision per hit, in the hits' order. On a
	// denial nothing was charged, and the hits that allowed report the
	// units they have left as they are.
	Decisions []floodgate.Decision
	// Flags holds one HitFlags per hit.
	Flags []HitFlags
	// Degraded reports that the hits were decided by their failure
	// policies, and why.
	Degraded Degradation
	// ShadowDenied reports that some shadow hit denied.
	ShadowDenied bool
	// StoreLatency is how long the store held the call: from sending it
	// to the answer, not counting a wait for an in-flight slot (0 when
	// the breaker kept the store from being asked, or for a store in this
	// process).
	StoreLatency time.Duration
}

// reset sizes r for n hits, reusing its slices.
func (r *Result) reset(n int) {
	decisions, flags := r.Decisions, r.Flags
	if cap(decisions) < n {
		decisions = make([]floodgate.Decision, n)
	}
	if cap(flags) < n {
		flags = make([]HitFlags, n)
	}
	decisions, flags = decisions[:n], flags[:n]
	clear(decisions)
	clear(flags)
	*r = Result{Binding: -1, Decisions: decisions, Flags: flags}
}

// Observer is told about every decision the engine makes, once per
// request, for metrics: allowed, denied, shadow and degraded decisions per
// front end and rule, and the store's latency. ObserveDecision is called on
// the request's goroutine after the verdict; it must be quick, safe for
// concurrent use, and must not keep req or res.
type Observer interface {
	ObserveDecision(req *Request, res *Result)
}

// ObserverFunc adapts a function to the Observer interface.
type ObserverFunc func(req *Request, res *Result)

// ObserveDecision calls f(req, res).
func (f ObserverFunc) ObserveDecision(req *Request, res *Result) { f(req, res) }

// Near reports whether an allowed decision left at most a tenth of the
// limit's capacity: the "near limit" that metrics count.
func Near(d *floodgate.Decision) bool {
	return d.Allowed && d.Remaining*10 <= d.Limit
}

var _ Engine = (*Limiter)(nil)
