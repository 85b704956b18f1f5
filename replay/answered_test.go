package replay

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/policy"
)

// TestGatewaysOwn400sNotCountedAsAllowed attacks the counts of a
// replay's report with the requests the gateway answers 400 itself,
// before any limit: a path whose escaped slash would move it to another
// route, and a field sent twice that a limit is keyed by. No limit
// allowed them, and the report must not say one did (nor that no limit
// applied): they are counted apart, from the gateway's JSON access log
// and when the replay's own gateway answers them so (an NGINX log, which
// holds the target as sent).
func TestGatewaysOwn400sNotCountedAsAllowed(t *testing.T) {
	p := compilePolicy(t, fmt.Sprintf(`version: 1
routes:
  - {name: files, match: {paths: ["/files/{id}"]}, upstream: %[1]q}
  - {name: all, match: {paths: ["/**"]}, upstream: %[1]q}
limits:
  - {name: tenant, rate: 5, per: 1h, burst: 5, key: "header:X-Tenant", match: {paths: ["/api/**"]}}
  - {name: per-ip, rate: 1, per: 1h, burst: 1, key: client_ip, match: {paths: ["/api/**"]}}
`, okUpstream(t)))
	url, log, _ := liveGateway(t, p)
	var reqs []*http.Request
	for i, hdr := range [][]string{{}, {"X-Tenant", "a", "X-Tenant", "b"}, {"X-Tenant", "a"}, {"X-Tenant", "a"}} {
		path := "/api/x"
		if i == 0 {
			path = "/files/a%2Fb"
		}
		req := newGet(t, url+path)
		for j := 0; j+1 < len(hdr); j += 2 {
			req.Header.Add(hdr[j], hdr[j+1])
		}
		reqs = append(reqs, req)
	}
	sendAnswered(t, log, "[400 400 200 429]", reqs)
	file := writeAccessLog(t, log, len(reqs))
	r := mustRun(t, Options{Policy: p, Logs: []string{file}, Compare: p})
	if r.Requests != 4 || r.Allowed != 1 || r.Unlimited != 0 || r.Denied != 1 || r.Answered != 2 {
		t.Errorf("JSON log: %d requests: %d allowed (%d with no limit), %d denied, %d answered before any limit; want 4: 1 allowed (0), 1 denied, 2 answered",
			r.Requests, r.Allowed, r.Unlimited, r.Denied, r.Answered)
	}
	if a := r.Agreement; a == nil || a.Compared != 4 || a.Matched != 4 {
		t.Errorf("agreement with the log %+v: want all 4 decided as the gateway did", a)
	}
	if c := r.Compare; c == nil || c.Allowed != 1 || c.Denied != 1 || c.Answered != 2 || c.Flips != 0 {
		t.Errorf("comparison with the same policy %+v: want 1 allowed, 1 denied, 2 answered, no flip", c)
	}
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "4 requests: 1 allowed, 1 denied (25.0%), 2 answered before any limit") {
		t.Errorf("text report:\n%s\nwant its counts to set the 400s apart", text.String())
	}

	// An NGINX log holds the target as sent; the replay's own gateway
	// answers the escaped slash 400.
	at := t0
	line := fmt.Sprintf(`192.0.2.7 - - [%s] "GET /files/a%%2Fb HTTP/1.1" 200 3 "-" "curl/8"`+"\n", at.Format("02/Jan/2006:15:04:05 -0700"))
	line += fmt.Sprintf(`192.0.2.7 - - [%s] "GET /files/b HTTP/1.1" 200 3 "-" "curl/8"`+"\n", at.Add(time.Second).Format("02/Jan/2006:15:04:05 -0700"))
	path := filepath.Join(t.TempDir(), "nginx.log")
	if err := os.WriteFile(path, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	r = mustRun(t, Options{Policy: p, Logs: []string{path}, Format: "nginx"})
	if r.Requests != 2 || r.Allowed != 1 || r.Answered != 1 {
		t.Errorf("NGINX log: %d requests: %d allowed, %d answered before any limit; want 2: 1 allowed, 1 answered (400)",
			r.Requests, r.Allowed, r.Answered)
	}
}

// TestCompareFlagsTheGatewaysOwnAnswers attacks --compare with a change
// that makes the gateway answer requests itself: server.escaped_slash
// from segment to reject. A request the first policy forwards and the
// other answers 400 before any limit flips to refused, and the reverse
// comparison flips it back, each shown with the answer for its limit; a
// request one policy's limit refuses and the other answers 400 is refused
// by both and flips neither way. Before 2026-12-06 a flip was a change of
// Outcome.Denied alone: the first went unflagged, and the second was shown
// as refused → allowed by the limit.
func TestCompareFlagsTheGatewaysOwnAnswers(t *testing.T) {
	t.Parallel()
	var b []byte
	for i, target := range []string{"/files/a%2Fb", "/files/b", "/files/c%2Fd", "/files/e"} {
		b = fmt.Appendf(b, `203.0.113.7 - - [30/Nov/2026:10:30:0%d +0000] "GET %s HTTP/1.1" 200 0 "-" "-"`+"\n", i, target)
	}
	log := filepath.Join(t.TempDir(), "access.log")
	if err := os.WriteFile(log, b, 0o600); err != nil {
		t.Fatal(err)
	}
	policyOf := func(mode string) string {
		return `
server: {escaped_slash: ` + mode + `}
routes:
  - {name: files, match: {paths: ["/files/*"]}, upstream: none}
limits:
  - {name: files, algorithm: fixed_window, limit: 2, window: 1h, key: client_ip, match: {routes: [files]}}
`
	}
	segment, reject := compilePolicy(t, policyOf("segment")), compilePolicy(t, policyOf("reject"))
	answered := "(400: answered before any limit)"
	for _, tc := range []struct {
		name      string
		from, to  *policy.Policy
		want      string // direction, limit and first line of each group
		flipLines []int64
	}{
		// segment: allowed, allowed, 429, 429; reject: 400, allowed, 400, allowed.
		{"segment to reject", segment, reject, "to_allowed files 4; to_denied " + answered + " 1", []int64{1, 4}},
		{"reject to segment", reject, segment, "to_allowed " + answered + " 1; to_denied files 4", []int64{1, 4}},
	} {
		var lines []int64
		r := mustRun(t, Options{Policy: tc.from, Logs: []string{log}, Format: "nginx", Compare: tc.to,
			OnFlip: func(f *Flip) { lines = append(lines, f.Line) }})
		c := r.Compare
		var groups []string
		for _, g := range c.Groups {
			groups = append(groups, fmt.Sprintf("%s %s %d", g.Direction, g.Limit, g.Examples[0].Line))
		}
		slices.Sort(groups)
		if c.Flips != 2 || c.ToDenied != 1 || c.ToAllowed != 1 || strings.Join(groups, "; ") != tc.want ||
			!slices.Equal(lines, tc.flipLines) {
			t.Errorf("%s: %d flips (%d to denied, %d to allowed), groups %q, lines %v; want 2 (1, 1), groups %q, lines %v",
				tc.name, c.Flips, c.ToDenied, c.ToAllowed, groups, lines, tc.want, tc.flipLines)
		}
		var text bytes.Buffer
		if err := r.WriteText(&text); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(text.String(), answered) {
			t.Errorf("%s: text report:\n%s\nwant the flip to the gateway's own 400 shown", tc.name, text.String())
		}
	}
}
