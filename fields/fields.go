package fields

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/intern"
	"github.com/floodgate/floodgate/limiter"
)

// Names of the fields, as the IETF draft and RFC 9110 write them.
const (
	NamePolicy          = "RateLimit-Policy"
	NameRateLimit       = "RateLimit"
	NameRetryAfter      = "Retry-After"
	NameLegacyLimit     = "X-RateLimit-Limit"
	NameLegacyRemaining = "X-RateLimit-Remaining"
	NameLegacyReset     = "X-RateLimit-Reset"
)

// Field is one response field.
type Field struct {
	Name  string
	Value string
}

// Options switch the optional fields. The zero value writes the IETF
// RateLimit-Policy and RateLimit fields (and Retry-After on a denial).
type Options struct {
	// NoRateLimit leaves out RateLimit-Policy and RateLimit. Retry-After
	// is still written on a denial.
	NoRateLimit bool
	// Legacy adds X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset for the binding limit. X-RateLimit-Reset is a
	// delay in seconds (the RateLimit t), not an epoch time.
	Legacy bool
	// LimitName, when not empty, is the name of a field that carries the
	// binding limit's name (e.g. Floodgate-Limit), on denials only: a
	// debugging aid that says which limit refused a request.
	LimitName string
}

// ids numbers Limits, for the RateLimit-Policy cache.
var ids atomic.Uint64

// Limit is the precomputed, per-limit part of the fields: the limit's
// RateLimit-Policy item and the pieces of its RateLimit item. Policies
// make one per limit when they are compiled; it is immutable.
type Limit struct {
	// Name is the limit's name as it appears in the fields (printable
	// ASCII only, at most MaxNameLen bytes once quoted: see NewLimit).
	Name string
	// Kind is the limit's kind.
	Kind floodgate.Kind
	// Quota is the q parameter: the limit's capacity in units.
	Quota int64
	// Window is the w parameter in whole seconds, 0 when omitted.
	Window int64

	continuous bool
	rate       uint64 // Rate and Per of a continuous limit: its interval is Per/Rate
	per        uint64
	id         uint64
	policy     string // `"name";q=5;w=1`
	item       string // `"name"`
}

// NewLimit precomputes the fields of a limit.
//
// The RateLimit-Policy item of a limit is its name with q = the capacity
// (the burst of a bucket, the size of a window or quota, the number of
// requests in flight of a concurrency limit) and w = the time the capacity
// is measured over: the window; the time a bucket takes to refill
// completely (at least one second); 86400 or 604800 for daily and weekly
// quotas (monthly quotas have no fixed length and omit w). A concurrency
// limit has qu="concurrent-requests" and no w.
//
// A name longer than MaxNameLen bytes, its quotes and backslashes counted
// twice as the fields escape them (e.g. one an Envoy RLS request built
// from a descriptor value of a megabyte), is told by a short stable form:
// its first bytes, "~" and a hash of the whole name (see shortName).
func NewLimit(l *floodgate.Limit) *Limit {
	t := l.Algorithm.Traits()
	h := &Limit{
		Name:       shortName(sanitizeName(l.Name)),
		Kind:       t.Kind,
		Quota:      l.Capacity(),
		continuous: t.Continuous(),
		id:         ids.Add(1),
	}
	if l.Rate > 0 && l.Per > 0 {
		h.rate, h.per = uint64(l.Rate), uint64(l.Per)
	}
	h.Window = WindowSeconds(l)
	h.item = quoteString(h.Name)
	var b strings.Builder
	b.WriteString(h.item)
	b.WriteString(";q=")
	b.WriteString(strconv.FormatInt(sfInt(h.Quota), 10))
	if h.Kind == floodgate.KindConcurrency {
		b.WriteString(`;qu="concurrent-requests"`)
	} else if h.Window > 0 {
		b.WriteString(";w=")
		b.WriteString(strconv.FormatInt(sfInt(h.Window), 10))
	}
	h.policy = b.String()
	return h
}

// ForRule precomputes the fields of a rule's limit.
func ForRule(r *limiter.Rule) *Limit {
	l := r.Limit()
	return NewLimit(&l)
}

// Window is the limit's nominal window: the time a rate limit takes to
// refill its capacity (at least one second), a window, or a quota's period
// (a month counts as 30 days); 0 for concurrency.
func Window(l *floodgate.Limit) time.Duration {
	switch l.Algorithm.Family() {
	case floodgate.FamilyRate:
		if l.Rate <= 0 {
			return 0
		}
		w := mulDivDuration(l.Per, l.Capacity(), l.Rate)
		return max(w, time.Second)
	case floodgate.FamilyWindow:
		return l.Window
	case floodgate.FamilyQuota:
		switch l.Period {
		case floodgate.Day:
			return 24 * time.Hour
		case floodgate.Week:
			return 7 * 24 * time.Hour
		case floodgate.Month:
			return 30 * 24 * time.Hour
		}
	}
	return 0
}

// WindowSeconds is the w parameter of a limit's RateLimit-Policy item:
// Window rounded up to whole seconds, except that monthly quotas (no fixed
// length) and concurrency limits have none (0).
func WindowSeconds(l *floodgate.Limit) int64 {
	if l.Algorithm.Family() == floodgate.FamilyQuota && l.Period == floodgate.Month {
		return 0
	}
	return ceilSeconds(Window(l))
}

// mulDivDuration is d·n/m, saturating instead of overflowing.
func mulDivDuration(d time.Duration, n, m int64) time.Duration {
	if n <= 0 || m <= 0 || d <= 0 {
		return 0
	}
	f := float64(d) * float64(n) / float64(m)
	if f >= float64(1<<62) {
		return 1 << 62
	}
	return time.Duration(f)
}

// PolicyItem returns the limit's RateLimit-Policy item, e.g.
// `"stage-dev";q=5;w=1`.
func (h *Limit) PolicyItem() string { return h.policy }

// Reset returns the RateLimit t parameter for a decision of this limit: for
// window algorithms and quotas the seconds until the window resets, rounded
// up; for continuous algorithms (buckets, GCRA, leaky queue) the seconds
// until one more unit than Remaining is available, rounded up. ok is false
// when t is omitted: the limit is full (nothing used) or it is a
// concurrency limit.
func (h *Limit) Reset(d *floodgate.Decision) (t int64, ok bool) {
	if h.Kind == floodgate.KindConcurrency || d.Remaining >= d.Limit || d.ResetAfter <= 0 {
		return 0, false
	}
	if !h.continuous {
		return ceilSeconds(d.ResetAfter), true
	}
	// ResetAfter is the time until the bucket is full again: (Limit - tokens)
	// intervals, where Remaining = floor(tokens). One more unit than
	// Remaining arrives (Limit - Remaining - 1) intervals before that.
	wait := d.ResetAfter
	if rest := d.Limit - d.Remaining - 1; rest > 0 && h.rate > 0 {
		wait -= h.intervals(uint64(rest), uint64(wait))
	}
	return ceilSeconds(max(wait, 0)), true
}

// intervals returns n intervals of the limit (n·Per/Rate) in nanoseconds,
// rounded up, or atMost when that is less. An interval cut to whole
// nanoseconds would put n of them up to n nanoseconds short, and the
// wait left after them that long over: one second over when the wait is
// a whole number of seconds. ResetAfter being rounded up too, the wait
// left is then within a nanosecond of the exact one.
func (h *Limit) intervals(n, atMost uint64) time.Duration {
	hi, lo := bits.Mul64(n, h.per)
	if hi >= h.rate {
		return time.Duration(atMost) // the quotient is past 64 bits
	}
	q, r := bits.Div64(hi, lo, h.rate)
	if r > 0 && q < math.MaxUint64 {
		q++
	}
	return time.Duration(min(q, atMost))
}

// appendItem appends the limit's RateLimit item for a decision, e.g.
// `"stage-dev";r=0;t=1`, and returns the t it used (-1 when omitted).
func (h *Limit) appendItem(dst []byte, d *floodgate.Decision) ([]byte, int64) {
	dst = append(dst, h.item...)
	dst = append(dst, ";r="...)
	dst = strconv.AppendInt(dst, sfInt(max(d.Remaining, 0)), 10)
	t, ok := h.Reset(d)
	if !ok {
		return dst, -1
	}
	dst = append(dst, ";t="...)
	dst = strconv.AppendInt(dst, sfInt(t), 10)
	return dst, t
}

// maxSFInt is the largest Integer a structured field holds (RFC 9651
// §3.3.1: at most 15 digits). A client's parser refuses a whole field
// with a longer one.
const maxSFInt = 999_999_999_999_999

// sfInt is v as a field's Integer: a quota, a count or a number of seconds
// past what one holds (a limit written as 9223372036854775807 for "no
// limit") is told as the largest there is.
func sfInt(v int64) int64 { return min(v, maxSFInt) }

// Item is one limit that covered an answer, with its decision.
type Item struct {
	Limit    *Limit
	Decision floodgate.Decision
	// Group, when not 0, is the group of hits (limiter.Hit.Group) the
	// limit was decided in: a group stops a request only when all of its
	// limits deny, and one of them passing lets it through.
	Group uint8
}

// AppendResult appends to items the hits of res that a client is told
// about: every hit that is not in shadow mode, limits[i] describing hit i.
// It returns items and the index in them of res's binding hit (-1 when it
// is not among them).
func AppendResult(items []Item, res *limiter.Result, limits []*Limit) ([]Item, int) {
	binding := -1
	for i := range res.Decisions {
		if res.Flags[i]&limiter.Shadow != 0 || i >= len(limits) {
			continue
		}
		if i == res.Binding {
			binding = len(items)
		}
		items = append(items, Item{Limit: limits[i], Decision: res.Decisions[i]})
	}
	return items, binding
}

// Renderer renders the fields of answers. It keeps a small, fixed-size
// cache of RateLimit-Policy values (which depend only on the limits
// listed) and is safe for concurrent use; a front end keeps one.
type Renderer struct {
	policies [256]atomic.Pointer[policyEntry]
	bufs     sync.Pool // *[]byte
	// values holds RateLimit values that come back: a client refused
	// again and again gets the same value for a second at a time.
	values intern.Table
}

// policyEntry is one cached RateLimit-Policy value: the limits, in order,
// and the field they make.
type policyEntry struct {
	ids   []uint64
	value string
}

// Render appends to dst the fields of one answer. items are the limits that
// covered the request, most specific first; binding is the index of the
// binding limit among them (the first denying one, or the one with the
// fewest units left), which is listed first; a later item with the name of
// an earlier one is left out. On a denial Retry-After is added: retryAfter
// rounded up to whole seconds, at least 1 and at least the t of every
// denying limit that stops the request, so that it never points earlier
// than the RateLimit field: a limit outside a group, and of a group all of
// whose limits deny, the one with the shortest t (Item.Group).
// With no items only a denial's Retry-After is written.
func (rd *Renderer) Render(dst []Field, items []Item, binding int, denied bool, retryAfter time.Duration, opts *Options) []Field {
	if opts == nil {
		opts = &Options{}
	}
	if binding < 0 || binding >= len(items) {
		binding = 0
	}
	var bindingT, maxT int64 = -1, -1
	if len(items) > 0 {
		bp, _ := rd.bufs.Get().(*[]byte)
		if bp == nil {
			bp = new([]byte)
		}
		rl := (*bp)[:0]
		for k := -1; k < len(items); k++ {
			i := k
			if k < 0 {
				i = binding
			} else if k == binding || dupName(items, binding, k) {
				continue
			}
			if len(rl) > 0 {
				rl = append(rl, ", "...)
			}
			var t int64
			rl, t = items[i].Limit.appendItem(rl, &items[i].Decision)
			if k < 0 {
				bindingT = t
			}
			if !items[i].Decision.Allowed && items[i].Group == 0 {
				maxT = max(maxT, t)
			}
		}
		if !opts.NoRateLimit {
			dst = append(dst, Field{NamePolicy, rd.policy(items, binding)}, Field{NameRateLimit, rd.values.String(rl)})
		}
		if cap(rl) <= 4096 {
			// The pointer goes back with the buffer, so that putting it
			// back allocates nothing.
			*bp = rl[:0]
			rd.bufs.Put(bp)
		}
		if opts.Legacy {
			b := &items[binding]
			dst = append(dst,
				Field{NameLegacyLimit, Itoa(b.Limit.Quota)},
				Field{NameLegacyRemaining, Itoa(max(0, b.Decision.Remaining))},
				Field{NameLegacyReset, Itoa(max(0, bindingT))})
		}
		if denied && opts.LimitName != "" {
			dst = append(dst, Field{opts.LimitName, items[binding].Limit.Name})
		}
	}
	if denied {
		maxT = max(maxT, groupsT(items))
		dst = append(dst, Field{NameRetryAfter, Itoa(RetryAfterSeconds(retryAfter, maxT))})
	}
	return dst
}

// groupsT returns the t that the groups of items all of whose limits deny
// bound Retry-After by: for each such group its shortest t (the first of
// its limits to pass lets the request through), the longest of those; -1
// when no group is all denied.
func groupsT(items []Item) int64 {
	out := int64(-1)
	for i := range items {
		g := items[i].Group
		if g == 0 || firstOfGroup(items, i) != i {
			continue
		}
		least, all := int64(-1), true
		for j := i; j < len(items); j++ {
			if items[j].Group != g {
				continue
			}
			if items[j].Decision.Allowed {
				all = false
				break
			}
			t, _ := items[j].Limit.Reset(&items[j].Decision)
			if least < 0 || t < least {
				least = t
			}
		}
		if all {
			out = max(out, least)
		}
	}
	return out
}

// firstOfGroup returns the index of the first item of items[i]'s group.
func firstOfGroup(items []Item, i int) int {
	for j := 0; j < i; j++ {
		if items[j].Group == items[i].Group {
			return j
		}
	}
	return i
}

// dupName reports whether items[k] has the name of the binding item or of
// an item listed before it.
func dupName(items []Item, binding, k int) bool {
	name := items[k].Limit.Name
	if items[binding].Limit.Name == name {
		return true
	}
	for j := 0; j < k; j++ {
		if j != binding && items[j].Limit.Name == name {
			return true
		}
	}
	return false
}

// policy returns the RateLimit-Policy value of items listed binding first.
// The value depends only on which limits are listed in which order, so it
// is cached in a small table indexed by a hash of the limits; a collision
// builds the value again.
func (rd *Renderer) policy(items []Item, binding int) string {
	var hash uint64 = 14695981039346656037
	mix := func(id uint64) {
		hash ^= id
		hash *= 1099511628211
	}
	mix(items[binding].Limit.id)
	for i := range items {
		if i != binding {
			mix(items[i].Limit.id)
		}
	}
	slot := &rd.policies[hash%uint64(len(rd.policies))]
	if e := slot.Load(); e != nil && len(e.ids) == len(items) && e.ids[0] == items[binding].Limit.id {
		same, k := true, 1
		for i := range items {
			if i == binding {
				continue
			}
			if e.ids[k] != items[i].Limit.id {
				same = false
				break
			}
			k++
		}
		if same {
			return e.value
		}
	}
	e := &policyEntry{ids: make([]uint64, 0, len(items))}
	var b []byte
	for k := -1; k < len(items); k++ {
		i := k
		if k < 0 {
			i = binding
		} else if k == binding {
			continue
		}
		e.ids = append(e.ids, items[i].Limit.id)
		if k >= 0 && dupName(items, binding, k) {
			continue
		}
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = append(b, items[i].Limit.policy...)
	}
	e.value = string(b)
	slot.Store(e)
	return e.value
}

// RetryAfterSeconds returns the Retry-After value of a denial: the wait
// rounded up to whole seconds, at least 1 and at least minT (the largest
// RateLimit t of the denying limits, so that Retry-After never points
// earlier than t).
func RetryAfterSeconds(wait time.Duration, minT int64) int64 {
	return max(ceilSeconds(wait), 1, minT)
}

// smallInts are the decimal strings of 0..127, so that the common values
// of the fields cost no allocation.
var smallInts = func() (a [128]string) {
	for i := range a {
		a[i] = strconv.Itoa(i)
	}
	return a
}()

// Itoa formats n in decimal, without allocating for small values.
func Itoa(n int64) string {
	if n >= 0 && n < int64(len(smallInts)) {
		return smallInts[n]
	}
	return strconv.FormatInt(n, 10)
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
	ok := s != ""
	for i := 0; i < len(s) && ok; i++ {
		ok = s[i] >= 0x20 && s[i] <= 0x7e
	}
	if ok {
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

// MaxNameLen is the longest limit name the fields tell as it is, in the
// bytes it takes in a field: a quote or backslash, escaped there, counts
// twice. 64 limits (an RLS request's most descriptors) of names this long,
// each in RateLimit-Policy and RateLimit, make about 35 KB of fields,
// under the 60 KiB Envoy allows response headers by default; names
// written in a configuration are far shorter.
const MaxNameLen = 256

// shortPrefixLen is how much of a long name shortName keeps.
const shortPrefixLen = MaxNameLen - 1 - 2*shortHashLen

// shortHashLen is the number of bytes of SHA-256 shortName writes, in hex.
const shortHashLen = 8

// shortName returns s when it takes at most MaxNameLen bytes in a field
// (quoteString), else the longest start of it that takes at most
// shortPrefixLen there, "~" and the first 8 bytes of its SHA-256 in hex:
// at most MaxNameLen bytes in a field, that stay the same from answer to
// answer, and that two long names sharing a prefix do not share. Counting
// the escapes keeps a name of quotes or backslashes (a request's values
// may hold them) from taking twice the room of a name of letters.
func shortName(s string) string {
	n, cut := 0, len(s)
	for i := 0; i < len(s); i++ {
		w := 1
		if s[i] == '"' || s[i] == '\\' {
			w = 2
		}
		if n+w > shortPrefixLen && cut == len(s) {
			cut = i
		}
		if n += w; n > MaxNameLen {
			sum := sha256.Sum256([]byte(s))
			return s[:cut] + "~" + hex.EncodeToString(sum[:shortHashLen])
		}
	}
	return s
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
