package client

import (
	"strings"
	"time"

	"github.com/floodgate/floodgate/internal/sfv"
)

// quotaField is what an answer said about one policy: its RateLimit item
// joined with the RateLimit-Policy item of the same name.
type quotaField struct {
	name string
	// r is the remaining units the server reported.
	r int64
	// t is the time until more quota is available; hasT is false when the
	// item has no t.
	t    time.Duration
	hasT bool
	// q and w are the policy's quota and window, 0 when not given.
	q int64
	w time.Duration
}

// answerFields is what the pacer learns from one answer, whatever the
// protocol carried it.
type answerFields struct {
	// refused reports a refusal that asks the caller to slow down (HTTP
	// 429 or 503, gRPC RESOURCE_EXHAUSTED or UNAVAILABLE).
	refused bool
	// retryAfter is the Retry-After (or RetryInfo) of a refusal; hasRetry
	// is false when there was none.
	retryAfter time.Duration
	hasRetry   bool
	// quotas are the RateLimit items, each with its policy's quota.
	quotas []quotaField
}

// maxFieldSeconds caps t and w: the draft's Integers have at most 15
// digits, far past any useful wait; a year keeps the arithmetic safe.
const maxFieldSeconds = 365 * 24 * 3600

// maxFieldBytes bounds the RateLimit and RateLimit-Policy fields read: a
// longer field is ignored as a whole, so that a server cannot make the
// client spend unbounded time and memory parsing it. Sixteen policies
// with long names take far less.
const maxFieldBytes = 8 << 10

// parseQuotas reads the RateLimit and RateLimit-Policy fields
// (draft-ietf-httpapi-ratelimit-headers, RFC 9651 Lists of Items), each
// given as its field lines. A malformed field, or one longer than
// maxFieldBytes, is ignored as a whole, as the draft asks for a malformed
// one; so is an item without a String name or without a non-negative
// Integer r. At most max items are kept.
func parseQuotas(rateLimit, policy []string, max int) []quotaField {
	if len(rateLimit) == 0 || fieldLen(rateLimit) > maxFieldBytes {
		return nil
	}
	items, err := sfv.ParseList(strings.Join(rateLimit, ", "))
	if err != nil || len(items) == 0 {
		return nil
	}
	var pols []sfv.Item
	if len(policy) > 0 && fieldLen(policy) <= maxFieldBytes {
		pols, _ = sfv.ParseList(strings.Join(policy, ", ")) // malformed: no quotas known
	}
	var out []quotaField
	for i := range items {
		it := &items[i]
		name, ok := it.Name()
		if !ok {
			continue
		}
		r, ok := it.Int("r")
		if !ok || r < 0 {
			continue
		}
		f := quotaField{name: name, r: r}
		if t, ok := it.Int("t"); ok && t >= 0 {
			f.t, f.hasT = time.Duration(min(t, maxFieldSeconds))*time.Second, true
		}
		for j := range pols {
			if n, ok := pols[j].Name(); !ok || n != name {
				continue
			}
			if q, ok := pols[j].Int("q"); ok && q >= 0 {
				f.q = q
			}
			if w, ok := pols[j].Int("w"); ok && w > 0 {
				f.w = time.Duration(min(w, maxFieldSeconds)) * time.Second
			}
			break
		}
		out = append(out, f)
		if len(out) == max {
			break
		}
	}
	return out
}

// fieldLen returns the length of a field's lines joined with ", ".
func fieldLen(lines []string) int {
	n := 2 * (len(lines) - 1)
	for _, l := range lines {
		n += len(l)
	}
	return n
}
