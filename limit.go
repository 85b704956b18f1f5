package floodgate

import (
	"fmt"
	"iter"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Algorithm names a rate-limiting algorithm.
type Algorithm uint8

// The algorithms Floodgate implements. The zero value is not an algorithm.
const (
	TokenBucket   Algorithm = iota + 1 // burst first, then a steady rate; starts full
	GCRA                               // the token bucket's decisions, one timestamp per key
	LeakyBucket                        // a meter that polices at a smooth rate
	LeakyQueue                         // a shaper: delays requests to a smooth output
	FixedWindow                        // a count per clock window
	SlidingLog                         // exact count over the last window
	SlidingWindow                      // weighted count of two windows
	Concurrency                        // requests in flight
	Quota                              // a count per calendar period
)

// Family groups algorithms by the parameters they take and the state they
// keep: everything but the decision itself follows from the family.
type Family uint8

// Families of algorithms.
const (
	// FamilyRate algorithms take Rate per Per with a Burst and keep one
	// instant (a theoretical arrival time): they refill continuously.
	FamilyRate Family = iota + 1
	// FamilyWindow algorithms count up to Max per Window.
	FamilyWindow
	// FamilyConcurrency algorithms count up to Max leases in flight.
	FamilyConcurrency
	// FamilyQuota algorithms count up to Max per calendar Period.
	FamilyQuota
)

// Param is a set of a Limit's parameters, named as in configuration files.
type Param uint16

// Parameters of a Limit.
const (
	ParamRate      Param = 1 << iota // rate
	ParamPer                         // per
	ParamBurst                       // burst
	ParamDelay                       // delay (leaky queue)
	ParamMax                         // limit
	ParamWindow                      // window
	ParamLeaseTTL                    // lease_ttl
	ParamPeriod                      // period
	ParamTimeZone                    // time_zone
	ParamAnchorDay                   // anchor_day
	ParamOffset                      // offset
	ParamStart                       // start
	paramEnd

	// AllParams is the set of every parameter.
	AllParams = paramEnd - 1
)

var paramNames = [...]string{"rate", "per", "burst", "delay", "limit", "window", "lease_ttl", "period",
	"time_zone", "anchor_day", "offset", "start"}

// Has reports whether every parameter of q is in p.
func (p Param) Has(q Param) bool { return p&q == q }

// String returns the names of the parameters in p, comma-separated.
func (p Param) String() string {
	var b strings.Builder
	for i, name := range paramNames {
		if p&(1<<i) != 0 {
			if b.Len() > 0 {
				b.WriteString(", ")
			}
			b.WriteString(name)
		}
	}
	return b.String()
}

// Each yields the parameters of p one at a time, in order.
func (p Param) Each() iter.Seq[Param] {
	return func(yield func(Param) bool) {
		for q := Param(1); q < paramEnd; q <<= 1 {
			if p&q != 0 && !yield(q) {
				return
			}
		}
	}
}

// ParseParam returns the parameter with the given file name.
func ParseParam(s string) (Param, bool) {
	for i, name := range paramNames {
		if name == s {
			return 1 << i, true
		}
	}
	return 0, false
}

// Traits describe an algorithm to every part of Floodgate that is not the
// algorithm itself: validation, response fields, the stores, the decision
// services and the command line read them instead of listing algorithms.
type Traits struct {
	// Name is the algorithm's name in configuration files.
	Name string
	// Family says which parameters and state the algorithm has.
	Family Family
	// Kind says how a request the algorithm refuses is answered.
	Kind Kind
	// Params lists the Limit fields that apply; the others must be zero.
	Params Param
	// Refundable reports that a charge can be given back (a queued client
	// that left): the algorithm's whole state is one instant.
	Refundable bool
	// Leasable reports that a limit of the algorithm can be kept with
	// Leased consistency: units once taken stay taken until they come back
	// by themselves (a rate refilling, a window ending), and an instance
	// can give back what it did not spend.
	Leasable bool
}

// Continuous reports whether the algorithm refills continuously, so that
// the RateLimit t parameter is the time until one more unit is available
// rather than the time until a window resets.
func (t *Traits) Continuous() bool { return t.Family == FamilyRate }

// traits is the one table of algorithms, indexed by Algorithm. The
// algorithm ids are also written in store/redisstore's scripts, where a
// test holds them equal to these.
var traits = [...]Traits{
	TokenBucket: {Name: "token_bucket", Family: FamilyRate, Kind: KindRate,
		Params: ParamRate | ParamPer | ParamBurst, Refundable: true, Leasable: true},
	GCRA: {Name: "gcra", Family: FamilyRate, Kind: KindRate,
		Params: ParamRate | ParamPer | ParamBurst, Refundable: true, Leasable: true},
	LeakyBucket: {Name: "leaky_bucket", Family: FamilyRate, Kind: KindRate,
		Params: ParamRate | ParamPer | ParamBurst, Refundable: true, Leasable: true},
	LeakyQueue: {Name: "leaky_queue", Family: FamilyRate, Kind: KindQueue,
		Params: ParamRate | ParamPer | ParamBurst | ParamDelay, Refundable: true},
	FixedWindow: {Name: "fixed_window", Family: FamilyWindow, Kind: KindRate,
		Params: ParamMax | ParamWindow, Leasable: true},
	SlidingLog: {Name: "sliding_log", Family: FamilyWindow, Kind: KindRate,
		Params: ParamMax | ParamWindow},
	SlidingWindow: {Name: "sliding_window", Family: FamilyWindow, Kind: KindRate,
		Params: ParamMax | ParamWindow},
	Concurrency: {Name: "concurrency", Family: FamilyConcurrency, Kind: KindConcurrency,
		Params: ParamMax | ParamLeaseTTL},
	Quota: {Name: "quota", Family: FamilyQuota, Kind: KindQuota,
		Params: ParamMax | ParamPeriod | ParamTimeZone | ParamAnchorDay | ParamOffset | ParamStart},
}

// unknownTraits are the traits of a value that is not an algorithm.
var unknownTraits = Traits{Name: ""}

// Traits returns the algorithm's traits; a value that is not an algorithm
// has an empty Name and zero Family.
func (a Algorithm) Traits() *Traits {
	if a == 0 || int(a) >= len(traits) {
		return &unknownTraits
	}
	return &traits[a]
}

// String returns the algorithm's name as written in configuration files.
func (a Algorithm) String() string {
	if t := a.Traits(); t.Name != "" {
		return t.Name
	}
	return fmt.Sprintf("algorithm(%d)", uint8(a))
}

// Family returns the algorithm's family.
func (a Algorithm) Family() Family { return a.Traits().Family }

// Algorithms lists every algorithm in a stable order.
func Algorithms() []Algorithm {
	out := make([]Algorithm, 0, len(traits)-1)
	for a := TokenBucket; int(a) < len(traits); a++ {
		out = append(out, a)
	}
	return out
}

// AlgorithmList names, in order, the algorithms whose traits satisfy ok,
// as "a, b and c", for messages that say which algorithms can do
// something.
func AlgorithmList(ok func(*Traits) bool) string {
	var names []string
	for _, a := range Algorithms() {
		if ok(a.Traits()) {
			names = append(names, a.String())
		}
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// ParseAlgorithm returns the algorithm with the given name.
func ParseAlgorithm(s string) (Algorithm, error) {
	names := make([]string, 0, len(traits)-1)
	for a := TokenBucket; int(a) < len(traits); a++ {
		if traits[a].Name == s {
			return a, nil
		}
		names = append(names, traits[a].Name)
	}
	return 0, fmt.Errorf("%w: unknown algorithm %q (want one of %s)", ErrInvalidLimit, s,
		strings.Join(names, ", "))
}

// Kind classifies limits by how a request they refuse is answered.
type Kind uint8

// Kinds of limits. The zero value is not a kind.
const (
	// KindRate limits throttle: 429 Too Many Requests.
	KindRate Kind = iota + 1
	// KindQuota limits are calendar quotas: 429 Limit Exceeded.
	KindQuota
	// KindQueue limits (leaky queues) delay requests, refusing them only
	// when the queue is full.
	KindQueue
	// KindConcurrency limits count requests in flight; a lease is taken
	// by the check and released when the request is done.
	KindConcurrency
)

// String returns rate, quota, queue or concurrency.
func (k Kind) String() string {
	switch k {
	case KindRate:
		return "rate"
	case KindQuota:
		return "quota"
	case KindQueue:
		return "queue"
	case KindConcurrency:
		return "concurrency"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Kind returns the kind of limits the algorithm makes.
func (a Algorithm) Kind() Kind { return a.Traits().Kind }

// Period is a calendar period for quotas.
type Period uint8

// Calendar periods.
const (
	Day Period = iota + 1
	Week
	Month
)

// String returns "day", "week" or "month".
func (p Period) String() string {
	switch p {
	case Day:
		return "day"
	case Week:
		return "week"
	case Month:
		return "month"
	}
	return fmt.Sprintf("period(%d)", uint8(p))
}

// ParsePeriod accepts day, week or month in any case (AWS writes DAY).
func ParsePeriod(s string) (Period, error) {
	switch strings.ToLower(s) {
	case "day":
		return Day, nil
	case "week":
		return Week, nil
	case "month":
		return Month, nil
	}
	return 0, fmt.Errorf("%w: unknown period %q (want day, week or month)", ErrInvalidLimit, s)
}

// NoDelay as Limit.Delay lets every queued request of a leaky queue pass at
// once (NGINX's nodelay).
const NoDelay int64 = -1

// Limit describes one limit. Which fields matter depends on Algorithm:
//
//   - TokenBucket, GCRA, LeakyBucket: Rate units every Per, Burst units of capacity.
//   - LeakyQueue: Rate requests every Per leave the queue; Burst requests may
//     wait; the first Delay of them pass without waiting (NoDelay: all).
//   - FixedWindow, SlidingLog, SlidingWindow: Max units per Window.
//   - Concurrency: Max units in flight; a lease left by a holder that died
//     expires after LeaseTTL.
//   - Quota: Max units per calendar Period in Location, the month starting on
//     AnchorDay; Offset units are taken from the period that contains Start.
type Limit struct {
	Name      string
	Algorithm Algorithm

	Rate  int64
	Per   time.Duration
	Burst int64
	Delay int64

	Max      int64
	Window   time.Duration
	LeaseTTL time.Duration

	Period    Period
	Location  *time.Location
	AnchorDay int
	Offset    int64
	Start     time.Time
}

// Capacity returns the largest cost a single request can have: the burst
// of a rate limit (a queue holds one more, the request being served), else
// the maximum.
func (l *Limit) Capacity() int64 {
	t := l.Algorithm.Traits()
	switch {
	case t.Family != FamilyRate:
		return l.Max
	case t.Kind == KindQueue:
		return l.Burst + 1
	}
	return l.Burst
}

// Interval returns the emission interval Per/Rate in nanoseconds, the time
// one unit takes to refill or drain.
func (l *Limit) Interval() time.Duration {
	if l.Rate <= 0 {
		return 0
	}
	return l.Per / time.Duration(l.Rate)
}

// ParamError is a problem with one parameter of a limit. Limit.Validate,
// Limit.Problems and Limit.ValidateCost report their problems as
// ParamErrors, so that a file format can place each at the field that
// holds the parameter; errors.Is matches them to ErrInvalidLimit.
type ParamError struct {
	// Limit is the limit's name, or its algorithm's when it has none.
	Limit string
	// Param is the parameter whose value is wrong; zero when the problem is
	// the limit's as a whole (an unknown algorithm).
	Param Param
	// With are the other parameters the problem depends on, such as the
	// rate and per of a burst that overflows: where one of them is already
	// known to be wrong, the problem need not be told.
	With Param
	// Msg says what is wrong.
	Msg string
}

// Error returns "floodgate: invalid limit: NAME: MSG".
func (e *ParamError) Error() string {
	return ErrInvalidLimit.Error() + ": " + e.Limit + ": " + e.Msg
}

// Unwrap returns ErrInvalidLimit.
func (e *ParamError) Unwrap() error { return ErrInvalidLimit }

// Validate reports the first problem with the limit's parameters, a
// *ParamError, or nil.
func (l *Limit) Validate() error {
	if ps := l.Problems(); len(ps) > 0 {
		return ps[0]
	}
	return nil
}

// Problems returns every problem with the limit's parameters, in the order
// of the parameters. A check that reads a parameter with a problem is left
// out, so that one wrong value is reported once: a rate of 0 is not also
// "faster than one unit a nanosecond". These are the only rules of a
// limit's parameters; file formats convert and default values, then report
// these problems at their fields.
func (l *Limit) Problems() []*ParamError {
	c := checker{l: l}
	t := l.Algorithm.Traits()
	switch t.Family {
	case FamilyRate:
		if l.Rate <= 0 {
			c.fail(ParamRate, 0, "rate must be at least 1, got %d", l.Rate)
		}
		if l.Per <= 0 {
			c.fail(ParamPer, 0, "per must be a positive duration, got %s", l.Per)
		}
		if c.ok(ParamRate|ParamPer) && l.Per/time.Duration(l.Rate) <= 0 {
			c.fail(ParamRate, ParamPer, "rate %d per %s is faster than one unit a nanosecond", l.Rate, l.Per)
		}
		if t.Params.Has(ParamDelay) {
			if l.Burst < 0 {
				c.fail(ParamBurst, 0, "burst (the queue) must not be negative, got %d", l.Burst)
			}
			if l.Delay < NoDelay {
				c.fail(ParamDelay, 0, "delay must be nodelay (-1) or at least 0, got %d", l.Delay)
			}
		} else if l.Burst < 1 {
			c.fail(ParamBurst, 0, "burst must be at least 1, got %d", l.Burst)
		}
		if c.ok(ParamRate|ParamPer|ParamBurst) && bucketOverflows(l) {
			c.fail(ParamBurst, ParamRate|ParamPer, "burst %d at %d per %s overflows", l.Burst, l.Rate, l.Per)
		}
	case FamilyWindow:
		c.max()
		if l.Window <= 0 {
			c.fail(ParamWindow, 0, "window must be a positive duration, got %s", l.Window)
		} else if l.Window%time.Microsecond != 0 {
			// The Redis store keeps windows' boundaries in microseconds:
			// a window of a fraction of one would end there at another
			// instant than in process, and a limit decides alike on
			// every store.
			c.fail(ParamWindow, 0, "window must be a whole number of microseconds, got %s", l.Window)
		}
	case FamilyConcurrency:
		c.max()
		switch {
		case l.LeaseTTL < 0:
			c.fail(ParamLeaseTTL, 0, "lease ttl must not be negative, got %s", l.LeaseTTL)
		case l.LeaseTTL > MaxLeaseTTL:
			c.fail(ParamLeaseTTL, 0, "lease ttl must be at most %s (about 73 years), got %s", MaxLeaseTTL, l.LeaseTTL)
		case l.LeaseTTL%time.Microsecond != 0:
			c.fail(ParamLeaseTTL, 0, "lease ttl must be a whole number of microseconds, got %s", l.LeaseTTL)
		}
	case FamilyQuota:
		c.max()
		switch {
		case l.Period == 0:
			c.fail(ParamPeriod, 0, "period is required: day, week or month")
		case l.Period > Month:
			c.fail(ParamPeriod, 0, "period must be day, week or month, got %s", l.Period)
		}
		switch {
		case l.AnchorDay < 0 || l.AnchorDay > 31:
			c.fail(ParamAnchorDay, 0, "anchor day must be between 1 and 31, got %d", l.AnchorDay)
		case l.AnchorDay > 1 && c.ok(ParamPeriod) && l.Period != Month:
			c.fail(ParamAnchorDay, ParamPeriod, "an anchor day needs a monthly period")
		}
		switch {
		case l.Offset < 0:
			c.fail(ParamOffset, 0, "offset must not be negative, got %d", l.Offset)
		case c.ok(ParamMax) && l.Offset > l.Max:
			c.fail(ParamOffset, ParamMax, "offset must be between 0 and the limit %d, got %d", l.Max, l.Offset)
		case l.Offset > 0 && l.Start.IsZero():
			c.fail(ParamOffset, ParamStart, "an offset needs a start (the date of the first period)")
		}
	default:
		c.fail(0, 0, "unknown algorithm %d", uint8(l.Algorithm))
	}
	return c.problems
}

// bucketOverflows reports whether the whole bucket of a rate limit,
// (Burst+1)·Per/Rate, is too long to fit in an int64 with room to add a
// timestamp.
// MaxLeaseTTL is the longest lease a concurrency limit takes, about 73
// years: a lease's expiry is an instant in nanoseconds, and one further
// from now than a quarter of their range (the bound a bucket's span has
// too), in whole hours, could not be counted.
const MaxLeaseTTL = 640_511 * time.Hour

func bucketOverflows(l *Limit) bool {
	hi, lo := bits.Mul64(uint64(l.Burst+1), uint64(l.Per))
	if hi >= uint64(l.Rate) {
		return true
	}
	q, _ := bits.Div64(hi, lo, uint64(l.Rate))
	return q > math.MaxInt64/4
}

// ValidateCost reports, as a *ParamError at the parameter that holds the
// capacity, a cost one request takes that is more than the capacity of
// the limit: no such request could ever pass. It assumes a valid limit.
func (l *Limit) ValidateCost(cost int64) error {
	if cost <= l.Capacity() {
		return nil
	}
	p, v := ParamMax, l.Max
	if l.Algorithm.Family() == FamilyRate {
		p, v = ParamBurst, l.Burst
	}
	return &ParamError{Limit: l.displayName(), Param: p,
		Msg: fmt.Sprintf("%s %d is below the cost %d: no request could ever pass", p, v, cost)}
}

// displayName is the limit's name, or its algorithm's.
func (l *Limit) displayName() string {
	if l.Name != "" {
		return l.Name
	}
	return l.Algorithm.String()
}

// checker collects the problems of one limit.
type checker struct {
	l        *Limit
	problems []*ParamError
	bad      Param // the parameters with a problem
}

func (c *checker) fail(p, with Param, format string, args ...any) {
	c.problems = append(c.problems, &ParamError{Limit: c.l.displayName(), Param: p, With: with,
		Msg: fmt.Sprintf(format, args...)})
	c.bad |= p
}

// ok reports whether none of the parameters ps has a problem.
func (c *checker) ok(ps Param) bool { return c.bad&ps == 0 }

// max checks the limit of the counting families.
func (c *checker) max() {
	if c.l.Max < 1 {
		c.fail(ParamMax, 0, "limit must be at least 1, got %d", c.l.Max)
	}
}

// Describe renders the limit's parameters in words, such as "5 per 1s,
// burst 10" or "1000 per day (Europe/Paris)".
func (l *Limit) Describe() string {
	switch l.Algorithm.Family() {
	case FamilyRate:
		if !l.Algorithm.Traits().Params.Has(ParamDelay) {
			return fmt.Sprintf("%d per %s, burst %d", l.Rate, shortDuration(l.Per), l.Burst)
		}
		delay := strconv.FormatInt(l.Delay, 10)
		if l.Delay == NoDelay {
			delay = "nodelay"
		}
		return fmt.Sprintf("%d per %s, queue %d, delay %s", l.Rate, shortDuration(l.Per), l.Burst, delay)
	case FamilyWindow:
		return fmt.Sprintf("%d per %s", l.Max, shortDuration(l.Window))
	case FamilyConcurrency:
		s := fmt.Sprintf("%d in flight", l.Max)
		if l.LeaseTTL > 0 {
			s += ", lease " + shortDuration(l.LeaseTTL)
		}
		return s
	case FamilyQuota:
		zone := "UTC"
		if l.Location != nil {
			zone = l.Location.String()
		}
		s := fmt.Sprintf("%d per %s (%s)", l.Max, l.Period, zone)
		if l.AnchorDay > 1 {
			s += fmt.Sprintf(", from day %d", l.AnchorDay)
		}
		if l.Offset > 0 {
			s += fmt.Sprintf(", offset %d from %s", l.Offset, l.Start.Format(time.DateOnly))
		}
		return s
	}
	return l.Algorithm.String()
}

// shortDuration writes 1s, 5m, 1h30m rather than 5m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
