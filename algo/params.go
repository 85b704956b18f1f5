package algo

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/floodgate/floodgate"
)

// ErrOverflow reports an instant so far in the future (or a state so
// corrupt) that the arithmetic would leave the int64 range. Decisions never
// wrap around.
var ErrOverflow = errors.New("algo: arithmetic overflow")

// DefaultLeaseTTL is the lifetime of a concurrency lease when the limit's
// LeaseTTL is zero: a holder that dies frees its slot after this long.
const DefaultLeaseTTL = time.Minute

// maxRetryHint caps the concurrency limit's RetryAfter: slots are usually
// released long before their leases expire.
const maxRetryHint = time.Second

// maxInstant is the largest instant a decision can take.
const maxInstant = math.MaxInt64

// Params is a compiled limit: the limit's parameters validated and turned
// into the exact integers the decisions need. It is a plain value, safe to
// copy and to share between goroutines (Decide does not modify it).
type Params struct {
	limit floodgate.Limit
	alg   floodgate.Algorithm
	cap   int64 // largest cost that can ever pass

	// Rate algorithms: every span is exact with denominator den = Rate.
	den   uint64 // Rate
	per   uint64 // Per in ns
	t     exact  // emission interval Per/Rate
	tau   exact  // τ' = capacity · T: how far ahead of now the TAT may run
	delay exact  // leaky queue: D·T, the part of the queue that passes at once
	nodel bool   // leaky queue with NoDelay

	// Window algorithms and concurrency.
	max    int64
	window int64 // ns
	ttl    int64 // concurrency lease lifetime, ns

	// Quota: the period that contains Limit.Start gets Offset units less.
	offsetStart  int64
	offsetAmount int64
}

// Compile validates l and precomputes what its decisions need.
func Compile(l *floodgate.Limit) (Params, error) {
	if l == nil {
		return Params{}, fmt.Errorf("algo: compile: %w: nil limit", floodgate.ErrInvalidLimit)
	}
	if err := l.Validate(); err != nil {
		return Params{}, fmt.Errorf("algo: compile: %w", err)
	}
	p := Params{limit: *l, alg: l.Algorithm, cap: l.Capacity()}
	switch l.Algorithm.Family() {
	case floodgate.FamilyRate:
		p.den = uint64(l.Rate)
		p.per = uint64(l.Per)
		p.t = exact{ns: int64(p.per / p.den), rem: p.per % p.den}
		var ok bool
		if p.tau, ok = mulDiv(uint64(p.cap), p.per, p.den); !ok {
			return Params{}, fmt.Errorf("algo: compile: %w: burst %d at %d per %s overflows",
				floodgate.ErrInvalidLimit, l.Burst, l.Rate, l.Per)
		}
		if l.Algorithm.Traits().Params.Has(floodgate.ParamDelay) {
			if l.Delay == floodgate.NoDelay || l.Delay >= p.cap {
				p.nodel = true
			} else if p.delay, ok = mulDiv(uint64(l.Delay), p.per, p.den); !ok {
				return Params{}, fmt.Errorf("algo: compile: %w: delay %d overflows", floodgate.ErrInvalidLimit, l.Delay)
			}
		}
	case floodgate.FamilyWindow:
		p.max = l.Max
		p.window = int64(l.Window)
	case floodgate.FamilyConcurrency:
		p.max = l.Max
		p.ttl = int64(l.LeaseTTL)
		if p.ttl == 0 {
			p.ttl = int64(DefaultLeaseTTL)
		}
	case floodgate.FamilyQuota:
		p.max = l.Max
		if l.Offset > 0 {
			p.offsetStart, _ = QuotaPeriod(l, l.Start.UnixNano())
			p.offsetAmount = l.Offset
		}
	}
	return p, nil
}

// Limit returns the limit the parameters were compiled from.
func (p *Params) Limit() *floodgate.Limit { return &p.limit }

// Algorithm returns the compiled limit's algorithm.
func (p *Params) Algorithm() floodgate.Algorithm { return p.alg }

// Capacity returns the largest cost a single request can have.
func (p *Params) Capacity() int64 { return p.cap }

// Interval returns the exact emission interval Per/Rate of a rate algorithm
// as whole nanoseconds plus a fraction rem/den (den = Rate, 0 ≤ rem < den).
// It is zero for the other algorithms.
func (p *Params) Interval() (ns int64, rem, den uint64) { return p.t.ns, p.t.rem, p.den }

// Tolerance returns τ' = capacity·Per/Rate, how far ahead of now the
// theoretical arrival time of a rate algorithm may run, in the same exact
// form as Interval.
func (p *Params) Tolerance() (ns int64, rem, den uint64) { return p.tau.ns, p.tau.rem, p.den }

// Decide answers one request and, when it is allowed and not a peek, charges
// it to s. A denied request changes nothing in s. It returns
// floodgate.ErrInvalidCost for a cost below 1, floodgate.ErrTimeBackwards for
// an instant before s.Last, and a filled-in denial together with
// floodgate.ErrNeverFits for a cost above the capacity.
func (p *Params) Decide(s *State, r Request) (floodgate.Decision, error) {
	var d floodgate.Decision
	err := p.DecideInto(s, r, &d)
	return d, err
}

// DecideInto is Decide writing the decision to *d (which it overwrites
// entirely) instead of returning it, for callers that keep decisions in
// place: it spares copying the decision through the stack.
func (p *Params) DecideInto(s *State, r Request, d *floodgate.Decision) error {
	*d = floodgate.Decision{Limit: p.cap}
	if r.Cost < 1 {
		return floodgate.ErrInvalidCost
	}
	if r.Now < s.Last {
		return floodgate.ErrTimeBackwards
	}
	switch p.alg {
	case floodgate.TokenBucket, floodgate.GCRA, floodgate.LeakyBucket, floodgate.LeakyQueue:
		return p.decideRate(s, r, d)
	case floodgate.FixedWindow:
		return p.decideFixed(s, r, d)
	case floodgate.SlidingLog:
		return p.decideLog(s, r, d)
	case floodgate.SlidingWindow:
		return p.decideCounter(s, r, d)
	case floodgate.Concurrency:
		return p.decideConcurrency(s, r, d)
	case floodgate.Quota:
		return p.decideQuota(s, r, d)
	default:
		*d = floodgate.Decision{}
		return fmt.Errorf("algo: %w: params not compiled", floodgate.ErrInvalidLimit)
	}
}

// dur converts nanoseconds to a Duration, never below zero.
func dur(ns int64) time.Duration {
	if ns < 0 {
		return 0
	}
	return time.Duration(ns)
}

// SplitLimit is the per-instance limit when each of instances enforces a
// global limit on its own: global // instances (seed 002's split_limit).
// It returns global itself for fewer than one instance, and never less than
// zero.
func SplitLimit(global int64, instances int) int64 {
	if global <= 0 {
		return 0
	}
	if instances < 1 {
		return global
	}
	return global / int64(instances)
}
