package gateway

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
)

func tokenBucket(name string, rate int64, per time.Duration, burst int64) *floodgate.Limit {
	return &floodgate.Limit{Name: name, Algorithm: floodgate.TokenBucket, Rate: rate, Per: per, Burst: burst}
}

func TestPolicyItems(t *testing.T) {
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
		h := NewLimitHeader(&c.l)
		if got := h.PolicyItem(); got != c.want {
			t.Errorf("%s: policy item %s, want %s", c.l.Name, got, c.want)
		}
		items, err := ParseList(h.PolicyItem())
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
	h := NewLimitHeader(tokenBucket("b", 5, time.Second, 5))
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
	slow := NewLimitHeader(tokenBucket("slow", 1, time.Minute, 10))
	d := floodgate.Decision{Limit: 10, Remaining: 2, ResetAfter: 7*time.Minute + 30*time.Second}
	if got, _ := slow.Reset(&d); got != 30 {
		t.Errorf("slow bucket t=%d, want 30", got)
	}
}

func TestResetWindowsAndConcurrency(t *testing.T) {
	w := NewLimitHeader(&floodgate.Limit{Name: "w", Algorithm: floodgate.FixedWindow, Max: 10, Window: time.Minute})
	d := floodgate.Decision{Limit: 10, Remaining: 3, ResetAfter: 17*time.Second + time.Millisecond}
	if got, ok := w.Reset(&d); got != 18 || !ok {
		t.Errorf("window t=%d,%v want 18", got, ok)
	}
	c := NewLimitHeader(&floodgate.Limit{Name: "c", Algorithm: floodgate.Concurrency, Max: 2})
	d = floodgate.Decision{Limit: 2, Remaining: 0, ResetAfter: time.Second}
	if _, ok := c.Reset(&d); ok {
		t.Error("concurrency limit must omit t")
	}
}

func TestSetRateLimit(t *testing.T) {
	plan := NewLimitHeader(tokenBucket("partner-basic", 2, time.Second, 2))
	quota := NewLimitHeader(&floodgate.Limit{Name: "partner-daily", Algorithm: floodgate.Quota, Max: 1000, Period: floodgate.Day})
	stage := NewLimitHeader(tokenBucket("stage-dev", 5, time.Second, 5))
	items := []Covered{
		{plan, floodgate.Decision{Limit: 2, Remaining: 0, RetryAfter: 500 * time.Millisecond, ResetAfter: time.Second}},
		{quota, floodgate.Decision{Allowed: true, Limit: 1000, Remaining: 998, ResetAfter: 3*time.Hour + 1}},
		{stage, floodgate.Decision{Allowed: true, Limit: 5, Remaining: 3, ResetAfter: 400 * time.Millisecond}},
		{plan, floodgate.Decision{Limit: 2, Remaining: 0}}, // duplicate name, left out
	}
	h := http.Header{}
	bindingT := SetRateLimit(h, items, &HeaderOptions{Legacy: true, LimitName: "Floodgate-Limit"}, nil)
	wantPolicy := `"partner-basic";q=2;w=1, "partner-daily";q=1000;w=86400, "stage-dev";q=5;w=1`
	wantRL := `"partner-basic";r=0;t=1, "partner-daily";r=998;t=10801, "stage-dev";r=3;t=1`
	if got := h.Get("RateLimit-Policy"); got != wantPolicy {
		t.Errorf("RateLimit-Policy:\n got %s\nwant %s", got, wantPolicy)
	}
	if got := h.Get("RateLimit"); got != wantRL {
		t.Errorf("RateLimit:\n got %s\nwant %s", got, wantRL)
	}
	if bindingT != 1 {
		t.Errorf("binding t %d", bindingT)
	}
	for k, want := range map[string]string{
		"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1",
		"Floodgate-Limit": "partner-basic",
	} {
		if got := h.Get(k); got != want {
			t.Errorf("%s: %q want %q", k, got, want)
		}
	}
	// Switches off: no legacy fields, no name.
	h = http.Header{}
	SetRateLimit(h, items[:1], nil, make([]byte, 0, 64))
	if h.Get("X-RateLimit-Limit") != "" || h.Get("Floodgate-Limit") != "" {
		t.Errorf("switches off but got %v", h)
	}
	if got := h.Get("RateLimit"); got != `"partner-basic";r=0;t=1` {
		t.Errorf("RateLimit %q", got)
	}
	if SetRateLimit(h, nil, nil, nil) != -1 {
		t.Error("no items must return -1")
	}
}

func TestRetryAfterSeconds(t *testing.T) {
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

func TestWriteAnswers(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteTooMany(rec, 3, false)
	if rec.Code != 429 || rec.Header().Get("Retry-After") != "3" || strings.TrimSpace(rec.Body.String()) != `{"message":"Too Many Requests"}` {
		t.Errorf("throttled: %d %v %q", rec.Code, rec.Header(), rec.Body.String())
	}
	if rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("content type %q", rec.Header().Get("Content-Type"))
	}
	rec = httptest.NewRecorder()
	WriteTooMany(rec, 86400, true)
	if rec.Code != 429 || rec.Header().Get("Retry-After") != "86400" || strings.TrimSpace(rec.Body.String()) != `{"message":"Limit Exceeded"}` {
		t.Errorf("quota: %d %v %q", rec.Code, rec.Header(), rec.Body.String())
	}
	rec = httptest.NewRecorder()
	WriteForbidden(rec)
	if rec.Code != 403 || strings.TrimSpace(rec.Body.String()) != `{"message":"Forbidden"}` || rec.Header().Get("Retry-After") != "" {
		t.Errorf("forbidden: %d %v %q", rec.Code, rec.Header(), rec.Body.String())
	}
}

func TestParseList(t *testing.T) {
	got, err := ParseList(`"burst";q=100;w=60, "daily";q=5000;w=86400;pk=:YWNtZS0xMjM=:`)
	if err != nil {
		t.Fatal(err)
	}
	want := []Item{
		{Value: "burst", Params: []Param{{"q", int64(100)}, {"w", int64(60)}}},
		{Value: "daily", Params: []Param{{"q", int64(5000)}, {"w", int64(86400)}, {"pk", []byte("acme-123")}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %#v\nwant %#v", got, want)
	}
	got, err = ParseList(`tok;a;b=?0;c=-1.5;d="x\"y" ,	"z"`)
	if err != nil {
		t.Fatal(err)
	}
	want = []Item{
		{Value: Token("tok"), Params: []Param{{"a", true}, {"b", false}, {"c", -1.5}, {"d", `x"y`}}},
		{Value: "z"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %#v\nwant %#v", got, want)
	}
	if items, err := ParseList("   "); err != nil || items != nil {
		t.Errorf("empty: %v %v", items, err)
	}
	for _, bad := range []string{
		`"a",`, `"a";Q=1`, `"a";q=1234567890123456`, `"unterminated`, `("inner")`, `"a" "b"`,
		`:bad!:`, `"a";q=1.2345`, `?2`, `"\x"`, `1.`, "\"tab\there\"", `-`, `,`,
	} {
		if _, err := ParseList(bad); err == nil {
			t.Errorf("ParseList(%q) accepted", bad)
		}
	}
}

// FuzzParseList checks that the parser never panics and that what it
// accepts from SetRateLimit comes back unchanged.
func FuzzParseList(f *testing.F) {
	f.Add(`"burst";q=100;w=60, "daily";q=5000;w=86400;pk=:YWNtZS0xMjM=:`, "x", int64(3), int64(5))
	f.Add(`"a";r=0;t=17`, `we"ird\`, int64(0), int64(1))
	f.Add(`tok;a;b=?0;c=-1.5`, "", int64(-4), int64(1<<40))
	f.Fuzz(func(t *testing.T, field, name string, remaining, limit int64) {
		_, _ = ParseList(field)
		if limit < 1 || limit > 1<<40 {
			return
		}
		l := &floodgate.Limit{Name: name, Algorithm: floodgate.FixedWindow, Max: limit, Window: time.Minute}
		h := NewLimitHeader(l)
		d := floodgate.Decision{Limit: limit, Remaining: remaining, ResetAfter: 30 * time.Second}
		hdr := http.Header{}
		SetRateLimit(hdr, []Covered{{h, d}}, nil, nil)
		items, err := ParseList(hdr.Get("RateLimit"))
		if err != nil || len(items) != 1 {
			t.Fatalf("own output %q: %v", hdr.Get("RateLimit"), err)
		}
		if got, _ := items[0].Name(); got != h.Name {
			t.Fatalf("name %q, want %q", got, h.Name)
		}
		if r, _ := items[0].Int("r"); r != max(0, remaining) {
			t.Fatalf("r %d, want %d", r, max(0, remaining))
		}
		pol, err := ParseList(hdr.Get("RateLimit-Policy"))
		if err != nil || len(pol) != 1 {
			t.Fatalf("own policy %q: %v", hdr.Get("RateLimit-Policy"), err)
		}
		if q, _ := pol[0].Int("q"); q != limit {
			t.Fatalf("q %d, want %d", q, limit)
		}
	})
}
