package gateway

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate"
)

// continuous reports whether the algorithm refills continuously, so that
// the RateLimit t parameter is the time until one more unit is available
// rather than the time until the window resets.
func continuous(a floodgate.Algorithm) bool {
	return a.Traits().Continuous()
}

// LimitHeader is the precomputed, per-limit part of the response fields: the
// limit's RateLimit-Policy item and the pieces of its RateLimit item. Build
// one per limit with NewLimitHeader and reuse it for every response.
type LimitHeader struct {
	// Name is the limit's name as it appears in the fields (sanitized to
	// printable ASCII).
	Name string
	// Kind is the limit's kind.
	Kind floodgate.Kind
	// Quota is the q parameter: the limit's capacity in units.
	Quota int64
	// Window is the w parameter in whole seconds, 0 when omitted.
	Window int64

	algorithm floodgate.Algorithm
	interval  time.Duration
	id        uint64 // set by the Gateway that caches it, for its policy cache
	policy    string // `"name";q=5;w=1`
	item      string // `"name"`
}

// NewLimitHeader precomputes the header pieces of a limit.
//
// The RateLimit-Policy item of a limit is its name with q = the capacity
// (the burst of a bucket, the size of a window or quota, the number of
// requests in flight of a concurrency limit) and w = the time the capacity
// is measured over: the window; the time a bucket takes to refill
// completely (at least one second); 86400 or 604800 for daily and weekly
// quotas (monthly quotas have no fixed length and omit w). A concurrency
// limit has qu="concurrent-requests" and no w.
func NewLimitHeader(l *floodgate.Limit) *LimitHeader {
	h := &LimitHeader{
		Name:      sanitizeName(l.Name),
		Kind:      l.Algorithm.Kind(),
		Quota:     l.Capacity(),
		algorithm: l.Algorithm,
		interval:  l.Interval(),
	}
	switch l.Algorithm.Family() {
	case floodgate.FamilyRate:
		h.Window = ceilSeconds(time.Duration(h.Quota) * h.interval)
		if h.Window < 1 {
			h.Window = 1
		}
	case floodgate.FamilyWindow:
		h.Window = max(1, ceilSeconds(l.Window))
	case floodgate.FamilyQuota:
		switch l.Period {
		case floodgate.Day:
			h.Window = 86400
		case floodgate.Week:
			h.Window = 7 * 86400
		}
	}
	h.item = quoteString(h.Name)
	var b strings.Builder
	b.WriteString(h.item)
	b.WriteString(";q=")
	b.WriteString(strconv.FormatInt(h.Quota, 10))
	if h.Kind == floodgate.KindConcurrency {
		b.WriteString(`;qu="concurrent-requests"`)
	} else if h.Window > 0 {
		b.WriteString(";w=")
		b.WriteString(strconv.FormatInt(h.Window, 10))
	}
	h.policy = b.String()
	return h
}

// PolicyItem returns the limit's RateLimit-Policy item, e.g.
// `"stage-dev";q=5;w=1`.
func (h *LimitHeader) PolicyItem() string { return h.policy }

// Reset returns the RateLimit t parameter for a decision of this limit: for
// window algorithms and quotas the seconds until the window resets, rounded
// up; for continuous algorithms (buckets, GCRA, leaky queue) the seconds
// until one more unit than Remaining is available, rounded up. ok is false
// when t is omitted: the limit is full (nothing used) or it is a
// concurrency limit.
func (h *LimitHeader) Reset(d *floodgate.Decision) (t int64, ok bool) {
	if h.Kind == floodgate.KindConcurrency || d.Remaining >= d.Limit || d.ResetAfter <= 0 {
		return 0, false
	}
	if !continuous(h.algorithm) {
		return ceilSeconds(d.ResetAfter), true
	}
	// ResetAfter is the time until the bucket is full again: (Limit - tokens)
	// intervals, where Remaining = floor(tokens). One more unit than
	// Remaining arrives (Limit - Remaining - 1) intervals before that.
	wait := d.ResetAfter
	if rest := d.Limit - d.Remaining - 1; rest > 0 && h.interval > 0 {
		if rest > int64(wait/h.interval) {
			wait = 0
		} else {
			wait -= time.Duration(rest) * h.interval
		}
	}
	if wait < 0 {
		wait = 0
	}
	return ceilSeconds(wait), true
}

// appendItem appends the limit's RateLimit item for a decision, e.g.
// `"stage-dev";r=0;t=1`, and returns the t it used (-1 when omitted).
func (h *LimitHeader) appendItem(dst []byte, d *floodgate.Decision) ([]byte, int64) {
	dst = append(dst, h.item...)
	dst = append(dst, ";r="...)
	r := d.Remaining
	if r < 0 {
		r = 0
	}
	dst = strconv.AppendInt(dst, r, 10)
	t, ok := h.Reset(d)
	if !ok {
		return dst, -1
	}
	dst = append(dst, ";t="...)
	dst = strconv.AppendInt(dst, t, 10)
	return dst, t
}

// Covered is one limit that covered a request, with its decision.
type Covered struct {
	Header   *LimitHeader
	Decision floodgate.Decision
}

// HeaderOptions are the switches for the response fields. The zero value
// writes only the IETF RateLimit-Policy and RateLimit fields.
type HeaderOptions struct {
	// Legacy adds X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset for the binding (first) limit. X-RateLimit-Reset is
	// a delay in seconds (the RateLimit t), not an epoch time.
	Legacy bool
	// LimitName, when not empty, is the name of a field that carries the
	// binding limit's name (e.g. Floodgate-Limit), for debugging.
	LimitName string
}

// Canonical field names, precomputed so that setting them allocates nothing
// for the name.
const (
	fieldPolicy       = "Ratelimit-Policy"
	fieldRateLimit    = "Ratelimit"
	fieldRetryAfter   = "Retry-After"
	fieldLegacyLimit  = "X-Ratelimit-Limit"
	fieldLegacyRemain = "X-Ratelimit-Remaining"
	fieldLegacyReset  = "X-Ratelimit-Reset"
	fieldContentType  = "Content-Type"
)

// SetRateLimit writes the RateLimit-Policy and RateLimit fields for the
// limits that covered a request into h, the binding limit first (items[0]
// must be the binding limit; the caller orders the rest most specific
// first). An item whose name already appeared is left out, so names stay
// unique. It returns the binding limit's t (-1 when omitted). buf is
// scratch space and may be nil.
func SetRateLimit(h http.Header, items []Covered, opts *HeaderOptions, buf []byte) int64 {
	if len(items) == 0 {
		return -1
	}
	buf = appendPolicy(buf[:0], items)
	t, _ := setFields(h, string(buf), items, opts, buf)
	return t
}

// appendPolicy appends the RateLimit-Policy value of items.
func appendPolicy(dst []byte, items []Covered) []byte {
	start := len(dst)
	for i := range items {
		if dup(items, i) {
			continue
		}
		if len(dst) > start {
			dst = append(dst, ", "...)
		}
		dst = append(dst, items[i].Header.policy...)
	}
	return dst
}

// setFields writes the fields given the RateLimit-Policy value, using buf
// as scratch space; it returns the binding limit's t and the buffer.
func setFields(h http.Header, policy string, items []Covered, opts *HeaderOptions, buf []byte) (int64, []byte) {
	rl := buf[:0]
	var firstT int64 = -1
	for i := range items {
		if dup(items, i) {
			continue
		}
		if len(rl) > 0 {
			rl = append(rl, ", "...)
		}
		var t int64
		rl, t = items[i].Header.appendItem(rl, &items[i].Decision)
		if i == 0 {
			firstT = t
		}
	}
	// One allocation holds both values.
	vals := make([]string, 2)
	vals[0], vals[1] = policy, string(rl)
	h[fieldPolicy] = vals[0:1:1]
	h[fieldRateLimit] = vals[1:2:2]
	if opts != nil {
		if opts.Legacy {
			first := &items[0]
			legacy := make([]string, 3)
			legacy[0] = strconv.FormatInt(first.Header.Quota, 10)
			legacy[1] = strconv.FormatInt(max(0, first.Decision.Remaining), 10)
			legacy[2] = strconv.FormatInt(max(0, firstT), 10)
			h[fieldLegacyLimit] = legacy[0:1:1]
			h[fieldLegacyRemain] = legacy[1:2:2]
			h[fieldLegacyReset] = legacy[2:3:3]
		}
		if opts.LimitName != "" {
			h.Set(opts.LimitName, items[0].Header.Name)
		}
	}
	return firstT, rl
}

// dup reports whether items[i] has the name of an earlier item.
func dup(items []Covered, i int) bool {
	for j := 0; j < i; j++ {
		if items[j].Header.Name == items[i].Header.Name {
			return true
		}
	}
	return false
}

// RetryAfterSeconds returns the Retry-After value of a 429: the wait rounded
// up to whole seconds, at least 1 and at least minT (the largest RateLimit
// t of the response, so that Retry-After never points earlier than t).
func RetryAfterSeconds(wait time.Duration, minT int64) int64 {
	s := ceilSeconds(wait)
	if s < 1 {
		s = 1
	}
	if minT > s {
		s = minT
	}
	return s
}

// The JSON bodies, as API Gateway writes them.
var (
	bodyTooMany   = []byte(`{"message":"Too Many Requests"}` + "\n")
	bodyExceeded  = []byte(`{"message":"Limit Exceeded"}` + "\n")
	bodyForbidden = []byte(`{"message":"Forbidden"}` + "\n")
	jsonType      = []string{"application/json"}
	smallInts     = func() [128][]string {
		var a [128][]string
		for i := range a {
			a[i] = []string{strconv.Itoa(i)}
		}
		return a
	}()
)

// WriteTooMany answers 429 Too Many Requests with Retry-After and the JSON
// body {"message":"Limit Exceeded"} when quota is true (a quota is used
// up), else {"message":"Too Many Requests"}. Any RateLimit fields must be
// set on w.Header() before the call.
func WriteTooMany(w http.ResponseWriter, retryAfter int64, quota bool) {
	h := w.Header()
	if retryAfter >= 0 && retryAfter < int64(len(smallInts)) {
		h[fieldRetryAfter] = smallInts[retryAfter]
	} else {
		h[fieldRetryAfter] = []string{strconv.FormatInt(retryAfter, 10)}
	}
	body := bodyTooMany
	if quota {
		body = bodyExceeded
	}
	writeJSON(w, http.StatusTooManyRequests, body)
}

// WriteForbidden answers 403 {"message":"Forbidden"}, the answer to a
// missing or unknown API key on a route that requires one.
func WriteForbidden(w http.ResponseWriter) {
	writeJSON(w, http.StatusForbidden, bodyForbidden)
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h[fieldContentType] = jsonType
	h["Content-Length"] = smallIntOr(len(body))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func smallIntOr(n int) []string {
	if n >= 0 && n < len(smallInts) {
		return smallInts[n]
	}
	return []string{strconv.Itoa(n)}
}

// ceilSeconds rounds a duration up to whole seconds (0 for d ≤ 0).
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// sanitizeName keeps the printable ASCII of a name so that it can be an
// RFC 9651 String; an empty result becomes "limit".
func sanitizeName(s string) string {
	ok := true
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			ok = false
			break
		}
	}
	if ok && s != "" {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x20 && s[i] <= 0x7e {
			b.WriteByte(s[i])
		}
	}
	if b.Len() == 0 {
		return "limit"
	}
	return b.String()
}

// quoteString returns s as an RFC 9651 String ("..." with \ and " escaped);
// s must be printable ASCII.
func quoteString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}
