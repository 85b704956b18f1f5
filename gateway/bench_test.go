package gateway

import (
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/bufpool"
	"github.com/floodgate/floodgate/internal/racecheck"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// discardWriter is a ResponseWriter that keeps nothing, reused across
// iterations so that the benchmark measures the gateway alone.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }

func benchGateway(b *testing.B, g *Gateway, wantCode int, path string, hdr map[string]string) {
	benchGatewayAfter(b, g, wantCode, path, hdr, 0)
}

// benchGatewayAfter is benchGateway after warm requests whose answers are
// not checked.
func benchGatewayAfter(b *testing.B, g *Gateway, wantCode int, path string, hdr map[string]string, warm int) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
	h := g.Middleware(ok)
	for range warm {
		r := httptest.NewRequest("GET", path, nil)
		for k, v := range hdr {
			r.Header.Set(k, v)
		}
		h.ServeHTTP(&discardWriter{h: http.Header{}}, r)
	}
	var bad atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		r := httptest.NewRequest("GET", path, nil)
		for k, v := range hdr {
			r.Header.Set(k, v)
		}
		w := &discardWriter{h: http.Header{}}
		for pb.Next() {
			clear(w.h)
			h.ServeHTTP(w, r)
			if w.code != wantCode {
				bad.Add(1)
			}
		}
	})
	if n := bad.Load(); n > 0 {
		b.Fatalf("%d answers were not %d", n, wantCode)
	}
}

// BenchmarkMiddlewarePass: one token bucket that never denies, on the
// memory store.
func BenchmarkMiddlewarePass(b *testing.B) {
	rule := ruletest.Rule(b, floodgate.Limit{Name: "wide", Algorithm: floodgate.TokenBucket, Rate: 100_000_000, Per: time.Second, Burst: 1 << 40})
	var n atomic.Int64
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	m := funcMatcher(func(_ *Request, m *Match) error {
		m.Hits = append(m.Hits, limiter.Hit{Rule: rule, Key: keys[n.Add(1)&63], Cost: 1})
		return nil
	})
	g, err := New(Options{Matcher: m, Engine: limiter.New(newMemStore(b, nil), limiter.Options{})})
	if err != nil {
		b.Fatal(err)
	}
	benchGateway(b, g, 200, "/x", nil)
}

// BenchmarkMiddlewareReject: a limit of one request an hour, so nearly
// every request gets 429.
func BenchmarkMiddlewareReject(b *testing.B) {
	rule := ruletest.Rule(b, floodgate.Limit{Name: "tiny", Algorithm: floodgate.TokenBucket, Rate: 1, Per: time.Hour, Burst: 1})
	m := oneRule(rule)
	g, err := New(Options{Matcher: m, Engine: limiter.New(newMemStore(b, nil), limiter.Options{})})
	if err != nil {
		b.Fatal(err)
	}
	// Take the one token first.
	g.Middleware(http.NotFoundHandler()).ServeHTTP(&discardWriter{h: http.Header{}}, httptest.NewRequest("GET", "/", nil))
	benchGateway(b, g, 429, "/x", nil)
}

// benchPolicy is a policy file with the shape of the school's prod stage
// and limits too wide to be reached by a benchmark.
const benchPolicy = `version: 1
routes:
  - name: notices
    match: {paths: ["/notices/**"]}
    upstream: http://127.0.0.1:9
    stage: prod
stages:
  - name: prod
    rate: 100000000
    burst: 100000000
limits:
  - name: per-ip
    rate: 1000000
    burst: 1000000
    key: client_ip
    scope: global
  - name: per-ip-trial
    rate: 1000000
    burst: 1000000
    key: client_ip
    shadow: true
    scope: global
  - name: notice-api
    rate: 100000000
    burst: 100000000
    key: global
    scope: global
`

// policyGateway is a Gateway on the embedded store enforcing the policy
// file src, its routes sent to upstream when that is set, writing its
// access log to alog when that is set.
func policyGateway(b testing.TB, src string, upstream *url.URL, alog AccessLogger) *Gateway {
	b.Helper()
	p := compilePolicy(b, "bench.yaml", src)
	pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{Upstream: upstream})
	if err != nil {
		b.Fatal(err)
	}
	g, err := New(Options{Matcher: pm, Engine: limiter.New(newMemStore(b, nil), limiter.Options{}), AccessLog: alog})
	if err != nil {
		b.Fatal(err)
	}
	return g
}

// BenchmarkPolicyPass: a policy file, identity, the engine and four limits
// (stage, per address, a shadow rule, a global one), none of them reached.
func BenchmarkPolicyPass(b *testing.B) {
	benchGateway(b, policyGateway(b, benchPolicy, nil, nil), 200, "/notices/1", nil)
}

// benchProxy sends GETs over loopback through front to a trivial upstream,
// from parallel clients with keep-alive connections.
func benchProxy(b *testing.B, front http.Handler) {
	srv := httptest.NewServer(front)
	defer srv.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := c.Get(srv.URL + "/notices/1")
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
}

func benchUpstream(b *testing.B) *url.URL {
	up := newUpstream(b, nil)
	u, _ := url.Parse(up.URL)
	return u
}

// BenchmarkProxyBare is httputil.ReverseProxy with the gateway's transport
// and buffers, for comparison with BenchmarkProxyFloodgate (the whole
// process: client, proxy and upstream, so allocs/op include all three).
func BenchmarkProxyBare(b *testing.B) {
	u := benchUpstream(b)
	rp := &httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() },
		Transport:  NewTransport(TransportOptions{}),
		BufferPool: bufpool.Copy,
	}
	benchProxy(b, rp)
}

// BenchmarkProxyFloodgate is the gateway as a reverse proxy with a policy
// file of four limits that are never reached.
func BenchmarkProxyFloodgate(b *testing.B) {
	u := benchUpstream(b)
	benchProxy(b, policyGateway(b, benchPolicy, u, nil))
}

// overloadBenchPolicy is a route with one limit that never denies, and
// with the overload block given (none when block is "").
func overloadBenchPolicy(block string) string {
	src := `
routes:
  - name: api
    match: {paths: ["/**"]}
    upstream: none
`
	if block != "" {
		src += "    overload: " + block + "\n"
	}
	return src + `limits:
  - {name: per-ip, rate: 1000000000, burst: 1000000000}
`
}

// overloadBenchCases are a route without overload control, with a fixed
// cap, and with an adaptive one (bounds that keep it from refusing).
var overloadBenchCases = []struct{ name, block string }{
	{"none", ""},
	{"limit", "{limit: 100000}"},
	{"adaptive", "{adaptive: {min: 100000, max: 100000, initial: 100000}}"},
}

// BenchmarkOverloadPass: the middleware's healthy path on a route without
// overload control and with one that admits every request: the cost of
// the controller (a lookup, a lock to take and one to give the place
// back, the adaptive limit's sample).
func BenchmarkOverloadPass(b *testing.B) {
	for _, c := range overloadBenchCases {
		b.Run(c.name, func(b *testing.B) {
			benchGateway(b, policyGateway(b, overloadBenchPolicy(c.block), nil, nil), 200, "/x", nil)
		})
	}
}

// TestOverloadAllocs: overload control adds no allocation to a request
// it admits at once.
func TestOverloadAllocs(t *testing.T) {
	if racecheck.Enabled {
		t.Skip("under the race detector sync.Pool drops items at random: allocations are not counted")
	}
	allocs := map[string]float64{}
	for _, c := range overloadBenchCases {
		g := policyGateway(t, overloadBenchPolicy(c.block), nil, nil)
		h := g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) }))
		r := httptest.NewRequest("GET", "/x", nil)
		w := &discardWriter{h: http.Header{}}
		// AllocsPerRun counts the whole process's allocations, which
		// goroutines left by other tests add to: the least of a few runs
		// is the request's own.
		allocs[c.name] = math.MaxFloat64
		for range 5 {
			allocs[c.name] = min(allocs[c.name], testing.AllocsPerRun(200, func() {
				clear(w.h)
				h.ServeHTTP(w, r)
				if w.code != 200 {
					t.Fatalf("status %d", w.code)
				}
			}))
		}
	}
	if allocs["limit"] > allocs["none"] || allocs["adaptive"] > allocs["none"] {
		t.Errorf("allocations per request: %v; overload control added some", allocs)
	}
	if testing.Verbose() {
		t.Logf("allocations per request: %v", allocs)
	}
}
