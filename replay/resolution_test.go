package replay

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// TestBoundaryChargedNearestTheLoggedTime attacks how a replay charges a
// boundary difference when the tolerance is wide against the limit's
// refills: the live limit decided somewhere between the logged time and
// the tolerance's edge, and a request charged at the edge would get every
// refill of the tolerance, which the live limit had not seen, and let the
// next request through where the live limit refused it. It is charged at
// the nearest instant that gives the logged answer, so one boundary stays
// one difference.
//
// NGINX's combined format gives whole seconds, and the tolerance is then
// that second: against 5 a second with a burst of 10, ten requests at
// 100 ms empty the bucket, an eleventh at 350 ms finds the token refilled
// since, a twelfth at 400 ms is refused, all logged at the same second.
// Floodgate's log gives microseconds, and the default 2 ms holds 2 units
// of a limit of 1,000 a second: ten requests at once, an eleventh logged
// at 0.5 ms and decided at 1.2 ms, a twelfth at 1.3 ms, refused.
func TestBoundaryChargedNearestTheLoggedTime(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, policy string
		times        []time.Duration // of the first ten, the eleventh and the twelfth
		skew         time.Duration   // of the eleventh's live decision
		nginx        bool
		tol          time.Duration
	}{
		{"NGINX combined, whole seconds", bucketPolicy, []time.Duration{100 * time.Millisecond, 350 * time.Millisecond, 400 * time.Millisecond}, 0, true, time.Second},
		{"Floodgate JSON, 1,000 a second", `
limits:
  - {name: per-ip, rate: 1000, burst: 10, key: client_ip, scope: global}
`, []time.Duration{0, 500 * time.Microsecond, 1300 * time.Microsecond}, 700 * time.Microsecond, false, DefaultTolerance},
	} {
		p := compilePolicy(t, c.policy)
		var reqs []req
		for range 10 {
			reqs = append(reqs, req{at: c.times[0], ip: "203.0.113.1"})
		}
		reqs = append(reqs, req{at: c.times[1], ip: "203.0.113.1"}, req{at: c.times[2], ip: "203.0.113.1"})
		logged := live(t, p, reqs, func(i int) time.Duration {
			if i == 10 {
				return c.skew
			}
			return 0
		})
		if logged[10].logged.String() != "allow" || logged[11].logged.String() != "deny" {
			t.Fatalf("%s: live decisions: %+v", c.name, logged)
		}
		path := filepath.Join(t.TempDir(), "access.log")
		if c.nginx {
			var lines []string
			for _, q := range logged {
				lines = append(lines, fmt.Sprintf(`%s - - [%s] "GET /x HTTP/1.1" %d 2 "-" "curl/8"`,
					q.ip, t0.Add(q.at).Format("02/Jan/2006:15:04:05 -0700"), q.status))
			}
			path = writeLines(t, lines)
		} else {
			path = writeLog(t, filepath.Dir(path), "access.log", logged)
		}
		r := mustRun(t, Options{Policy: p, Logs: []string{path}})
		a := r.Agreement
		if r.Requests != 12 || a == nil || time.Duration(a.Tolerance) != c.tol {
			t.Fatalf("%s: %d requests, agreement %+v: want a tolerance of %v", c.name, r.Requests, a, c.tol)
		}
		if a.Compared != 12 || a.Matched != 11 || a.Boundary != 1 || a.Unexplained != 0 || len(a.Mismatches) != 1 ||
			a.Mismatches[0].Line != 11 || a.Mismatches[0].Class != "boundary" {
			t.Errorf("%s: agreement %+v: want one boundary difference, the eleventh request, and nothing unexplained", c.name, a)
		}
		if r.Allowed != 11 || r.Denied != 1 {
			t.Errorf("%s: %d allowed, %d denied: want 11 and 1, as logged", c.name, r.Allowed, r.Denied)
		}
	}
}
