package replay

import (
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/accesslog"
)

// TestLinesAheadOfTheirLogNotReplayed: a line dated far ahead of its log
// (a clock's error: 2199 among the lines of today), in the middle of a
// real access log, at its start, or three in a row, is counted as
// unreadable with its line and not replayed: the report's span, timeline
// and decisions are those of the log without it, instead of one bucket
// of years holding every request. A log that goes on from a jump (a quiet
// night), or holds a long request where it ended or where it arrived, is
// replayed whole.
func TestLinesAheadOfTheirLogNotReplayed(t *testing.T) {
	t.Parallel()
	p := compilePolicy(t, `version: 1
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: "`+okUpstream(t)+`"}
limits:
  - {name: per-client, algorithm: sliding_log, limit: 3, window: 1h}
`)
	url, log, _ := liveGateway(t, p)
	reqs := make([]*http.Request, 6)
	for i := range reqs {
		reqs[i] = newGet(t, url+"/x")
	}
	sendAnswered(t, log, "[200 200 200 429 429 429]", reqs)
	far := time.Date(2199, 6, 1, 0, 0, 0, 0, time.UTC)
	write := func(name string, at ...int) string {
		var b []byte
		for i := range 6 {
			lr := log.get(i)
			for _, a := range at {
				if a == i {
					ahead := lr
					ahead.Time = far
					b = accesslog.AppendJSON(b, &ahead)
				}
			}
			b = accesslog.AppendJSON(b, &lr)
		}
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	want := mustRun(t, Options{Policy: p, Logs: []string{write("access.log")}})
	if want.Requests != 6 || want.Agreement.Matched != 6 || time.Duration(want.Timeline.Width) != time.Minute {
		t.Fatalf("the log itself: %d requests, %d of %d decided as logged, a timeline of %d buckets of %v",
			want.Requests, want.Agreement.Matched, want.Agreement.Compared, len(want.Timeline.Requests), time.Duration(want.Timeline.Width))
	}
	for _, c := range []struct {
		at    []int
		lines string // the lines counted unreadable
	}{
		{[]int{3}, "4"},
		{[]int{0}, "1"},
		{[]int{2, 2, 2}, "3 4 5"},
		{[]int{1, 4}, "2 6"},
	} {
		r := mustRun(t, Options{Policy: p, Logs: []string{write("access.log", c.at...)}})
		l := r.Logs[0]
		var lines []string
		for _, s := range l.Samples {
			_, line, _ := strings.Cut(strings.Fields(s)[0], "access.log:")
			lines = append(lines, strings.TrimSuffix(line, ":"))
			if !strings.Contains(s, "time 2199-06-01T00:00:00Z is ahead of its log") {
				t.Errorf("%v: unreadable %q does not say why", c.at, s)
			}
		}
		if l.Skipped != int64(len(c.at)) || strings.Join(lines, " ") != c.lines {
			t.Errorf("lines ahead at %v: %d unreadable (%q), want lines %s", c.at, l.Skipped, l.Samples, c.lines)
		}
		if r.Requests != want.Requests || !r.From.Equal(want.From) || !r.To.Equal(want.To) || !reflect.DeepEqual(r.Timeline, want.Timeline) ||
			r.Agreement.Matched != want.Agreement.Matched || r.Agreement.Compared != want.Agreement.Compared {
			t.Errorf("lines ahead at %v: %d requests from %v to %v, a timeline of %d buckets of %v, %d of %d decided as logged; want those of the log without them",
				c.at, r.Requests, r.From, r.To, len(r.Timeline.Requests), time.Duration(r.Timeline.Width), r.Agreement.Matched, r.Agreement.Compared)
		}
	}

	// A request of half an hour, first in a log or after another, whose
	// line comes where it ended (as logs are written) or where it arrived
	// (a log sorted by arrival): the lines around it are not ahead of it,
	// nor it of them.
	long := []req{{at: 0, ip: "192.0.2.1"}, {at: time.Second, ip: "192.0.2.1", dur: 30 * time.Minute}}
	for i := range 10 {
		long = append(long, req{at: 2*time.Second + time.Duration(i)*time.Second, ip: "192.0.2.2"})
	}
	for _, reqs := range [][]req{long, long[1:], byEnd(long), byEnd(long[1:])} {
		r := mustRun(t, Options{Policy: compilePolicy(t, bucketPolicy), Logs: []string{writeLog(t, t.TempDir(), "long.log", reqs)}})
		if r.Requests != int64(len(reqs)) || r.Logs[0].Skipped != 0 {
			t.Errorf("a log with a long request: %d of %d requests, %d unreadable %q", r.Requests, len(reqs), r.Logs[0].Skipped, r.Logs[0].Samples)
		}
	}

	// A quiet night: the log goes on three hours later, and is all replayed.
	var night []req
	for i := range 20 {
		at := time.Duration(i) * time.Second
		if i >= 10 {
			at += 3 * time.Hour
		}
		night = append(night, req{at: at, ip: "192.0.2.1"})
	}
	r := mustRun(t, Options{Policy: compilePolicy(t, bucketPolicy), Logs: []string{writeLog(t, t.TempDir(), "night.log", night)}})
	if r.Requests != 20 || r.Logs[0].Skipped != 0 || !r.To.Equal(t0.Add(3*time.Hour+19*time.Second)) {
		t.Errorf("a log with a quiet night: %d requests to %v, %d unreadable %q", r.Requests, r.To, r.Logs[0].Skipped, r.Logs[0].Samples)
	}
}
