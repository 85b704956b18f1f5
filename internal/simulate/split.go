package simulate

import (
	"math"

	"github.com/floodgate/floodgate/algo"
)

// wronglyDenied counts the requests that independent per-instance limits
// (SplitLimit) deny although the global total is within the global limit:
// the sum over instances of max(0, count - SplitLimit(global, n)) when the
// sum of counts is at most global, else 0 (seed 002's wrongly_denied).
// Negative counts are treated as 0.
func wronglyDenied(global int64, counts []int64) int64 {
	var total int64
	for _, c := range counts {
		if c > 0 {
			if total > math.MaxInt64-c {
				return 0 // far over any global limit
			}
			total += c
		}
	}
	if total > global || len(counts) == 0 {
		return 0
	}
	per := algo.SplitLimit(global, len(counts))
	var wrong int64
	for _, c := range counts {
		if c > per {
			wrong += c - per
		}
	}
	return wrong
}
