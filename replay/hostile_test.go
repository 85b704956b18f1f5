package replay

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"html"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/floodgate/floodgate/accesslog"
	"github.com/floodgate/floodgate/gateway"
)

// TestOutOfRangeTimesAndDurationsRefused: a line whose time is before
// 1970 or past the years an int64 of nanoseconds holds, or whose duration
// is negative, not a number or beyond any request, is unreadable (counted,
// with its line), not replayed at a wrapped time, and the lines around it
// are replayed as if it were not there.
func TestOutOfRangeTimesAndDurationsRefused(t *testing.T) {
	t.Parallel()
	p := compilePolicy(t, bucketPolicy)
	dir := t.TempDir()
	const rest = `"ip":"192.0.2.1","method":"GET","path":"/x","status":200`
	jsonLog := filepath.Join(dir, "a.log")
	lines := []string{
		`{"time":-8589934592,` + rest + `}`,
		`{"time":"2026-11-30T10:00:00Z",` + rest + `}`,
		`{"time":"9999-12-31T23:59:59Z",` + rest + `}`,
		`{"time":"0001-01-01T00:00:00Z",` + rest + `}`,
		`{"time":"1969-12-31T23:59:59Z",` + rest + `}`,
		`{"time":"2026-11-30T10:00:01Z","duration_us":999999999999999999,` + rest + `}`,
		`{"time":"2026-11-30T10:00:02Z",` + rest + `}`,
	}
	if err := os.WriteFile(jsonLog, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := mustRun(t, Options{Policy: p, Logs: []string{jsonLog}})
	l := r.Logs[0]
	if r.Requests != 2 || l.Skipped != 5 || !r.From.Equal(t0) || !r.To.Equal(t0.Add(2*time.Second)) ||
		time.Duration(r.Timeline.Width) != time.Minute || len(r.Timeline.Requests) != 1 {
		t.Errorf("%d requests from %v to %v, %d unreadable, timeline of %d buckets of %v", r.Requests, r.From, r.To, l.Skipped,
			len(r.Timeline.Requests), time.Duration(r.Timeline.Width))
	}
	for i, want := range []string{"a.log:1: time 1697-", "a.log:3: time: bad time", "a.log:4: time: bad time", "a.log:5: time 1969-",
		"a.log:6: duration_us: bad duration"} {
		if i >= len(l.Samples) || !strings.Contains(l.Samples[i], want) {
			t.Errorf("samples %q: want %q", l.Samples, want)
		}
	}

	csvLog := filepath.Join(dir, "b.csv")
	csv := "time,ip,method,path,status,duration_ms\n"
	for _, d := range []string{"NaN", "-5", "+Inf", "1e300", "12.5"} {
		csv += "2026-11-30T10:00:00Z,192.0.2.1,GET,/x,200," + d + "\n"
	}
	if err := os.WriteFile(csvLog, []byte(csv), 0o644); err != nil {
		t.Fatal(err)
	}
	r = mustRun(t, Options{Policy: p, Logs: []string{csvLog}})
	if l := r.Logs[0]; r.Requests != 1 || l.Skipped != 4 || len(l.Samples) != 4 || !strings.Contains(l.Samples[0], `b.csv:2: bad duration "NaN"`) {
		t.Errorf("%d requests, %d unreadable: %q", r.Requests, l.Skipped, l.Samples)
	}
}

// TestLongLineBounded: a line without an end (a corrupt log, or a small
// gzipped file that inflates to one huge line) is skipped as unreadable
// after 1 MiB, with its line number, and takes no memory beyond that: the
// lines after it are replayed.
func TestLongLineBounded(t *testing.T) {
	// Not parallel: the allocations counted are the replay's own.
	const huge = 128 << 20
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	if err != nil {
		t.Fatal(err)
	}
	good := func(at string) string {
		return `{"time":"` + at + `","ip":"192.0.2.1","method":"GET","path":"/x","status":200}` + "\n"
	}
	zw.Write([]byte(good("2026-11-30T10:00:00Z")))
	chunk := bytes.Repeat([]byte("a"), 1<<20)
	for range huge >> 20 {
		zw.Write(chunk)
	}
	zw.Write([]byte("\n" + good("2026-11-30T10:00:01Z")))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "a.log.gz")
	if err := os.WriteFile(path, gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	p := compilePolicy(t, bucketPolicy)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	r := mustRun(t, Options{Policy: p, Logs: []string{path}})
	runtime.ReadMemStats(&after)
	if l := r.Logs[0]; r.Requests != 2 || l.Lines != 3 || l.Skipped != 1 || len(l.Samples) != 1 ||
		!strings.Contains(l.Samples[0], "a.log.gz:2: line longer than 1 MiB") {
		t.Errorf("%d requests, %d lines, %d unreadable: %q", r.Requests, l.Lines, l.Skipped, l.Samples)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 48<<20 {
		t.Errorf("a line of %d MiB took %d MiB of allocations", huge>>20, alloc>>20)
	}
}

// hostilePaths are paths a client chose, as a log holds them: a
// terminal's escape sequences (a title set, a screen cleared, an 8-bit
// CSI), a bidi override that shows "user:adminexe.png", zero-width and
// invisible characters, a line break, a byte that is not UTF-8, and
// markup.
var hostilePaths = []string{
	"/a\x1b]0;owned\x07\x1b[2J",
	"/b\u009b31m",
	"/user:admin\u202Egnp.exe",
	"/c\u200b\u2066\u2028d\ufeff",
	"/e\r\nreplay of nothing",
	"/f\xff",
	"/g</code></script><script>alert(1)</script>",
}

// TestReportsShowHostileFieldsInert: what a client put in the fields of
// a log (paths, methods) reaches the text and HTML reports as what it
// is: no control character to drive the operator's terminal, no bidi
// override or invisible character to disguise it (each written out as
// ⟨U+202E⟩, a byte that is not UTF-8 as ⟨0xFF⟩), no markup.
func TestReportsShowHostileFieldsInert(t *testing.T) {
	t.Parallel()
	pa := compilePolicy(t, `
limits:
  - {name: per-ip, rate: 100, burst: 100, key: client_ip, scope: global}
`)
	pb := compilePolicy(t, `
limits:
  - {name: per-ip, rate: 1, burst: 1, key: client_ip, scope: global}
`)
	var b []byte
	for i, path := range hostilePaths {
		at := t0.Add(time.Duration(i) * time.Millisecond).Format(time.RFC3339Nano)
		// The log shows each refused, which the first policy allows:
		// each is a difference the report lists; the second policy
		// refuses all but the first, a flip each.
		b = fmt.Appendf(b, `{"time":%q,"ip":"192.0.2.1","method":"GET\u001b[1m","path":"%s","status":429,"decision":"deny","limit":"per-ip\u202e"}`+"\n",
			at, jsonRaw(path))
	}
	log := filepath.Join(t.TempDir(), "a.log")
	if err := os.WriteFile(log, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r := mustRun(t, Options{Policy: pa, PolicyName: "a.yaml", Compare: pb, CompareName: "b.yaml", Logs: []string{log}})
	if r.Agreement == nil || len(r.Agreement.Mismatches) != len(hostilePaths) || r.Compare == nil || r.Compare.Flips == 0 {
		t.Fatalf("the log's paths are not in the report: %+v %+v", r.Agreement, r.Compare)
	}
	var text, page bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(page.String(), "<script") {
		t.Errorf("markup from the log in the page")
	}
	for name, out := range map[string]string{"text": text.String(), "html": html.UnescapeString(page.String())} {
		if !utf8.ValidString(out) {
			t.Errorf("%s: not UTF-8", name)
		}
		for _, c := range out {
			if c != '\n' && unicode.In(c, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp) {
				t.Errorf("%s: %U in the report:\n%s", name, c, out)
				break
			}
		}
		for _, want := range []string{"⟨U+202E⟩gnp.exe", "/a⟨U+001B⟩]0;owned⟨U+0007⟩", "/f⟨0xFF⟩", "GET⟨U+001B⟩[1m"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: no %q", name, want)
			}
		}
	}
	// The text report is one line per difference: a line break in a path
	// starts none.
	if strings.Contains(text.String(), "\nreplay of nothing") {
		t.Errorf("a path's line break is in the text report:\n%s", text.String())
	}
	// JSON keeps the paths as they are.
	var back Report
	js, _ := json.Marshal(r)
	if err := json.Unmarshal(js, &back); err != nil || back.Agreement.Mismatches[2].Path != hostilePaths[2] {
		t.Errorf("JSON: %v", err)
	}
}

// jsonRaw writes s as the inside of a JSON string, keeping bytes that
// are not UTF-8 as they are (as a log written by another program may).
func jsonRaw(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20:
			fmt.Fprintf(&b, `\u%04x`, c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// TestParseJSONEscapedKeys: a JSON log whose writer escapes characters
// of its keys as well as its values is read as it says: a key keeps its
// name when the value after it is decoded too.
func TestParseJSONEscapedKeys(t *testing.T) {
	t.Parallel()
	line := `{"ti\u006de":"2026-11-30T10:00:00Z","\u0069p":"192.0.2.1","meth\u006fd":"G\u0045T","pa\u0074h":"/students/\u0039",` +
		`"st\u0061tus":429,"decisi\u006fn":"d\u0065ny","header:X-\u0054enant":"\u0061cme"}`
	r := parseOne(t, newJSONParser(newInterner()), line)
	if r.Time != t0.UnixNano() || r.ClientIP.String() != "192.0.2.1" || r.Method != "GET" || r.Path != "/students/9" ||
		r.Status != 429 || r.Logged != LoggedDeny || len(r.Headers) != 1 || r.Headers[0] != (Header{Name: "X-Tenant", Value: "acme"}) {
		t.Errorf("parsed %+v", r)
	}
}

// TestFlipExamplesBounded: a comparison keeps examples of up to ten
// thousand groups (a group a client) until the replay ends; a client's
// long paths and methods cost that no more than a short one (cut in the
// examples, whole to OnFlip).
func TestFlipExamplesBounded(t *testing.T) {
	// Not parallel: the heap measured is the replay's own.
	const clients, each, long = 1000, 4, 8 << 10
	pa := compilePolicy(t, `
limits:
  - {name: per-ip, algorithm: fixed_window, limit: 1, window: 2h, key: client_ip, scope: global}
`)
	pb := compilePolicy(t, `
limits:
  - {name: per-ip, algorithm: fixed_window, limit: 100, window: 2h, key: client_ip, scope: global}
`)
	var b []byte
	for i := range clients * each {
		// One request a second, client by client in turn: each client's
		// second, third and fourth are refused by the first policy only.
		at := t0.Add(time.Duration(i) * time.Second).Format(time.RFC3339)
		path := fmt.Sprintf("/%d/%s", i, strings.Repeat("p", long))
		b = fmt.Appendf(b, `{"time":%q,"ip":"10.0.%d.%d","method":"GET%s","path":%q,"status":200}`+"\n",
			at, i%clients/250, i%clients%250, strings.Repeat("M", long), path)
	}
	log := filepath.Join(t.TempDir(), "a.log")
	if err := os.WriteFile(log, b, 0o644); err != nil {
		t.Fatal(err)
	}
	b = nil
	var before, at runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	flips := 0
	whole := true
	r := mustRun(t, Options{Policy: pa, Compare: pb, Logs: []string{log}, OnFlip: func(f *Flip) {
		flips++
		whole = whole && len(f.Path) > long && len(f.Method) > long
		if flips == clients*(each-1) {
			// The last flip: what the comparison holds now is live.
			runtime.GC()
			runtime.ReadMemStats(&at)
		}
	}})
	if c := r.Compare; c.Flips != clients*(each-1) || c.ToAllowed != c.Flips || len(c.Groups) != 50 || !whole {
		t.Fatalf("%d flips (%d to allowed) in %d groups, whole to OnFlip: %v", c.Flips, c.ToAllowed, len(c.Groups), whole)
	}
	for _, g := range r.Compare.Groups {
		for _, ex := range g.Examples {
			if len(ex.Path) > 1024 || len(ex.Method) > 1024 || !strings.HasSuffix(ex.Path, "…") {
				t.Fatalf("an example keeps a path of %d bytes and a method of %d", len(ex.Path), len(ex.Method))
			}
		}
	}
	grew := int64(at.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("held %d KiB", grew>>10)
	if grew > 32<<20 {
		t.Errorf("the comparison of %d clients held %d MiB", clients, grew>>20)
	}
}

// TestAbsoluteFormRequestLine: a client may send its request line in
// absolute form (GET http://host/path HTTP/1.1), which NGINX logs as sent
// in $request while it routes (and limits) by the path alone, as
// Floodgate's gateway does. The replay matches such a request by its path
// too, so that the form of the request line does not take it out of the
// limits of its route.
func TestAbsoluteFormRequestLine(t *testing.T) {
	t.Parallel()
	p := compilePolicy(t, `
limits:
  - {name: api, algorithm: fixed_window, limit: 1, window: 1h, key: client_ip, scope: global, match: {paths: ["/api/**"]}}
`)
	var b []byte
	for _, target := range []string{"/api/x", "http://api.example.com/api/x", "HTTPS://api.example.com:443/api/x?q=1", "http://api.example.com"} {
		for range 3 {
			b = fmt.Appendf(b, `203.0.113.%d - - [30/Nov/2026:10:30:00 +0000] "GET %s HTTP/1.1" 200 0 "-" "-"`+"\n", len(target), target)
		}
	}
	log := filepath.Join(t.TempDir(), "access.log")
	if err := os.WriteFile(log, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r := mustRun(t, Options{Policy: p, Logs: []string{log}})
	if l := limitReport(t, r, "api"); r.Requests != 12 || l.Seen != 9 || l.Denied != 6 || r.Unlimited != 3 {
		t.Errorf("%d requests, %d unlimited; the route's limit saw %d and refused %d", r.Requests, r.Unlimited, l.Seen, l.Denied)
	}
}

// TestRefusedBeforeTheRequestPathNotCharged: the records a gateway writes
// of requests it answered before any route or limit (CONNECT 405,
// OPTIONS * 200, an unreadable transfer coding 501, an expectation it
// cannot meet 417, a target read two ways 400) charge nothing in a
// replay, as they charged nothing at the gateway, whatever policy is
// replayed: the requests after them are decided as the gateway decided
// them.
func TestRefusedBeforeTheRequestPathNotCharged(t *testing.T) {
	t.Parallel()
	p := compilePolicy(t, `
limits:
  - {name: per-ip, rate: 1, per: 1h, burst: 2, key: client_ip, scope: global}
`)
	const ip = `"ip":"192.0.2.1"`
	lines := []string{
		`{"time":"2026-11-30T10:00:00Z",` + ip + `,"method":"CONNECT","host":"a:443","path":"a:443","proto":"HTTP/1.1","status":405,"bytes":40,"duration_us":10,"decision":"none"}`,
		`{"time":"2026-11-30T10:00:00.1Z",` + ip + `,"method":"OPTIONS","host":"a","path":"*","proto":"HTTP/1.1","status":200,"bytes":0,"duration_us":10,"decision":"none"}`,
		`{"time":"2026-11-30T10:00:00.2Z",` + ip + `,"method":"POST","host":"a","path":"/up","proto":"HTTP/1.1","status":501,"bytes":30,"duration_us":10,"decision":"none"}`,
		`{"time":"2026-11-30T10:00:00.3Z",` + ip + `,"method":"PUT","host":"a","path":"/up","proto":"HTTP/1.1","status":417,"bytes":0,"duration_us":10,"decision":"none"}`,
		`{"time":"2026-11-30T10:00:00.4Z",` + ip + `,"method":"GET","host":"a","path":"/p#/../admin","proto":"HTTP/1.1","status":400,"bytes":30,"duration_us":10,"decision":"none"}`,
		`{"time":"2026-11-30T10:00:01Z",` + ip + `,"method":"GET","host":"a","path":"/x","proto":"HTTP/1.1","status":200,"bytes":2,"duration_us":10,"decision":"allow","limit":"per-ip"}`,
		`{"time":"2026-11-30T10:00:02Z",` + ip + `,"method":"GET","host":"a","path":"/x","proto":"HTTP/1.1","status":200,"bytes":2,"duration_us":10,"decision":"allow","limit":"per-ip"}`,
	}
	log := filepath.Join(t.TempDir(), "a.log")
	if err := os.WriteFile(log, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := mustRun(t, Options{Policy: p, Logs: []string{log}})
	if r.Requests != 7 || r.Denied != 0 {
		t.Errorf("%d requests, %d denied: want 7 and none (the five refused before any limit charge nothing)", r.Requests, r.Denied)
	}
}

// TestRefusedBeforeTheRequestPathNotChargedCombined: the same records in
// Floodgate's combined format, as the gateway writes them (no key, no
// limit, decision none), charge nothing in a replay either, so the
// requests after them are decided as the gateway decided them; a request
// whose limits allowed it and whose upstream then answered 400 is still
// charged.
func TestRefusedBeforeTheRequestPathNotChargedCombined(t *testing.T) {
	t.Parallel()
	p := compilePolicy(t, `
limits:
  - {name: per-ip, rate: 1, per: 1h, burst: 2, key: client_ip, scope: global}
`)
	ip := netip.MustParseAddr("192.0.2.1")
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	refused := []struct {
		method, path string
		status       int
	}{
		{"CONNECT", "a:443", 405}, {"OPTIONS", "*", 200}, {"POST", "/up", 501}, {"PUT", "/up", 417},
		{"GET", "/p#/../admin", 400}, {"GET", "/x#y", 400},
	}
	var b []byte
	for i, c := range refused {
		b = accesslog.AppendCombined(b, &accesslog.Record{Time: at(100 * i), ClientIP: ip, Method: c.method, Path: c.path,
			Proto: "HTTP/1.1", Status: c.status, Duration: 10 * time.Microsecond})
	}
	for i := range 2 {
		b = accesslog.AppendCombined(b, &accesslog.Record{Time: at(1000 * (i + 1)), ClientIP: ip, Method: "GET", Path: "/x",
			Proto: "HTTP/1.1", Status: 200, Duration: 10 * time.Microsecond, Route: "r", Limit: "per-ip", Decision: accesslog.Allow})
	}
	log := filepath.Join(t.TempDir(), "a.log")
	if err := os.WriteFile(log, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r := mustRun(t, Options{Policy: p, Logs: []string{log}})
	if r.Requests != 8 || r.Denied != 0 {
		t.Errorf("%d requests, %d denied: want 8 and none (the six refused before any limit charge nothing)\n%s", r.Requests, r.Denied, b)
	}

	// An upstream's 400 to a request its limits allowed was charged: the
	// third request of the address is refused.
	b = b[:0]
	for i := range 3 {
		status := 400
		if i == 2 {
			status = 200
		}
		b = accesslog.AppendCombined(b, &accesslog.Record{Time: at(1000 * i), ClientIP: ip, Method: "GET", Path: "/x",
			Proto: "HTTP/1.1", Status: status, Duration: 10 * time.Microsecond, Route: "r", Limit: "per-ip", Decision: accesslog.Allow})
	}
	if err := os.WriteFile(log, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := mustRun(t, Options{Policy: p, Logs: []string{log}}); r.Requests != 3 || r.Denied != 1 {
		t.Errorf("%d requests, %d denied: want 3 and 1 (two upstream 400s charged)", r.Requests, r.Denied)
	}
}

// TestEscapedSlashReplayedAsTheGatewayMatchedIt: the gateway charges a
// limit that a path with an escaped slash matches read either way
// ("/users/al%2Fice" is "/users/{id}" to net/http's ServeMux); a replay
// of a log that holds the target as sent matches it the same way, and a
// log that holds only the decoded path matches that.
func TestEscapedSlashReplayedAsTheGatewayMatchedIt(t *testing.T) {
	t.Parallel()
	p := compilePolicy(t, `
limits:
  - {name: users, algorithm: fixed_window, limit: 1, window: 1h, key: client_ip, scope: global, match: {paths: ["/users/{id}"]}}
`)
	var b []byte
	for _, target := range []string{"/users/alice", "/users/al%2Fice", "/users/al%2fice?x=1", "http://a.example/users/a%2Fb"} {
		b = fmt.Appendf(b, `203.0.113.7 - - [30/Nov/2026:10:30:00 +0000] "GET %s HTTP/1.1" 200 0 "-" "-"`+"\n", target)
	}
	log := filepath.Join(t.TempDir(), "access.log")
	if err := os.WriteFile(log, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r := mustRun(t, Options{Policy: p, Logs: []string{log}})
	if l := limitReport(t, r, "users"); r.Requests != 4 || l.Seen != 4 || l.Denied != 3 {
		t.Errorf("%d requests; the limit saw %d and refused %d, want 4 and 3", r.Requests, l.Seen, l.Denied)
	}
}

// TestEscapedSlashModesReplayed: a replay reads a path with an escaped
// slash as server.escaped_slash tells the gateway to (TestEscapedSlashModes
// in package gateway): a GitLab-style target is charged by the issues
// route's limit under segment, passes it under decoded, and charges no
// limit where the gateway answers 400 (both, reject).
func TestEscapedSlashModesReplayed(t *testing.T) {
	t.Parallel()
	var b []byte
	for _, target := range []string{"/api/v4/projects/group%2Fproject/issues", "/api/v4/projects/plain/issues",
		"/api/v4/projects%2Fx/issues", "/api/v4/projects/group%2Fproject/issues"} {
		b = fmt.Appendf(b, `203.0.113.7 - - [30/Nov/2026:10:30:00 +0000] "GET %s HTTP/1.1" 200 0 "-" "-"`+"\n", target)
	}
	log := filepath.Join(t.TempDir(), "access.log")
	if err := os.WriteFile(log, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mode         string
		seen, denied int64
	}{
		{"both", 1, 0},    // gitlab 400, plain, moved 400, gitlab 400
		{"segment", 3, 2}, // gitlab, plain 429, moved to rest, gitlab 429
		{"decoded", 2, 1}, // gitlab to rest, plain, moved 429, gitlab to rest
		{"reject", 1, 0},  // every escaped slash 400
	} {
		p := compilePolicy(t, `
server: {escaped_slash: `+tc.mode+`}
routes:
  - {name: issues, match: {paths: ["/api/v4/projects/*/issues"]}, upstream: none}
  - {name: rest, match: {paths: ["/**"]}, upstream: none}
limits:
  - {name: issues, algorithm: fixed_window, limit: 1, window: 1h, key: client_ip, match: {routes: [issues]}}
`)
		r := mustRun(t, Options{Policy: p, Logs: []string{log}})
		if l := limitReport(t, r, "issues"); r.Requests != 4 || l.Seen != tc.seen || l.Denied != tc.denied {
			t.Errorf("%s: %d requests; the limit saw %d and refused %d, want 4, %d and %d (report %+v)",
				tc.mode, r.Requests, l.Seen, l.Denied, tc.seen, tc.denied, r)
		}
	}
}

// TestHeadReplayedAgainstGetLimits: a HEAD request in a log is charged by
// a limit whose match names GET, as the gateway charges it (the upstream
// answers HEAD with its GET handler), and a limit naming HEAD alone
// charges no GET.
func TestHeadReplayedAgainstGetLimits(t *testing.T) {
	t.Parallel()
	p := compilePolicy(t, `
limits:
  - {name: exists, algorithm: fixed_window, limit: 2, window: 1h, key: client_ip, scope: global, match: {methods: [GET], paths: ["/exists"]}}
  - {name: heads, algorithm: fixed_window, limit: 100, window: 1h, key: client_ip, scope: global, match: {methods: [HEAD], paths: ["/exists"]}}
`)
	var b []byte
	for _, method := range []string{"GET", "GET", "HEAD", "HEAD", "HEAD"} {
		b = fmt.Appendf(b, `203.0.113.7 - - [30/Nov/2026:10:30:00 +0000] "%s /exists?name=x HTTP/1.1" 200 0 "-" "-"`+"\n", method)
	}
	log := filepath.Join(t.TempDir(), "access.log")
	if err := os.WriteFile(log, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r := mustRun(t, Options{Policy: p, Logs: []string{log}})
	l, h := limitReport(t, r, "exists"), limitReport(t, r, "heads")
	if r.Requests != 5 || l.Seen != 5 || l.Denied != 3 || h.Seen != 3 {
		t.Errorf("%d requests; the GET limit saw %d and refused %d, the HEAD one saw %d; want 5, 5, 3 and 3", r.Requests, l.Seen, l.Denied, h.Seen)
	}
}

// TestHeaderFieldNamesBounded: a JSON log whose lines name ever new
// header:NAME fields (80,000 distinct names over 20,000 lines) keeps at
// most maxHeaderNames of their canonical names, not one per name the log
// ever held; each field is still read under its canonical name.
func TestHeaderFieldNamesBounded(t *testing.T) {
	t.Parallel()
	p := newJSONParser(newInterner())
	var r Record
	for i := range 20_000 {
		var b strings.Builder
		b.WriteString(`{"time":"2026-11-30T10:00:00Z","ip":"192.0.2.1","method":"GET","path":"/x","status":200`)
		for k := range 4 {
			fmt.Fprintf(&b, `,"header:x-tenant-%d":"t"`, 4*i+k)
		}
		b.WriteString(`,"header:x-tenant":"acme"}`)
		r = parseOne(t, p, b.String())
	}
	if n := len(p.hdrNames); n > maxHeaderNames {
		t.Errorf("%d header names held after 80,001 distinct ones, want at most %d", n, maxHeaderNames)
	}
	if got := fmt.Sprint(r.Headers); got != "[{X-Tenant-79996 t} {X-Tenant-79997 t} {X-Tenant-79998 t} {X-Tenant-79999 t} {X-Tenant acme}]" {
		t.Errorf("the last line's fields: %s", got)
	}
}

// TestUnreadableSamplesCut: lines made unreadable by a value of 600 KB
// (a time, an address, a status, a duration) are shown in every report
// by their file, line and why, cut to maxSampleBytes: the reports of a
// log of a few lines stay a few kilobytes, not megabytes of what the
// lines held.
func TestUnreadableSamplesCut(t *testing.T) {
	t.Parallel()
	p := compilePolicy(t, bucketPolicy)
	huge := strings.Repeat("9", 600_000)
	const rest = `"method":"GET","path":"/x"`
	lines := []string{
		`{"time":"2026-11-30T10:00:00Z","ip":"192.0.2.1",` + rest + `,"status":200}`,
		`{"time":"` + huge + `","ip":"192.0.2.1",` + rest + `,"status":200}`,
		`{"time":"2026-11-30T10:00:01Z","ip":"` + huge + `",` + rest + `,"status":200}`,
		`{"time":"2026-11-30T10:00:01Z","ip":"192.0.2.1",` + rest + `,"status":"` + huge + `"}`,
		`{"time":"2026-11-30T10:00:02Z","ip":"192.0.2.1",` + rest + `,"status":200,"duration_us":"` + huge + `"}`,
		`{"time":"2026-11-30T10:00:02Z","ip":"192.0.2.1",` + rest + `,"status":200}`,
	}
	r := mustRun(t, Options{Policy: p, Logs: []string{writeLines(t, lines)}})
	l := r.Logs[0]
	if r.Requests != 2 || l.Skipped != 4 || len(l.Samples) != 4 {
		t.Fatalf("%d requests, %d unreadable, %d shown", r.Requests, l.Skipped, len(l.Samples))
	}
	for i, want := range []string{"access.log:2: time: bad time", "access.log:3: ip: ", "access.log:4: status: bad status", "access.log:5: duration_us: bad duration"} {
		if s := l.Samples[i]; !strings.Contains(s, want) || len(s) > len(l.Name)+maxSampleBytes+32 {
			t.Errorf("sample %d: %d bytes %.80q…, want %q cut to %d bytes", i, len(s), s, want, maxSampleBytes)
		}
	}
	for out, s := range writeReports(t, r) {
		if len(s) > 64<<10 {
			t.Errorf("the %s report of a log of 6 lines: %d bytes", out, len(s))
		}
	}
}

// TestAbsoluteFormOfAnySchemeRequestLine: a request line in absolute form
// of a scheme other than http or https (GET ftp://host/api/x HTTP/1.1) is
// routed by NGINX and both gateway engines by its path, /api/x: the
// replay reads it so too, not as the path "ftp://host/api/x" no route
// matches; a path that only holds "://" stays the path it is.
func TestAbsoluteFormOfAnySchemeRequestLine(t *testing.T) {
	t.Parallel()
	p := compilePolicy(t, `
limits:
  - {name: api, algorithm: fixed_window, limit: 1, window: 1h, key: client_ip, scope: global, match: {paths: ["/api/**"]}}
`)
	var b []byte
	for i, target := range []string{"ftp://api.example.com/api/x", "FTP://api.example.com/api/x", "git+ssh.v2://u@api.example.com:22/api/x?q=1", "/api/x://y", "/other/http://api.example.com/api/x"} {
		b = fmt.Appendf(b, `203.0.113.%d - - [30/Nov/2026:10:30:00 +0000] "GET %s HTTP/1.1" 200 0 "-" "-"`+"\n", 1+i/4, target)
	}
	log := filepath.Join(t.TempDir(), "access.log")
	if err := os.WriteFile(log, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r := mustRun(t, Options{Policy: p, Logs: []string{log}})
	if l := limitReport(t, r, "api"); r.Requests != 5 || l.Seen != 4 || l.Denied != 3 || r.Unlimited != 1 {
		t.Errorf("%d requests, %d unlimited; the route's limit saw %d and refused %d", r.Requests, r.Unlimited, l.Seen, l.Denied)
	}
	for _, c := range [][2]string{{"ftp://h/x", "/x"}, {"ws://h", "/"}, {"ws://h?q", "/?q"}, {"/a://b", "/a://b"}, {"1x://h/x", "1x://h/x"}, {"*", "*"}} {
		if got := gateway.OriginPath(c[0]); got != c[1] {
			t.Errorf("gateway.OriginPath(%q) = %q, want %q", c[0], got, c[1])
		}
	}
}
