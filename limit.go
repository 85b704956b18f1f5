package floodgate

import (
	"fmt"
	"math"
	"math/bits"
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

var algorithmNames = [...]string{
	TokenBucket:   "token_bucket",
	GCRA:          "gcra",
	LeakyBucket:   "leaky_bucket",
	LeakyQueue:    "leaky_queue",
	FixedWindow:   "fixed_window",
	SlidingLog:    "sliding_log",
	SlidingWindow: "sliding_window",
	Concurrency:   "concurrency",
	Quota:         "quota",
}

// String returns the algorithm's name as written in configuration files.
func (a Algorithm) String() string {
	if a == 0 || int(a) >= len(algorithmNames) {
		return fmt.Sprintf("algorithm(%d)", uint8(a))
	}
	return algorithmNames[a]
}

// Algorithms lists every algorithm in a stable order.
func Algorithms() []Algorithm {
	out := make([]Algorithm, 0, len(algorithmNames)-1)
	for a := TokenBucket; int(a) < len(algorithmNames); a++ {
		out = append(out, a)
	}
	return out
}

// ParseAlgorithm returns the algorithm with the given name.
func ParseAlgorithm(s string) (Algorithm, error) {
	for a := TokenBucket; int(a) < len(algorithmNames); a++ {
		if algorithmNames[a] == s {
			return a, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown algorithm %q (want one of %s)", ErrInvalidLimit, s,
		strings.Join(algorithmNames[1:], ", "))
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
func (a Algorithm) Kind() Kind {
	switch a {
	case Quota:
		return KindQuota
	case LeakyQueue:
		return KindQueue
	case Concurrency:
		return KindConcurrency
	}
	return KindRate
}

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

// Capacity returns the largest cost a single request can have.
func (l *Limit) Capacity() int64 {
	switch l.Algorithm {
	case TokenBucket, GCRA, LeakyBucket:
		return l.Burst
	case LeakyQueue:
		return l.Burst + 1
	default:
		return l.Max
	}
}

// Interval returns the emission interval Per/Rate in nanoseconds, the time
// one unit takes to refill or drain.
func (l *Limit) Interval() time.Duration {
	if l.Rate <= 0 {
		return 0
	}
	return l.Per / time.Duration(l.Rate)
}

// Validate reports the first problem with the limit's parameters.
func (l *Limit) Validate() error {
	bad := func(format string, args ...any) error {
		name := l.Name
		if name == "" {
			name = l.Algorithm.String()
		}
		return fmt.Errorf("%w: %s: %s", ErrInvalidLimit, name, fmt.Sprintf(format, args...))
	}
	switch l.Algorithm {
	case TokenBucket, GCRA, LeakyBucket, LeakyQueue:
		if l.Rate <= 0 {
			return bad("rate must be at least 1, got %d", l.Rate)
		}
		if l.Per <= 0 {
			return bad("per must be a positive duration, got %s", l.Per)
		}
		if l.Per/time.Duration(l.Rate) <= 0 {
			return bad("rate %d per %s is faster than one unit a nanosecond", l.Rate, l.Per)
		}
		if l.Algorithm == LeakyQueue {
			if l.Burst < 0 {
				return bad("burst (queue size) must not be negative, got %d", l.Burst)
			}
			if l.Delay < NoDelay {
				return bad("delay must be -1 (nodelay) or at least 0, got %d", l.Delay)
			}
		} else if l.Burst < 1 {
			return bad("burst must be at least 1, got %d", l.Burst)
		}
		// The whole bucket, (Burst+1)·Per/Rate, must fit in an int64 with
		// room to add a timestamp.
		hi, lo := bits.Mul64(uint64(l.Burst+1), uint64(l.Per))
		if hi >= uint64(l.Rate) {
			return bad("burst %d at %d per %s overflows", l.Burst, l.Rate, l.Per)
		}
		if q, _ := bits.Div64(hi, lo, uint64(l.Rate)); q > math.MaxInt64/4 {
			return bad("burst %d at %d per %s overflows", l.Burst, l.Rate, l.Per)
		}
	case FixedWindow, SlidingLog, SlidingWindow:
		if l.Max < 1 {
			return bad("limit must be at least 1, got %d", l.Max)
		}
		if l.Window <= 0 {
			return bad("window must be a positive duration, got %s", l.Window)
		}
	case Concurrency:
		if l.Max < 1 {
			return bad("limit must be at least 1, got %d", l.Max)
		}
		if l.LeaseTTL < 0 {
			return bad("lease ttl must not be negative, got %s", l.LeaseTTL)
		}
	case Quota:
		if l.Max < 1 {
			return bad("limit must be at least 1, got %d", l.Max)
		}
		if l.Period < Day || l.Period > Month {
			return bad("period must be day, week or month")
		}
		if l.AnchorDay < 0 || l.AnchorDay > 31 {
			return bad("anchor day must be between 1 and 31, got %d", l.AnchorDay)
		}
		if l.AnchorDay > 1 && l.Period != Month {
			return bad("an anchor day needs period month")
		}
		if l.Offset < 0 || l.Offset > l.Max {
			return bad("offset must be between 0 and the limit %d, got %d", l.Max, l.Offset)
		}
		if l.Offset > 0 && l.Start.IsZero() {
			return bad("an offset needs a start time (the first period)")
		}
	default:
		return bad("unknown algorithm %d", uint8(l.Algorithm))
	}
	return nil
}
