package accesslog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func sample() *Record {
	return &Record{
		Time:       time.Date(2026, 11, 30, 10, 0, 0, 123456789, time.UTC),
		ClientIP:   netip.MustParseAddr("203.0.113.7"),
		Method:     "GET",
		Host:       "api.example.com",
		Path:       "/students/9",
		Proto:      "HTTP/1.1",
		Status:     429,
		Bytes:      32,
		Duration:   1234567 * time.Nanosecond,
		Key:        "partner-1",
		User:       "ana",
		Route:      "students",
		Limit:      "stage.dev",
		Decision:   Deny,
		RetryAfter: 199999500 * time.Nanosecond,
		UserAgent:  "curl/8.5.0",
	}
}

func TestJSON(t *testing.T) {
	line := string(AppendJSON(nil, sample()))
	want := `{"time":"2026-11-30T10:00:00.123456Z","ip":"203.0.113.7","method":"GET","host":"api.example.com","path":"/students/9","proto":"HTTP/1.1","status":429,"bytes":32,"duration_us":1234,"route":"students","key":"partner-1","user":"ana","limit":"stage.dev","decision":"deny","retry_after_us":200000,"user_agent":"curl/8.5.0"}` + "\n"
	if line != want {
		t.Errorf("got  %s\nwant %s", line, want)
	}
	// Whatever a client sends, the line is one valid JSON object.
	r := &Record{Time: time.Unix(0, 0), Method: "G\"ET", Path: "/a\nb\\c\x00\xff\u00e9", User: "\t", Decision: None}
	line = string(AppendJSON(nil, r))
	if strings.Count(line, "\n") != 1 {
		t.Fatalf("line breaks in %q", line)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	if m["path"] != "/a\nb\\c\x00\ufffd\u00e9" || m["method"] != "G\"ET" || m["user"] != "\t" || m["ip"] != "" || m["decision"] != "none" {
		t.Errorf("decoded %v", m)
	}
	if _, ok := m["key"]; ok {
		t.Errorf("an empty key is written: %s", line)
	}
}

// TestJSONOverload: a request on a route with overload control has its
// tier, and a shed one why it was shed.
func TestJSONOverload(t *testing.T) {
	r := sample()
	r.Status, r.Decision, r.RetryAfter, r.Tier, r.Shed = 503, Allow, 0, "sheddable", "timeout"
	line := string(AppendJSON(nil, r))
	if !strings.Contains(line, `"decision":"allow","tier":"sheddable","shed":"timeout","user_agent"`) {
		t.Errorf("line %s", line)
	}
	r.Shed = ""
	if line := string(AppendJSON(nil, r)); strings.Contains(line, `"shed"`) || !strings.Contains(line, `"tier":"sheddable"`) {
		t.Errorf("admitted: %s", line)
	}
}

func TestCombined(t *testing.T) {
	line := string(AppendCombined(nil, sample()))
	want := `203.0.113.7 - ana [30/Nov/2026:10:00:00 +0000] "GET /students/9 HTTP/1.1" 429 32 "-" "curl/8.5.0" 0.001234 1796032800.124690 "partner-1" "stage.dev" "deny" "-" "-" "-" "-"` + "\n"
	if line != want {
		t.Errorf("got  %s\nwant %s", line, want)
	}
	r := &Record{Time: time.Unix(5, 0), Method: "GET", Path: "/a b\"%", User: "x y", UserAgent: `say "hi"`}
	line = string(AppendCombined(nil, r))
	want = `- - x\x20y [01/Jan/1970:00:00:05 +0000] "GET /a%20b%22%25 -" 0 0 "-" "say \x22hi\x22" 0.000000 5.000000 "-" "-" "none" "-" "-" "-" "-"` + "\n"
	if line != want {
		t.Errorf("got  %s\nwant %s", line, want)
	}
	// No address names the client: whom the limits counted.
	r = &Record{Time: time.Unix(5, 0), ClientIP: netip.MustParseAddr("10.0.0.2"), ClientKey: "unknown@ip:10.0.0.2", Method: "GET", Path: "/"}
	if line := string(AppendCombined(nil, r)); !strings.HasPrefix(line, "10.0.0.2 - ") || !strings.HasSuffix(line, `"none" "unknown@ip:10.0.0.2" "-" "-" "-"`+"\n") {
		t.Errorf("unknown client: %s", line)
	}
	// Decided by the failure policies, shed by overload control,
	// answered by the gatekeeper: why, each in its field.
	r = &Record{Time: time.Unix(5, 0), Method: "GET", Path: "/", Decision: Allow, Degraded: "deadline"}
	if line := string(AppendCombined(nil, r)); !strings.HasSuffix(line, `"allow" "-" "deadline" "-" "-"`+"\n") {
		t.Errorf("degraded: %s", line)
	}
	r = &Record{Time: time.Unix(5, 0), Method: "GET", Path: "/", Status: 503, Decision: Allow, Tier: "sheddable", Shed: "queue_full"}
	if line := string(AppendCombined(nil, r)); !strings.HasSuffix(line, `"allow" "-" "-" "queue_full" "-"`+"\n") {
		t.Errorf("shed: %s", line)
	}
	r = &Record{Time: time.Unix(5, 0), Method: "GET", Path: "/", Status: 429, Decision: None, Screened: ScreenedBanned}
	if line := string(AppendCombined(nil, r)); !strings.HasSuffix(line, `"none" "-" "-" "-" "banned"`+"\n") {
		t.Errorf("screened: %s", line)
	}
}

// TestTimeFormat: the hand-written time is the layout's, to the
// microsecond, in UTC, whatever the zone and the year.
func TestTimeFormat(t *testing.T) {
	kolkata := time.FixedZone("IST", 5*3600+1800)
	for _, tm := range []time.Time{
		time.Date(2026, 11, 30, 10, 0, 0, 123456789, time.UTC),
		time.Date(2026, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(2024, 2, 29, 4, 5, 6, 7000, kolkata),
		time.Unix(0, 0),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		want := tm.UTC().Truncate(time.Microsecond).Format(TimeLayout)
		if got := string(appendTime(nil, tm)); got != want {
			t.Errorf("%v: %s, want %s", tm, got, want)
		}
	}
}

func TestParseNames(t *testing.T) {
	for _, d := range []Decision{None, Allow, Deny, Error} {
		if got, err := ParseDecision(d.String()); err != nil || got != d {
			t.Errorf("%v: %v %v", d, got, err)
		}
	}
	if _, err := ParseDecision("maybe"); err == nil {
		t.Error("no error for an unknown decision")
	}
	for _, f := range []Format{FormatJSON, FormatCombined} {
		if got, err := ParseFormat(f.String()); err != nil || got != f {
			t.Errorf("%v: %v %v", f, got, err)
		}
	}
	if _, err := ParseFormat("xml"); err == nil {
		t.Error("no error for an unknown format")
	}
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Fatalf("%s ends in the middle of a line", path)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// TestRotation: files are rotated by size, the oldest beyond MaxFiles is
// removed, and no line is split or lost across files.
func TestRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log")
	l, err := New(Options{Path: path, MaxSize: 4 << 10, MaxFiles: 3, BufferSize: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	// The writer empties a small buffer quickly; to keep the test free of
	// timing, each record waits until it was accepted (not dropped).
	const n = 400
	for i := range n {
		r := sample()
		r.Path = fmt.Sprintf("/r/%d", i)
		for {
			before := l.Stats().Dropped
			l.Log(r)
			if l.Stats().Dropped == before {
				break
			}
			l.kickWriter()
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	st := l.Stats()
	if st.Records != n || st.Rotations == 0 || st.Errors != 0 {
		t.Fatalf("stats %+v", st)
	}
	seen := map[string]bool{}
	for _, name := range []string{"access.log.3", "access.log.2", "access.log.1", "access.log"} {
		for _, line := range readLines(t, filepath.Join(dir, name)) {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("%s: %q: %v", name, line, err)
			}
			seen[m["path"].(string)] = true
		}
		if fi, _ := os.Stat(filepath.Join(dir, name)); fi.Size() > 4<<10+1<<10 {
			t.Errorf("%s has %d bytes", name, fi.Size())
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "access.log.4")); err == nil {
		t.Error("more rotated files than MaxFiles")
	}
	// The newest lines are all there, in the kept files.
	if !seen[fmt.Sprintf("/r/%d", n-1)] || len(seen) >= n {
		t.Errorf("%d lines kept of %d (rotations %d)", len(seen), n, st.Rotations)
	}
}

// kickWriter wakes the writer goroutine (for tests that fill the buffer).
func (l *Logger) kickWriter() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// stuckWriter blocks every Write until released.
type stuckWriter struct {
	release chan struct{}
	mu      sync.Mutex
	b       bytes.Buffer
	entered chan struct{}
	once    sync.Once
}

func (w *stuckWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.entered) })
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// TestFullBufferDrops: with the disk stuck, Log keeps returning and counts
// what it drops; what it accepted is written once the disk comes back.
func TestFullBufferDrops(t *testing.T) {
	w := &stuckWriter{release: make(chan struct{}), entered: make(chan struct{})}
	l, err := New(Options{Out: w, BufferSize: 2 << 10})
	if err != nil {
		t.Fatal(err)
	}
	r := sample()
	l.Log(r)
	l.kickWriter()
	<-w.entered // the writer is now stuck in Write
	const n = 1000
	for range n {
		l.Log(r) // must not block
	}
	st := l.Stats()
	if st.Dropped == 0 || st.Records+st.Dropped != n+1 {
		t.Fatalf("stats %+v", st)
	}
	close(w.release)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	lines := 0
	sc := bufio.NewScanner(&w.b)
	for sc.Scan() {
		lines++
	}
	if uint64(lines) != st.Records {
		t.Errorf("%d lines written, %d records accepted", lines, st.Records)
	}
}

// TestConcurrentLog: many goroutines log at once; every line is whole.
func TestConcurrentLog(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "a.log")
	l, err := New(Options{Path: path, Format: FormatCombined, BufferSize: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := sample()
			r.User = fmt.Sprintf("user%d", g)
			for range 500 {
				l.Log(r)
			}
		}()
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l.Log(sample()) // after Close: dropped, no panic
	lines := readLines(t, path)
	if len(lines) != 4000 {
		t.Fatalf("%d lines", len(lines))
	}
	for _, line := range lines {
		if !strings.HasPrefix(line, "203.0.113.7 - user") || !strings.HasSuffix(line, `"deny" "-" "-" "-" "-"`) {
			t.Fatalf("torn line %q", line)
		}
	}
}

func TestOptionsErrors(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Error("no error without a destination")
	}
	if _, err := New(Options{Path: filepath.Join(t.TempDir(), "missing", "a.log")}); err == nil {
		t.Error("no error for a directory that does not exist")
	}
}

func BenchmarkLogJSON(b *testing.B) {
	l, err := New(Options{Out: discard{}, BufferSize: 64 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	r := sample()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Log(r)
		}
	})
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
