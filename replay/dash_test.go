package replay

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/floodgate/floodgate/accesslog"
)

// TestCombinedLogKeepsALoneDash: a client that sends "-" as its
// User-Agent or Referer, and a user named "-", are counted in a replay of
// the combined log where the gateway counted them: the log writes such a
// value escaped (\x2D), as a value it is, not as the "-" of an empty field,
// which a replay reads as none (the limits keyed by it then applied to no
// request, and the denials the log shows were replayed as let through).
func TestCombinedLogKeepsALoneDash(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, key string }{{"agent", "header:User-Agent"}, {"referer", "header:Referer"}, {"user", "user"}} {
		p := compilePolicy(t, `
limits:
  - {name: per-`+c.name+`, rate: 1, per: 1h, burst: 2, key: "`+c.key+`", scope: global}
`)
		var b []byte
		for i := range 3 {
			r := &accesslog.Record{Time: t0.Add(time.Duration(i) * time.Second), ClientIP: netip.MustParseAddr("192.0.2.1"),
				Method: "GET", Path: "/x", Proto: "HTTP/1.1", Status: 200, Duration: 10 * time.Microsecond, Route: "r",
				Limit: "per-" + c.name, Decision: accesslog.Allow}
			if i == 2 {
				r.Status, r.Decision, r.RetryAfter = 429, accesslog.Deny, time.Hour
			}
			switch c.name {
			case "agent":
				r.UserAgent = "-"
			case "referer":
				r.Referer = "-"
			case "user":
				r.User = "-"
			}
			b = accesslog.AppendCombined(b, r)
		}
		log := filepath.Join(t.TempDir(), "access.log")
		if err := os.WriteFile(log, b, 0o600); err != nil {
			t.Fatal(err)
		}
		r := mustRun(t, Options{Policy: p, Logs: []string{log}})
		if a := r.Agreement; r.Requests != 3 || r.Denied != 1 || r.Unlimited != 0 || a.Matched != 3 {
			t.Errorf("%s \"-\": %d requests, %d denied, %d unlimited, %d of %d agree; want 3, 1, none, all\n%s",
				c.name, r.Requests, r.Denied, r.Unlimited, a.Matched, a.Compared, b)
		}
	}
	// A method "-" (a token, which HTTP allows) and a key named "-" read
	// back as written.
	in := newInterner()
	tp, err := compileNginx(accesslog.CombinedLogFormat, DefaultDeniedStatuses, in)
	if err != nil {
		t.Fatal(err)
	}
	want := &accesslog.Record{Time: t0, ClientIP: netip.MustParseAddr("192.0.2.1"), Method: "-", Path: "/", Proto: "HTTP/1.1",
		Status: 200, Key: "-", Limit: "-", Decision: accesslog.Allow}
	got := parseOne(t, tp, string(accesslog.AppendCombined(nil, want)))
	if got.Method != "-" || got.Key != "-" || got.Limit != "-" {
		t.Errorf("method %q, key %q, limit %q read back; want \"-\" each", got.Method, got.Key, got.Limit)
	}
	// An empty field is still "-", as NGINX writes it.
	line := string(accesslog.AppendCombined(nil, &accesslog.Record{Time: t0, Method: "GET", Path: "/", Status: 200}))
	if want := `- - - [30/Nov/2026:10:00:00 +0000] "GET / -" 200 0 "-" "-" 0.000000 1796032800.000000 "-" "-" "none" "-" "-" "-" "-"` + "\n"; line != want {
		t.Errorf("empty fields written\n%q, want\n%q", line, want)
	}
}
