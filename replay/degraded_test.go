package replay

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/accesslog"
)

// TestDegradedReplayedNotCompared attacks what a replay does with the
// requests a log shows decided by failure policies while the store failed:
// they are decided as if the store had answered, charged like any other,
// and left out of the comparison with the log. Here a bucket of 3 that
// does not refill sees five requests: the second refused by a breaker
// (fail closed) and the fifth let through past a store deadline (fail
// open). The replay lets the second through and charges it, so the fourth
// is refused as the log shows, and refuses the fifth; neither degraded one
// counts as a difference, and the report says two were not compared.
func TestDegradedReplayedNotCompared(t *testing.T) {
	t.Parallel()
	p := compilePolicy(t, `
limits:
  - {name: per-ip, rate: 1, per: 1h, burst: 3, key: client_ip}
`)
	type line struct {
		decision accesslog.Decision
		status   int
		degraded string
	}
	var recs []*accesslog.Record
	for i, l := range []line{
		{accesslog.Allow, 200, ""},
		{accesslog.Deny, 503, "breaker_open"},
		{accesslog.Allow, 200, ""},
		{accesslog.Deny, 429, ""},
		{accesslog.Allow, 200, "deadline"},
	} {
		recs = append(recs, &accesslog.Record{Time: t0.Add(time.Duration(i) * time.Millisecond),
			ClientIP: netip.MustParseAddr("203.0.113.4"), Method: "GET", Path: "/x", Status: l.status, Route: "api",
			Limit: "per-ip", Decision: l.decision, Degraded: l.degraded})
	}
	eachLogFormat(t, recs, func(t *testing.T, path string) {
		r := mustRun(t, Options{Policy: p, Logs: []string{path}})
		if l := limitReport(t, r, "per-ip"); r.Requests != 5 || r.Allowed != 3 || r.Denied != 2 || l.Denied != 2 {
			t.Errorf("%d requests, %d allowed, %d denied (per-ip %d): want 5, 3 and 2, the degraded ones decided as if the store had answered",
				r.Requests, r.Allowed, r.Denied, l.Denied)
		}
		if a := r.Agreement; a == nil || a.Compared != 3 || a.Matched != 3 || a.Degraded != 2 || len(a.Mismatches) != 0 {
			t.Fatalf("agreement %+v: want the 3 requests decided by the limits compared and matched, the 2 degraded left out", a)
		}
		var text bytes.Buffer
		if err := r.WriteText(&text); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(text.String(), "2 decided by failure policies while the store failed: not compared") {
			t.Errorf("the report does not say what it left out:\n%s", text.String())
		}
	})
}
