package replay

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/floodgate/floodgate/accesslog"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memstore"
)

// liveGateway starts a gateway of p on loopback (its routes name their
// upstreams), on an embedded store read at the wall clock so that its
// access log, kept in memory, has each decision's instant.
func liveGateway(t *testing.T, p *policy.Policy) (url string, log *recordLog, g *gateway.Gateway) {
	t.Helper()
	return liveGatewayServer(t, p, func(*http.Server) {})
}

// liveGatewayServer is liveGateway with its HTTP server set up by setup
// before it starts (its timeouts).
func liveGatewayServer(t *testing.T, p *policy.Policy, setup func(*http.Server)) (url string, log *recordLog, g *gateway.Gateway) {
	t.Helper()
	st, err := memstore.New(memstore.Options{Now: func() int64 { return time.Now().UnixNano() }, SweepInterval: -1, SnapshotInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	pm, err := gateway.NewPolicyMatcher(gateway.Fixed(p), gateway.PolicyMatcherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	log = &recordLog{}
	g, err = gateway.New(gateway.Options{Matcher: pm, Engine: limiter.New(st, gateway.EngineOptions(p.Server())), AccessLog: log})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewUnstartedServer(g)
	setup(front.Config)
	front.Start()
	t.Cleanup(front.Close)
	return front.URL, log, g
}

// writeAccessLog writes the first n records of log as a JSON access log
// file, in the order they were logged.
func writeAccessLog(t *testing.T, log *recordLog, n int) string {
	t.Helper()
	log.wait(t, n)
	var b []byte
	for i := range n {
		lr := log.get(i)
		b = accesslog.AppendJSON(b, &lr)
	}
	file := filepath.Join(t.TempDir(), "access.log")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// okUpstream starts an upstream on loopback that answers every request
// 200 "ok", closed when t ends, and returns its URL.
func okUpstream(t *testing.T) string {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") }))
	t.Cleanup(up.Close)
	return up.URL
}

// newGet returns a GET request for url.
func newGet(t *testing.T, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// sendEach sends each request of reqs in turn to the gateway whose access
// log is log, waiting for the gateway to log each before the next, and
// returns the statuses it answered.
func sendEach(t *testing.T, log *recordLog, reqs []*http.Request) []int {
	t.Helper()
	var codes []int
	for i, req := range reqs {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
		log.wait(t, i+1)
	}
	return codes
}

// sendAnswered is sendEach that stops t at once unless the statuses the
// gateway answered print as want ("[200 429]").
func sendAnswered(t *testing.T, log *recordLog, want string, reqs []*http.Request) {
	t.Helper()
	if codes := sendEach(t, log, reqs); fmt.Sprint(codes) != want {
		t.Fatalf("the gateway answered %v, want %s", codes, want)
	}
}

// liveLog sends each path of paths in turn through a gateway of p on
// loopback and returns the statuses it answered and its access log.
func liveLog(t *testing.T, p *policy.Policy, paths []string) ([]int, string) {
	t.Helper()
	url, log, _ := liveGateway(t, p)
	var reqs []*http.Request
	for _, path := range paths {
		reqs = append(reqs, newGet(t, url+path))
	}
	codes := sendEach(t, log, reqs)
	return codes, writeAccessLog(t, log, len(paths))
}

// TestRefusalStatusReplayedAsARefusal attacks a replay with a limit whose
// refusal answers 503 (server.refusal, a route's or a limit's refusal,
// as NGINX's limit_req_status): the gateway refused the request as it
// refuses with 429, and the replay, Explain and --compare must call it
// refused too, not let it through because its status is not 429. Here
// the server's refusal is 503 and one limit's own is 429; each limit lets
// two of three requests through.
func TestRefusalStatusReplayedAsARefusal(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") }))
	defer up.Close()
	const src = `version: 1
server:
  refusal: {status: %[2]d}
routes:
  - {name: a, match: {paths: ["/a"]}, upstream: %[1]q}
  - {name: b, match: {paths: ["/b"]}, upstream: %[1]q}
limits:
  - {name: a, algorithm: fixed_window, limit: 2, window: 1h, key: global, match: {routes: [a]}}
  - {name: b, algorithm: sliding_log, limit: 2, window: 1h, key: global, match: {routes: [b]}, refusal: {status: 429}}
`
	p := compilePolicy(t, fmt.Sprintf(src, up.URL, 503))
	codes, file := liveLog(t, p, []string{"/a", "/a", "/a", "/b", "/b", "/b"})
	if fmt.Sprint(codes) != "[200 200 503 200 200 429]" {
		t.Fatalf("the gateway answered %v, want [200 200 503 200 200 429]", codes)
	}

	// The same policy but for the status of its refusals: it refuses the
	// same requests, so nothing flips.
	other := compilePolicy(t, fmt.Sprintf(src, up.URL, 429))
	r := mustRun(t, Options{Policy: p, Logs: []string{file}, Compare: other})
	if r.Requests != 6 || r.Allowed != 4 || r.Denied != 2 {
		t.Errorf("replayed %d requests: %d allowed, %d denied; want 6: 4 allowed, 2 denied (the 503 is a refusal)",
			r.Requests, r.Allowed, r.Denied)
	}
	if l := limitReport(t, r, "a"); l.Binding != 1 {
		t.Errorf("limit a is binding for %d refusals, want 1", l.Binding)
	}
	if a := r.Agreement; a == nil || a.Compared != 6 || a.Matched != 6 {
		t.Errorf("agreement with the log %+v: want all 6 decided as the gateway did", a)
	}
	if c := r.Compare; c == nil || c.Flips != 0 || c.Denied != 2 {
		t.Errorf("comparison with the same limits refusing with 429: %+v, want no flip", c)
	}
	if len(r.TopClients) != 1 || r.TopClients[0].Denied != 2 {
		t.Errorf("clients refused most: %+v, want 127.0.0.1 refused twice", r.TopClients)
	}
}
