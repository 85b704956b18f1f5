package gateway

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/accesslog"
	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
)

// recordSink keeps copies of the records a gateway logs.
type recordSink struct {
	mu   sync.Mutex
	recs []accesslog.Record
}

func (s *recordSink) Log(r *accesslog.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := *r
	c.Path = strings.Clone(c.Path)
	s.recs = append(s.recs, c)
}

func (s *recordSink) last(t *testing.T) accesslog.Record {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.recs) == 0 {
		t.Fatal("nothing logged")
	}
	return s.recs[len(s.recs)-1]
}

const accessPolicy = `
server:
  trusted_proxies: [127.0.0.1/32]
  user: {header: X-User}
routes:
  - {name: students, match: {methods: [GET], paths: ["/students/{id}"]}, stage: dev, upstream: none}
  - {name: partner, match: {methods: [GET], paths: ["/partner/**"]}, api_key_required: true, upstream: none}
stages:
  - {name: dev, rate: 1, per: 1h, burst: 2}
plans:
  - {name: trial, rate: 100, quota: {limit: 1, period: DAY}}
keys:
  - {name: trial-1, plan: trial, sha256: KEYHASH}
`

// TestAccessLog: every request leaves one record, refused ones included,
// with the client as resolved, the key by its name and the decision.
func TestAccessLog(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testAccessLog)
}

func testAccessLog(t *testing.T, fr string) {
	p := compilePolicy(t, "access.yaml", strings.Replace(accessPolicy, "KEYHASH", config.HashKey("secret-trial"), 1))
	up := newUpstream(t, nil)
	u, _ := url.Parse(up.URL)
	pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{Upstream: u})
	if err != nil {
		t.Fatal(err)
	}
	sink := &recordSink{}
	g, err := New(Options{Matcher: pm, Engine: memEngine(t), AccessLog: sink})
	if err != nil {
		t.Fatal(err)
	}
	frontURL := serveFront(t, fr, g, nil)
	c := newClient(t)
	xff := map[string]string{"X-Forwarded-For": "198.51.100.9", "X-User": "ana", "User-Agent": "test/1"}

	before := time.Now()
	for i, want := range []struct {
		status   int
		decision accesslog.Decision
		limit    string
	}{{200, accesslog.Allow, "stage.dev"}, {200, accesslog.Allow, "stage.dev"}, {429, accesslog.Deny, "stage.dev"}} {
		a := do(t, c, "GET", frontURL+"/students/9", xff)
		r := sink.last(t)
		if a.status != want.status || r.Status != want.status || r.Decision != want.decision || r.Limit != want.limit {
			t.Fatalf("request %d: answer %d, record %+v", i, a.status, r)
		}
		if r.ClientIP.String() != "198.51.100.9" || r.User != "ana" || r.Route != "students" || r.Method != "GET" ||
			r.Path != "/students/9" || r.Bytes != int64(len(a.body)) || r.UserAgent != "test/1" || r.Proto != "HTTP/1.1" {
			t.Errorf("request %d: record %+v", i, r)
		}
		// Time is the store's decision instant, after the arrival that
		// Duration is measured from: their sum may pass the answer's end.
		if now := time.Now(); r.Time.Before(before) || r.Time.After(now) || r.Duration <= 0 || r.Duration > now.Sub(before) {
			t.Errorf("request %d: time %v, duration %v", i, r.Time, r.Duration)
		}
		if want.decision == accesslog.Deny && (r.RetryAfter <= 0 || r.RetryAfter > time.Hour) {
			t.Errorf("retry after %v", r.RetryAfter)
		}
	}

	// The API key by its name; then its quota; an unknown key and no key
	// are refused with 403 once the unknown-key limit allowed them.
	key := map[string]string{"X-Api-Key": "secret-trial"}
	for i, want := range []struct {
		status   int
		decision accesslog.Decision
	}{{200, accesslog.Allow}, {429, accesslog.Deny}} {
		a := do(t, c, "GET", frontURL+"/partner/1", key)
		r := sink.last(t)
		if a.status != want.status || r.Status != want.status || r.Key != "trial-1" || r.Decision != want.decision {
			t.Errorf("key request %d: %d %+v", i, a.status, r)
		}
	}
	if r := sink.last(t); r.Limit != "trial.quota" {
		t.Errorf("quota denial logged as %q", r.Limit)
	}
	do(t, c, "GET", frontURL+"/partner/1", map[string]string{"X-Api-Key": "guessed"})
	r := sink.last(t)
	if r.Status != 403 || r.Decision != accesslog.Allow || r.Limit != policy.UnknownKeyLimitName || !strings.HasPrefix(r.Key, "?") || len(r.Key) != 33 {
		t.Errorf("unknown key: %+v", r)
	}
	do(t, c, "GET", frontURL+"/partner/1", nil)
	if r := sink.last(t); r.Status != 403 || r.Key != "" || r.ClientIP.String() != "127.0.0.1" {
		t.Errorf("no key: %+v", r)
	}
	// No route: 404 from the gateway, no decision.
	do(t, c, "GET", frontURL+"/elsewhere", nil)
	if r := sink.last(t); r.Status != 404 || r.Decision != accesslog.None {
		t.Errorf("no route: %+v", r)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.recs) != 8 {
		t.Errorf("%d records for 8 requests", len(sink.recs))
	}
	for _, r := range sink.recs {
		for _, s := range []string{r.Key, r.User, r.Path, r.Limit, r.Route, r.Referer, r.UserAgent} {
			if strings.Contains(s, "secret-trial") || strings.Contains(s, "guessed") {
				t.Errorf("a raw key in the log: %+v", r)
			}
		}
	}
}

// TestAccessLogFile runs the gateway's records through a real Logger: one
// JSON line per request.
func TestAccessLogFile(t *testing.T) {
	t.Parallel()
	forFronts(t, allFronts, testAccessLogFile)
}

func testAccessLogFile(t *testing.T, fr string) {
	path := filepath.Join(t.TempDir(), "access.log")
	l, err := accesslog.New(accesslog.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	m := oneRule(ruletest.Rule(t, benchLimit()))
	_, frontURL, c := startFront(t, fr, Options{Matcher: m, Engine: memEngine(t), AccessLog: l},
		func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("hello")) })
	for range 5 {
		do(t, c, "GET", frontURL+"/x", nil)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	lines := readFileLines(t, path)
	if len(lines) != 5 {
		t.Fatalf("%d lines", len(lines))
	}
	for _, line := range lines {
		if !strings.Contains(line, `"ip":"127.0.0.1","method":"GET"`) || !strings.Contains(line, `"status":200,"bytes":5,`) ||
			!strings.Contains(line, `"decision":"allow"`) {
			t.Errorf("line %s", line)
		}
	}
}

func benchLimit() floodgate.Limit {
	return floodgate.Limit{Name: "wide", Algorithm: floodgate.TokenBucket, Rate: 100_000_000, Per: time.Second, Burst: 1 << 40}
}

func readFileLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// benchAccessLog opens an access log in a temporary file, as serve does.
func benchAccessLog(b *testing.B, format accesslog.Format) *accesslog.Logger {
	l, err := accesslog.New(accesslog.Options{Path: filepath.Join(b.TempDir(), "access.log"), Format: format, MaxSize: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if st := l.Stats(); st.Dropped > 0 {
			b.Logf("access log: %d records dropped of %d", st.Dropped, st.Dropped+st.Records)
		}
		_ = l.Close()
	})
	return l
}

// BenchmarkPolicyPassAccessLog is BenchmarkPolicyPass writing a JSON
// access log to a file: the cost of the log on the pass path.
func BenchmarkPolicyPassAccessLog(b *testing.B) {
	benchGateway(b, policyGateway(b, benchPolicy, nil, benchAccessLog(b, accesslog.FormatJSON)), 200, "/notices/1", nil)
}

// BenchmarkPolicyPassAccessLogCombined is the same in the combined format.
func BenchmarkPolicyPassAccessLogCombined(b *testing.B) {
	benchGateway(b, policyGateway(b, benchPolicy, nil, benchAccessLog(b, accesslog.FormatCombined)), 200, "/notices/1", nil)
}

// BenchmarkProxyFloodgateAccessLog is BenchmarkProxyFloodgate writing a
// JSON access log to a file.
func BenchmarkProxyFloodgateAccessLog(b *testing.B) {
	u := benchUpstream(b)
	benchProxy(b, policyGateway(b, benchPolicy, u, benchAccessLog(b, accesslog.FormatJSON)))
}

// TestAccessLogDurationOnTheGatewaysClock: a record's duration is
// measured on the gateway's clock alone, whatever the store's clock says.
// Before, it was the gateway's clock now less the store's instant of the
// decision (the record's time): a store an hour ahead logged a duration
// of minus an hour, one an hour behind a request of an hour, and a replay,
// which ends each request at time plus duration, released its leases
// before it took them or an hour late.
func TestAccessLogDurationOnTheGatewaysClock(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testAccessLogDurationOnTheGatewaysClock)
}

func testAccessLogDurationOnTheGatewaysClock(t *testing.T, fr string) {
	const policyText = `
routes:
  - {name: slow, match: {paths: ["/**"]}, stage: dev, upstream: UP}
stages:
  - {name: dev, rate: 100, per: 1s, burst: 100}
`
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
		w.Write([]byte("ok"))
	})
	for _, skew := range []time.Duration{time.Hour, -time.Hour} {
		p := compilePolicy(t, "skew.yaml", strings.Replace(policyText, "UP", up.URL, 1))
		pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{})
		if err != nil {
			t.Fatal(err)
		}
		store := newMemStore(t, func() int64 { return time.Now().Add(skew).UnixNano() })
		sink := &recordSink{}
		g, err := New(Options{Matcher: pm, Engine: limiter.New(store, limiter.Options{}), AccessLog: sink})
		if err != nil {
			t.Fatal(err)
		}
		frontURL := serveFront(t, fr, g, nil)
		start := time.Now()
		if a := do(t, newClient(t), "GET", frontURL+"/x", nil); a.status != 200 {
			t.Fatalf("store %v off: status %d", skew, a.status)
		}
		took := time.Since(start)
		r := sink.last(t)
		if d := r.Time.Sub(start.Add(skew)); d < -time.Minute || d > time.Minute {
			t.Errorf("store %v off: the record's time %v is not the store's instant of the decision", skew, r.Time)
		}
		if r.Duration < 20*time.Millisecond || r.Duration > took {
			t.Errorf("store %v off: duration %v, want the 20 ms the upstream took at least, at most the %v the client waited", skew, r.Duration, took)
		}
	}
}

// TestAccessLogRefusedBeforeTheRequestPath: a request the engine answers
// before any route or limit (a fragment in its target, CONNECT, OPTIONS
// *) leaves its record like any other, on each engine, with the peer as
// its client and no query. Before, they left none: a client probing the
// gateway with targets read two ways was invisible in its log.
func TestAccessLogRefusedBeforeTheRequestPath(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testAccessLogRefusedBeforeTheRequestPath)
}

func testAccessLogRefusedBeforeTheRequestPath(t *testing.T, fr string) {
	rule := ruletest.Rule(t, floodgate.Limit{Name: "wide", Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Hour})
	sink := &recordSink{}
	_, base, _ := startFront(t, fr, Options{Matcher: oneRule(rule), Engine: memEngine(t), AccessLog: sink},
		func(w http.ResponseWriter, r *http.Request) {})
	for _, c := range []struct {
		head, method, path string
		status             int
	}{
		{"GET /public#/../admin?token=s3cret HTTP/1.1\r\nHost: a.example\r\n\r\n", "GET", "/public#/../admin", 400},
		{"GET http://a.example/x#y?token=s3cret HTTP/1.1\r\nHost: a.example\r\n\r\n", "GET", "/x#y", 400},
		{"CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n", "CONNECT", "a.example:443", 405},
		{"OPTIONS * HTTP/1.1\r\nHost: a.example\r\n\r\n", "OPTIONS", "*", 200},
	} {
		if c.method == "OPTIONS" && fr == frontNetHTTP {
			continue // httptest's server answers OPTIONS * itself; serve's leaves it to the gateway
		}
		sink.mu.Lock()
		before := len(sink.recs)
		sink.mu.Unlock()
		if status := rawStatus(t, base, c.head); status != c.status {
			t.Fatalf("%q: status %d, want %d", c.head, status, c.status)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			sink.mu.Lock()
			n := len(sink.recs)
			sink.mu.Unlock()
			if n > before || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		sink.mu.Lock()
		recs := append([]accesslog.Record(nil), sink.recs[before:]...)
		sink.mu.Unlock()
		if len(recs) != 1 {
			t.Errorf("%q: %d records, want 1", c.head, len(recs))
			continue
		}
		r := recs[0]
		if r.Status != c.status || r.Method != c.method || r.Path != c.path || r.Decision != accesslog.None ||
			r.ClientIP.String() != "127.0.0.1" || r.Route != "" || r.Proto != "HTTP/1.1" || r.Duration < 0 {
			t.Errorf("%q: record %+v", c.head, r)
		}
	}
}
