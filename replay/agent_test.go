package replay

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/floodgate/floodgate/accesslog"
)

// TestJSONLogKeysByUserAgentAndReferer: a limit keyed by the User-Agent or
// the Referer counts, in a replay of Floodgate's JSON log, where the
// gateway counted it, as in a replay of its combined log: the JSON log
// writes both fields (user_agent, referer), and a replay reads them as the
// request's fields. Before, a JSON replay took every request for one
// without them: such a limit applied to none, and the denials the log
// shows were replayed as let through.
func TestJSONLogKeysByUserAgentAndReferer(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ header, limit string }{{"User-Agent", "per-agent"}, {"Referer", "per-referer"}} {
		p := compilePolicy(t, `
limits:
  - {name: `+c.limit+`, rate: 1, per: 1h, burst: 2, key: "header:`+c.header+`", scope: global}
`)
		ip := netip.MustParseAddr("192.0.2.1")
		for _, format := range []string{"json", "combined"} {
			var b []byte
			// Three requests of each value: the third of each refused.
			for i, v := range []string{"bot/1", "bot/1", "bot/1", "curl/8", "curl/8", "curl/8"} {
				r := &accesslog.Record{Time: t0.Add(time.Duration(i) * time.Second), ClientIP: ip, Method: "GET", Path: "/x",
					Proto: "HTTP/1.1", Status: 200, Duration: 10 * time.Microsecond, Route: "r", Limit: c.limit, Decision: accesslog.Allow}
				if i%3 == 2 {
					r.Status, r.Decision, r.RetryAfter = 429, accesslog.Deny, time.Hour
				}
				if c.header == "User-Agent" {
					r.UserAgent = v
				} else {
					r.Referer = "https://" + v + "/"
				}
				if format == "json" {
					b = accesslog.AppendJSON(b, r)
				} else {
					b = accesslog.AppendCombined(b, r)
				}
			}
			log := filepath.Join(t.TempDir(), "access.log")
			if err := os.WriteFile(log, b, 0o600); err != nil {
				t.Fatal(err)
			}
			r := mustRun(t, Options{Policy: p, Logs: []string{log}})
			if a := r.Agreement; r.Requests != 6 || r.Denied != 2 || r.Unlimited != 0 || a.Compared != 6 || a.Matched != 6 {
				t.Errorf("%s, %s log: %d requests, %d denied, %d unlimited, %d of %d agree; want 6, 2, none, all\n%s",
					c.header, format, r.Requests, r.Denied, r.Unlimited, a.Matched, a.Compared, b)
			}
		}
	}
}
