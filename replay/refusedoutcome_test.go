package replay

import (
	"fmt"
	"testing"
	"time"
)

// TestRefusedInTheLogGivesItsReservationBack attacks the status a replay
// settles a limit counted by outcome with, when the log shows a request
// refused and the replay lets it through: the request never reached an
// upstream, so it has no status, and what it reserved is given back, even
// when the status the log shows is one the limit counts. Here NGINX's
// limit_req refused three requests with its 503, and the policy replayed
// has no such limit but counts the upstream's 503s, two a minute per
// address: the three are let through and count nothing, so the client's
// two requests after them, answered 200, are let through too, as NGINX
// let them.
func TestRefusedInTheLogGivesItsReservationBack(t *testing.T) {
	t.Parallel()
	p := compilePolicy(t, `
limits:
  - {name: upstream-failures, algorithm: sliding_log, limit: 2, window: 1m, key: client_ip, count_on: [503]}
`)
	const format = NginxCombined + ` $request_time $msec`
	var lines []string
	for i, status := range []int{503, 503, 503, 200, 200} {
		at := t0.Add(time.Duration(i) * 10 * time.Millisecond)
		lines = append(lines, fmt.Sprintf(`192.0.2.7 - - [%s] "GET /api/a HTTP/1.1" %d 197 "-" "curl/8" 0.000 %d.%03d`,
			at.Format("02/Jan/2006:15:04:05 -0700"), status, at.Unix(), at.Nanosecond()/1e6))
	}
	r := mustRun(t, Options{Policy: p, Logs: []string{writeLines(t, lines)}, Format: "nginx", LogFormat: format})
	if r.Requests != 5 || r.Logs[0].Skipped != 0 {
		t.Fatalf("%d requests replayed, %d lines unreadable: %q", r.Requests, r.Logs[0].Skipped, r.Logs[0].Samples)
	}
	if l := limitReport(t, r, "upstream-failures"); r.Allowed != 5 || l.Denied != 0 {
		t.Errorf("%d of 5 allowed, %d refused by upstream-failures: the 503s NGINX answered itself were counted as the upstream's",
			r.Allowed, l.Denied)
	}
	if a := r.Agreement; a == nil || a.Compared != 5 || a.ReplayAllowed != 3 || a.ReplayDenied != 0 {
		t.Errorf("agreement %+v: want the three 503s allowed here, and the two 200s as logged", a)
	}
}
