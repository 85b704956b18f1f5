package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/internal/sfv"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memstore"
)

// testClock is the memstore clock the tests move by hand, so that "the same
// instant" is exactly that on a loaded machine.
type testClock struct{ ns atomic.Int64 }

func newTestClock() *testClock {
	c := &testClock{}
	c.ns.Store(time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *testClock) Now() int64              { return c.ns.Load() }
func (c *testClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// Time is Now as a time.Time, for a gateway's clock (Options.Now).
func (c *testClock) Time() time.Time { return time.Unix(0, c.Now()) }

func newMemStore(t testing.TB, now func() int64) *memstore.Store {
	t.Helper()
	s, err := memstore.New(memstore.Options{Now: now, SnapshotInterval: -1, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// memEngine is an engine with default options on a new embedded store on
// the real clock.
func memEngine(t testing.TB) *limiter.Limiter {
	t.Helper()
	return limiter.New(newMemStore(t, nil), limiter.Options{})
}

// funcMatcher is a Matcher written as a function, for tests that do not
// need a whole policy file.
type funcMatcher = MatcherFunc

// upstream is a real HTTP server on loopback that counts what it served.
type upstream struct {
	*httptest.Server
	served atomic.Int64
}

func newUpstream(t testing.TB, h http.HandlerFunc) *upstream {
	t.Helper()
	u := &upstream{}
	if h == nil {
		h = func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"ok":true}`)
		}
	}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.served.Add(1)
		h(w, r)
	}))
	t.Cleanup(u.Close)
	return u
}

// answer is one response as the tests look at it.
type answer struct {
	status int
	header http.Header
	body   string
}

// doN sends n GET requests to url one after the other.
func doN(t testing.TB, c *http.Client, n int, url string, hdr map[string]string) []answer {
	out := make([]answer, n)
	for i := range out {
		out[i] = do(t, c, "GET", url, hdr)
	}
	return out
}

func do(t testing.TB, c *http.Client, method, url string, hdr map[string]string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

// serve runs one request through h in process, without a connection.
func serve(h http.Handler, method, target string, hdr map[string]string) answer {
	req := httptest.NewRequest(method, target, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return answer{rec.Code, rec.Header(), rec.Body.String()}
}

func statuses(as []answer) []int {
	out := make([]int, len(as))
	for i, a := range as {
		out[i] = a.status
	}
	return out
}

// checkFields parses the RateLimit fields and Retry-After of a 429 and
// checks them against the decision the test expects: the binding limit's
// name first, its remaining r and reset t, and a Retry-After of at least 1
// and at least t.
func checkFields(t testing.TB, a answer, binding string, r, tWant, retryWant int64) {
	t.Helper()
	items, err := sfv.ParseList(a.header.Get("RateLimit"))
	if err != nil || len(items) == 0 {
		t.Fatalf("RateLimit %q: %v", a.header.Get("RateLimit"), err)
	}
	pol, err := sfv.ParseList(a.header.Get("RateLimit-Policy"))
	if err != nil || len(pol) != len(items) {
		t.Fatalf("RateLimit-Policy %q: %v", a.header.Get("RateLimit-Policy"), err)
	}
	for i := range items {
		n1, _ := items[i].Name()
		n2, _ := pol[i].Name()
		if n1 != n2 {
			t.Errorf("item %d: RateLimit names %q, RateLimit-Policy %q", i, n1, n2)
		}
		if _, ok := pol[i].Int("q"); !ok {
			t.Errorf("policy item %d has no q", i)
		}
	}
	if name, _ := items[0].Name(); name != binding {
		t.Errorf("binding item %q, want %q (RateLimit: %s)", name, binding, a.header.Get("RateLimit"))
	}
	if got, _ := items[0].Int("r"); got != r {
		t.Errorf("r=%d, want %d", got, r)
	}
	gotT, hasT := items[0].Int("t")
	if tWant >= 0 && (!hasT || gotT != tWant) {
		t.Errorf("t=%d (present %v), want %d", gotT, hasT, tWant)
	}
	if a.status == http.StatusTooManyRequests {
		ra, err := strconv.ParseInt(a.header.Get("Retry-After"), 10, 64)
		if err != nil {
			t.Fatalf("Retry-After %q: %v", a.header.Get("Retry-After"), err)
		}
		if ra < 1 || (hasT && ra < gotT) {
			t.Errorf("Retry-After %d below 1 or below t=%d", ra, gotT)
		}
		if retryWant > 0 && ra != retryWant {
			t.Errorf("Retry-After %d, want %d", ra, retryWant)
		}
	}
}

// The fronts the end-to-end tests run on: the net/http middleware, and the
// reverse proxy on each engine. One behaviour, whatever serves it.
const (
	frontMiddleware = "middleware"
	frontNetHTTP    = "net/http"
	frontEdge       = "edge"
)

var (
	// allFronts suit tests whose handler could be the middleware's next
	// handler or an upstream.
	allFronts = []string{frontMiddleware, frontNetHTTP, frontEdge}
	// proxyFronts suit tests of the reverse proxy.
	proxyFronts = []string{frontNetHTTP, frontEdge}
)

// forFronts runs f as a parallel subtest on each front.
func forFronts(t *testing.T, fronts []string, f func(t *testing.T, front string)) {
	t.Helper()
	for _, front := range fronts {
		t.Run(front, func(t *testing.T) {
			t.Parallel()
			f(t, front)
		})
	}
}

// forFrontsAlone runs f as a subtest on each front, one after the other,
// for tests that measure the process (its allocations).
func forFrontsAlone(t *testing.T, fronts []string, f func(t *testing.T, front string)) {
	t.Helper()
	for _, front := range fronts {
		t.Run(front, func(t *testing.T) { f(t, front) })
	}
}

// withUpstream is a Matcher that sends the requests its matcher gives no
// upstream to one; it keeps the matcher's UserMatcher.
type withUpstream struct {
	Matcher
	u *url.URL
}

func (w withUpstream) Match(r *Request, m *Match) error {
	err := w.Matcher.Match(r, m)
	if m.Upstream == nil {
		m.Upstream = w.u
	}
	return err
}

func (w withUpstream) MatchUser(r *Request, m *Match) error {
	err := w.Matcher.(UserMatcher).MatchUser(r, m)
	if m.Upstream == nil {
		m.Upstream = w.u
	}
	return err
}

// startFront builds a Gateway from opts and serves it on front, on
// loopback. h, when not nil, is what the requests that pass reach: the
// middleware's next handler, or for the proxies a real upstream, where the
// gateway forwards what its matcher sends nowhere else. It returns the
// gateway, its base URL and a client of its own.
func startFront(t testing.TB, front string, opts Options, h http.HandlerFunc) (*Gateway, string, *http.Client) {
	t.Helper()
	if h != nil && front != frontMiddleware {
		up := httptest.NewServer(h)
		t.Cleanup(up.Close)
		u, _ := url.Parse(up.URL)
		if pm, ok := opts.Matcher.(*PolicyMatcher); ok {
			pm.upstream = u // every route goes there, as with --demo
		} else if _, ok := opts.Matcher.(UserMatcher); ok {
			opts.Matcher = withUpstream{opts.Matcher, u}
		} else {
			opts.Matcher = MatcherFunc(withUpstream{opts.Matcher, u}.Match)
		}
	}
	g, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	base := serveFront(t, front, g, h)
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	return g, base, &http.Client{Transport: tr, Timeout: 60 * time.Second}
}

// policyFront serves on front a gateway enforcing the policy file src
// (named name) on a new embedded store, every route forwarded to h as
// startFront does, and returns its base URL.
func policyFront(t testing.TB, front, name, src string, h http.HandlerFunc) string {
	t.Helper()
	pm, err := NewPolicyMatcher(Fixed(compilePolicy(t, name, src)), PolicyMatcherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, base, _ := startFront(t, front, Options{Matcher: pm, Engine: memEngine(t)}, h)
	return base
}

// EdgeFront serves g on the edge engine (package gateway/edge) on
// loopback until the test ends, and returns its base URL. The edge engine
// imports this package, so its tests set EdgeFront from package
// gateway_test (edgefront_test.go).
var EdgeFront func(t testing.TB, g *Gateway) string

// serveFront serves g on front and returns its base URL.
func serveFront(t testing.TB, front string, g *Gateway, h http.HandlerFunc) string {
	t.Helper()
	switch front {
	case frontMiddleware:
		var next http.Handler = http.NotFoundHandler()
		if h != nil {
			next = h
		}
		srv := httptest.NewServer(g.Middleware(next))
		t.Cleanup(srv.Close)
		return srv.URL
	case frontNetHTTP:
		srv := httptest.NewServer(g)
		t.Cleanup(srv.Close)
		return srv.URL
	case frontEdge:
		if EdgeFront == nil {
			t.Fatal("no edge engine: edgefront_test.go sets EdgeFront")
		}
		return EdgeFront(t, g)
	}
	t.Fatalf("unknown front %q", front)
	return ""
}

// newClient returns a client of its own for a test.
func newClient(t testing.TB) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 60 * time.Second}
}

// compilePolicy parses and compiles the policy file src, named name.
func compilePolicy(tb testing.TB, name, src string) *policy.Policy {
	tb.Helper()
	f, err := config.Parse(name, []byte(src))
	if err != nil {
		tb.Fatal(err)
	}
	p, err := policy.Compile(f, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}
