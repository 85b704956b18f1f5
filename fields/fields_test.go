package fields

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/sfv"
)

func tokenBucket(name string, rate int64, per time.Duration, burst int64) *floodgate.Limit {
	return &floodgate.Limit{Name: name, Algorithm: floodgate.TokenBucket, Rate: rate, Per: per, Burst: burst}
}

func TestPolicyItems(t *testing.T) {
	t.Parallel()
	cases := []struct {
		l    floodgate.Limit
		want string
	}{
		{*tokenBucket("stage-dev", 5, time.Second, 5), `"stage-dev";q=5;w=1`},
		{*tokenBucket("partner-basic", 2, time.Second, 2), `"partner-basic";q=2;w=1`},
		{*tokenBucket("slow", 1, time.Minute, 10), `"slow";q=10;w=600`},
		{*tokenBucket("big", 10000, time.Second, 5000), `"big";q=5000;w=1`},
		{floodgate.Limit{Name: "win", Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Minute}, `"win";q=100;w=60`},
		{floodgate.Limit{Name: "half", Algorithm: floodgate.SlidingWindow, Max: 3, Window: 1500 * time.Millisecond}, `"half";q=3;w=2`},
		{floodgate.Limit{Name: "daily", Algorithm: floodgate.Quota, Max: 1000, Period: floodgate.Day}, `"daily";q=1000;w=86400`},
		{floodgate.Limit{Name: "weekly", Algorithm: floodgate.Quota, Max: 7, Period: floodgate.Week}, `"weekly";q=7;w=604800`},
		{floodgate.Limit{Name: "monthly", Algorithm: floodgate.Quota, Max: 9, Period: floodgate.Month}, `"monthly";q=9`},
		{floodgate.Limit{Name: "conn", Algorithm: floodgate.Concurrency, Max: 4}, `"conn";q=4;qu="concurrent-requests"`},
		{floodgate.Limit{Name: "queue", Algorithm: floodgate.LeakyQueue, Rate: 1, Per: time.Second, Burst: 5}, `"queue";q=6;w=6`},
		{floodgate.Limit{Name: `we"ird\ näme`, Algorithm: floodgate.FixedWindow, Max: 1, Window: time.Second}, `"we\"ird\\ nme";q=1;w=1`},
	}
	for _, c := range cases {
		h := NewLimit(&c.l)
		if got := h.PolicyItem(); got != c.want {
			t.Errorf("%s: policy item %s, want %s", c.l.Name, got, c.want)
		}
		items, err := sfv.ParseList(h.PolicyItem())
		if err != nil || len(items) != 1 {
			t.Fatalf("%s: parse %q: %v %v", c.l.Name, h.PolicyItem(), items, err)
		}
		if name, _ := items[0].Name(); name != h.Name {
			t.Errorf("%s: parsed name %q", c.l.Name, name)
		}
		if q, _ := items[0].Int("q"); q != h.Quota {
			t.Errorf("%s: parsed q %d want %d", c.l.Name, q, h.Quota)
		}
	}
}

func TestResetContinuous(t *testing.T) {
	t.Parallel()
	h := NewLimit(tokenBucket("b", 5, time.Second, 5))
	cases := []struct {
		d      floodgate.Decision
		t      int64
		ok     bool
		reason string
	}{
		{floodgate.Decision{Allowed: true, Limit: 5, Remaining: 5}, 0, false, "full bucket"},
		// One token taken: the next (5th) is back in 200ms.
		{floodgate.Decision{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 200 * time.Millisecond}, 1, true, "one used"},
		// Empty: one token back in 200ms, full in 1s.
		{floodgate.Decision{Allowed: false, Limit: 5, Remaining: 0, RetryAfter: 200 * time.Millisecond, ResetAfter: time.Second}, 1, true, "empty"},
	}
	for _, c := range cases {
		got, ok := h.Reset(&c.d)
		if got != c.t || ok != c.ok {
			t.Errorf("%s: t=%d,%v want %d,%v", c.reason, got, ok, c.t, c.ok)
		}
	}
	// A slow bucket: 1 per minute, burst 10, 2 remaining and 7.5 minutes
	// to full (2.5 tokens): the 3rd unit is back in 30 s.
	slow := NewLimit(tokenBucket("slow", 1, time.Minute, 10))
	d := floodgate.Decision{Limit: 10, Remaining: 2, ResetAfter: 7*time.Minute + 30*time.Second}
	if got, _ := slow.Reset(&d); got != 30 {
		t.Errorf("slow bucket t=%d, want 30", got)
	}
}

func TestResetWindowsAndConcurrency(t *testing.T) {
	t.Parallel()
	w := NewLimit(&floodgate.Limit{Name: "w", Algorithm: floodgate.FixedWindow, Max: 10, Window: time.Minute})
	d := floodgate.Decision{Limit: 10, Remaining: 3, ResetAfter: 17*time.Second + time.Millisecond}
	if got, ok := w.Reset(&d); got != 18 || !ok {
		t.Errorf("window t=%d,%v want 18", got, ok)
	}
	c := NewLimit(&floodgate.Limit{Name: "c", Algorithm: floodgate.Concurrency, Max: 2})
	d = floodgate.Decision{Limit: 2, Remaining: 0, ResetAfter: time.Second}
	if _, ok := c.Reset(&d); ok {
		t.Error("concurrency limit must omit t")
	}
}

// get returns the value of the field named name, or "".
func get(fs []Field, name string) string {
	for _, f := range fs {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

func TestRender(t *testing.T) {
	t.Parallel()
	plan := NewLimit(tokenBucket("partner-basic", 2, time.Second, 2))
	quota := NewLimit(&floodgate.Limit{Name: "partner-daily", Algorithm: floodgate.Quota, Max: 1000, Period: floodgate.Day})
	stage := NewLimit(tokenBucket("stage-dev", 5, time.Second, 5))
	items := []Item{
		{Limit: quota, Decision: floodgate.Decision{Allowed: true, Limit: 1000, Remaining: 998, ResetAfter: 3*time.Hour + 1}},
		{Limit: plan, Decision: floodgate.Decision{Limit: 2, Remaining: 0, RetryAfter: 500 * time.Millisecond, ResetAfter: time.Second}},
		{Limit: stage, Decision: floodgate.Decision{Allowed: true, Limit: 5, Remaining: 3, ResetAfter: 400 * time.Millisecond}},
		{Limit: plan, Decision: floodgate.Decision{Limit: 2, Remaining: 0}}, // duplicate name, left out
	}
	var rd Renderer
	fs := rd.Render(nil, items, 1, true, 400*time.Millisecond, &Options{Legacy: true, LimitName: "Floodgate-Limit"})
	wantPolicy := `"partner-basic";q=2;w=1, "partner-daily";q=1000;w=86400, "stage-dev";q=5;w=1`
	wantRL := `"partner-basic";r=0;t=1, "partner-daily";r=998;t=10801, "stage-dev";r=3;t=1`
	if got := get(fs, NamePolicy); got != wantPolicy {
		t.Errorf("RateLimit-Policy:\n got %s\nwant %s", got, wantPolicy)
	}
	if got := get(fs, NameRateLimit); got != wantRL {
		t.Errorf("RateLimit:\n got %s\nwant %s", got, wantRL)
	}
	for k, want := range map[string]string{
		NameLegacyLimit: "2", NameLegacyRemaining: "0", NameLegacyReset: "1",
		"Floodgate-Limit": "partner-basic", NameRetryAfter: "1",
	} {
		if got := get(fs, k); got != want {
			t.Errorf("%s: %q want %q", k, got, want)
		}
	}
	// The same limits again: the cached RateLimit-Policy value is reused.
	again := rd.Render(nil, items, 1, true, 0, nil)
	if get(again, NamePolicy) != wantPolicy {
		t.Errorf("cached policy %q", get(again, NamePolicy))
	}
	// Another order is another value.
	other := rd.Render(nil, items[:3], 2, false, 0, nil)
	if got := get(other, NamePolicy); got != `"stage-dev";q=5;w=1, "partner-daily";q=1000;w=86400, "partner-basic";q=2;w=1` {
		t.Errorf("binding stage first: %q", got)
	}
	// Switches off: no legacy fields, no name; an allowed answer has no
	// Retry-After and never names a limit.
	fs = rd.Render(nil, items[1:2], 0, false, 0, &Options{LimitName: "Floodgate-Limit"})
	if get(fs, NameLegacyLimit) != "" || get(fs, "Floodgate-Limit") != "" || get(fs, NameRetryAfter) != "" {
		t.Errorf("switches off but got %v", fs)
	}
	if got := get(fs, NameRateLimit); got != `"partner-basic";r=0;t=1` {
		t.Errorf("RateLimit %q", got)
	}
	// Retry-After is never earlier than a denying limit's t.
	long := NewLimit(&floodgate.Limit{Name: "hour", Algorithm: floodgate.FixedWindow, Max: 1, Window: time.Hour})
	fs = rd.Render(nil, []Item{{Limit: long, Decision: floodgate.Decision{Limit: 1, ResetAfter: 17 * time.Second}}}, 0, true, 2*time.Second, nil)
	if got := get(fs, NameRetryAfter); got != "17" {
		t.Errorf("Retry-After %q, want the window's t 17", got)
	}
	// No items: a denial still says when to retry.
	fs = rd.Render(nil, nil, -1, true, 1500*time.Millisecond, &Options{NoRateLimit: true})
	if len(fs) != 1 || get(fs, NameRetryAfter) != "2" {
		t.Errorf("no items: %v", fs)
	}
	fs = rd.Render(nil, items[:1], 0, false, 0, &Options{NoRateLimit: true})
	if len(fs) != 0 {
		t.Errorf("NoRateLimit on an allowed answer wrote %v", fs)
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		wait time.Duration
		minT int64
		want int64
	}{
		{0, -1, 1},
		{time.Nanosecond, -1, 1},
		{200 * time.Millisecond, 1, 1},
		{time.Second, 1, 1},
		{time.Second + 1, 1, 2},
		{3 * time.Second, 17, 17},
		{-time.Second, -1, 1},
	}
	for _, c := range cases {
		if got := RetryAfterSeconds(c.wait, c.minT); got != c.want {
			t.Errorf("RetryAfterSeconds(%v,%d)=%d want %d", c.wait, c.minT, got, c.want)
		}
	}
}

// FuzzRender checks that what Render writes parses back as RFC 9651 Lists
// with the name and numbers it was given.
func FuzzRender(f *testing.F) {
	f.Add("x", int64(3), int64(5))
	f.Add(`we"ird\`, int64(0), int64(1))
	f.Add("", int64(-4), int64(1<<40))
	f.Fuzz(func(t *testing.T, name string, remaining, limit int64) {
		if limit < 1 || limit > 1<<40 {
			return
		}
		h := NewLimit(&floodgate.Limit{Name: name, Algorithm: floodgate.FixedWindow, Max: limit, Window: time.Minute})
		d := floodgate.Decision{Limit: limit, Remaining: remaining, ResetAfter: 30 * time.Second}
		var rd Renderer
		fs := rd.Render(nil, []Item{{Limit: h, Decision: d}}, 0, false, 0, nil)
		items, err := sfv.ParseList(get(fs, NameRateLimit))
		if err != nil || len(items) != 1 {
			t.Fatalf("own output %q: %v", get(fs, NameRateLimit), err)
		}
		if got, _ := items[0].Name(); got != h.Name {
			t.Fatalf("name %q, want %q", got, h.Name)
		}
		if r, _ := items[0].Int("r"); r != max(0, remaining) {
			t.Fatalf("r %d, want %d", r, max(0, remaining))
		}
		pol, err := sfv.ParseList(get(fs, NamePolicy))
		if err != nil || len(pol) != 1 {
			t.Fatalf("own policy %q: %v", get(fs, NamePolicy), err)
		}
		if q, _ := pol[0].Int("q"); q != limit {
			t.Fatalf("q %d, want %d", q, limit)
		}
	})
}

func BenchmarkRender(b *testing.B) {
	items := []Item{
		{Limit: NewLimit(tokenBucket("partner-basic", 2, time.Second, 2)), Decision: floodgate.Decision{Limit: 2, Remaining: 0, RetryAfter: 500 * time.Millisecond, ResetAfter: time.Second}},
		{Limit: NewLimit(&floodgate.Limit{Name: "daily", Algorithm: floodgate.Quota, Max: 1000, Period: floodgate.Day}), Decision: floodgate.Decision{Allowed: true, Limit: 1000, Remaining: 998, ResetAfter: time.Hour}},
	}
	var rd Renderer
	out := make([]Field, 0, 8)
	b.ReportAllocs()
	for b.Loop() {
		out = rd.Render(out[:0], items, 0, true, 500*time.Millisecond, nil)
	}
}

// TestHugeLimitsAreStructuredFields: a limit written as 9223372036854775807
// ("no limit"), or a bucket whose refill takes longer than any client
// could wait, still gives RateLimit and RateLimit-Policy fields a client
// can parse: a structured field's Integer has at most 15 digits (RFC 9651
// §3.3.1), and a parser refuses the whole field when one has more. Such
// numbers are told as the largest Integer there is.
func TestHugeLimitsAreStructuredFields(t *testing.T) {
	t.Parallel()
	const most = 999_999_999_999_999
	huge := NewLimit(&floodgate.Limit{Name: "unlimited", Algorithm: floodgate.Quota, Max: 1<<63 - 1, Period: floodgate.Day})
	slow := NewLimit(tokenBucket("slow", 1, time.Hour, 1<<62))
	items := []Item{
		{Limit: huge, Decision: floodgate.Decision{Allowed: true, Limit: 1<<63 - 1, Remaining: 1<<63 - 2, ResetAfter: time.Hour}},
		{Limit: slow, Decision: floodgate.Decision{Allowed: true, Limit: 1 << 62, Remaining: 1<<62 - 1, ResetAfter: time.Duration(1<<63 - 1)}},
	}
	var rd Renderer
	fs := rd.Render(nil, items, 0, false, 0, nil)
	for _, name := range []string{NamePolicy, NameRateLimit} {
		list, err := sfv.ParseList(get(fs, name))
		if err != nil || len(list) != 2 {
			t.Fatalf("%s: %q does not parse as a structured field: %v", name, get(fs, name), err)
		}
		for _, it := range list {
			for _, p := range []string{"q", "w", "r", "t"} {
				if v, ok := it.Int(p); ok && (v < 0 || v > most) {
					t.Errorf("%s: %s=%d", name, p, v)
				}
			}
		}
	}
	if got := get(fs, NamePolicy); got != `"unlimited";q=999999999999999;w=86400, "slow";q=999999999999999;w=4611686019` {
		t.Errorf("RateLimit-Policy %s", got)
	}
}

// TestLongNameToldShort: a name of MaxNameLen bytes is told as it is; a
// longer one, up to a megabyte, by MaxNameLen bytes that are the same for
// the same name and differ for names that share their first bytes, in a
// RateLimit-Policy item that still parses.
func TestLongNameToldShort(t *testing.T) {
	exact := strings.Repeat("n", MaxNameLen)
	if got := NewLimit(tokenBucket(exact, 1, time.Second, 1)).Name; got != exact {
		t.Errorf("a name of %d bytes told as %q", MaxNameLen, got)
	}
	long := strings.Repeat("n", 1<<20)
	a := NewLimit(tokenBucket(long, 1, time.Second, 1))
	b := NewLimit(tokenBucket(long, 1, time.Second, 1))
	c := NewLimit(tokenBucket(long+"x", 1, time.Second, 1))
	if len(a.Name) != MaxNameLen || !strings.HasPrefix(a.Name, exact[:MaxNameLen-17]+"~") {
		t.Errorf("a name of 1 MiB told as %q", a.Name)
	}
	if a.Name != b.Name || a.PolicyItem() != b.PolicyItem() {
		t.Errorf("the same name told as %q and %q", a.Name, b.Name)
	}
	if a.Name == c.Name {
		t.Errorf("two long names told alike: %q", a.Name)
	}
	items, err := sfv.ParseList(a.PolicyItem())
	if err != nil || len(items) != 1 || items[0].Value != a.Name {
		t.Errorf("RateLimit-Policy %q: %v, %v", a.PolicyItem(), items, err)
	}
}
