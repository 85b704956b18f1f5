package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/policy"
)

const explainPolicy = `
server:
  trusted_proxies: [10.0.0.0/8]
  headers: {binding_limit: X-Binding}
routes:
  - {name: students, match: {methods: [GET], paths: ["/students/{id}"]}, stage: dev, upstream: "http://127.0.0.1:9"}
  - {name: partner, match: {methods: [GET], paths: ["/partner/**"]}, api_key_required: true, upstream: "http://127.0.0.1:9"}
  - {name: shaped, match: {paths: ["/shaped"]}, upstream: "http://127.0.0.1:9"}
stages:
  - {name: dev, rate: 1, per: 1h, burst: 2}
plans:
  - {name: trial, rate: 100, quota: {limit: 1, period: DAY}}
keys:
  - {name: trial-1, plan: trial, sha256: KEYHASH}
limits:
  - {name: queue, algorithm: leaky_queue, rate: 1, per: 1h, burst: 5, match: {paths: ["/shaped"]}, key: client_ip}
  - {name: per-ip-trial, rate: 1, per: 1h, burst: 1, key: client_ip, shadow: true, scope: global}
`

func explainGateway(t *testing.T) (*Gateway, http.Handler) {
	t.Helper()
	return policyMiddleware(t, compilePolicy(t, "explain.yaml", strings.Replace(explainPolicy, "KEYHASH", config.HashKey("secret-trial"), 1)))
}

// policyMiddleware is a gateway enforcing p on a new embedded store and
// its middleware in front of a handler that answers 200.
func policyMiddleware(t *testing.T, p *policy.Policy) (*Gateway, http.Handler) {
	t.Helper()
	g, err := New(Options{Matcher: mustPolicyMatcher(t, p), Engine: memEngine(t)})
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(200) })
	return g, g.Middleware(ok)
}

// explainOf is er made into a request and g's explanation of it.
func explainOf(t *testing.T, g *Gateway, er ExplainRequest) (*http.Request, *Explanation) {
	t.Helper()
	r, o, err := er.HTTPRequest(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	e, err := g.Explain(context.Background(), r, o)
	if err != nil {
		t.Fatal(err)
	}
	return r, e
}

func newReq(method, target, remote string, hdr ...string) *http.Request {
	r := httptest.NewRequest(method, target, nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	return r
}

func limitOf(t *testing.T, e *Explanation, name string) LimitExplanation {
	t.Helper()
	for _, l := range e.Limits {
		if l.Name == name {
			return l
		}
	}
	t.Fatalf("no limit %s in %+v", name, e.Limits)
	return LimitExplanation{}
}

// TestExplain: the explanation of a request shows the state a peek sees,
// the binding limit and the answer the gateway would give, and charges
// nothing.
func TestExplain(t *testing.T) {
	g, h := explainGateway(t)
	ctx := context.Background()
	// Through a trusted proxy, the client is the forwarded address.
	student := func() *http.Request {
		return newReq("GET", "/students/9", "10.1.2.3:5000", "X-Forwarded-For", "198.51.100.7")
	}
	e, err := g.Explain(ctx, student(), ExplainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if e.ClientIP != "198.51.100.7" || e.Route != "students" || e.Stage != "dev" || e.Binding != "stage.dev" ||
		!e.Answer.Forwarded || e.Answer.Status != 0 {
		t.Fatalf("fresh: %+v", e)
	}
	if l := limitOf(t, e, "stage.dev"); !l.Matched || l.CounterKey != "stage:dev" || l.State == nil ||
		!l.State.Allowed || l.State.Remaining != 1 || l.State.Limit != 2 || !l.Binding {
		t.Errorf("stage.dev fresh: %+v %+v", l, l.State)
	}
	if l := limitOf(t, e, "queue"); l.Matched || !strings.Contains(l.Reason, "path") || l.State != nil {
		t.Errorf("queue: %+v", l)
	}
	if l := limitOf(t, e, "per-ip-trial"); !l.Matched || !l.Shadow || !strings.Contains(l.Reason, "shadow") || l.CounterKey != "ip:198.51.100.7" {
		t.Errorf("shadow: %+v", l)
	}
	// Explaining again changes nothing: nothing was charged.
	e2, _ := g.Explain(ctx, student(), ExplainOptions{})
	if limitOf(t, e2, "stage.dev").State.Remaining != 1 {
		t.Errorf("an explanation charged the limit")
	}
	// Two real requests empty the stage's bucket: the third would get 429.
	for range 2 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, student())
		if w.Code != 200 {
			t.Fatalf("request: %d", w.Code)
		}
	}
	e, _ = g.Explain(ctx, student(), ExplainOptions{})
	l := limitOf(t, e, "stage.dev")
	if l.State.Allowed || l.State.Remaining != 0 || l.State.RetryAfter <= Duration(59*time.Minute) || !l.Binding {
		t.Errorf("stage.dev empty: %+v", l.State)
	}
	if e.Answer.Status != 429 || e.Answer.Forwarded || !strings.Contains(e.Answer.Body, "Too Many Requests") {
		t.Errorf("answer %+v", e.Answer)
	}
	hdr := map[string]string{}
	for _, f := range e.Answer.Headers {
		hdr[f.Name] = f.Value
	}
	if hdr["Retry-After"] == "" || !strings.HasPrefix(hdr["RateLimit"], `"stage.dev";r=0`) || hdr["X-Binding"] != "stage.dev" {
		t.Errorf("headers %v", hdr)
	}
	// The shadow limit denies, and still does not bind.
	if l := limitOf(t, e, "per-ip-trial"); l.State.Allowed || l.Binding {
		t.Errorf("shadow state %+v binding %v", l.State, l.Binding)
	}
	// What the explanation said is what the gateway does.
	w := httptest.NewRecorder()
	h.ServeHTTP(w, student())
	if w.Code != 429 {
		t.Errorf("the request the explanation refused got %d", w.Code)
	}
}

// TestExplainAnswers: 403 before any limit, the key by its name, a
// quota's Limit Exceeded, a leaky queue's delay and a request with no
// route.
func TestExplainAnswers(t *testing.T) {
	g, h := explainGateway(t)
	ctx := context.Background()
	// No key: refused once the limits that need none (the unknown-key
	// limit, per address) allowed it; the plan's are not checked.
	e, _ := g.Explain(ctx, newReq("GET", "/partner/1", "192.0.2.1:1"), ExplainOptions{})
	if e.Answer.Status != 403 || !strings.Contains(e.Forbidden, "has none") || e.Binding != policy.UnknownKeyLimitName {
		t.Errorf("no key: %+v", e)
	}
	if l := limitOf(t, e, policy.UnknownKeyLimitName); !l.Matched || l.CounterKey != "ip:192.0.2.1" {
		t.Errorf("no key: %+v", l)
	}
	if l := limitOf(t, e, "trial.rate"); l.Matched || !strings.HasPrefix(l.Reason, "not checked") {
		t.Errorf("no key: %+v", l)
	}
	e, _ = g.Explain(ctx, newReq("GET", "/partner/1", "192.0.2.1:1", "X-Api-Key", "nope"), ExplainOptions{})
	if e.Answer.Status != 403 || !strings.HasPrefix(e.Key, "?") || !strings.Contains(e.Forbidden, "not configured") {
		t.Errorf("unknown key: %+v", e)
	}
	// By name, as a log shows it; then the quota is used by a real request.
	e, _ = g.Explain(ctx, newReq("GET", "/partner/1", "192.0.2.1:1"), ExplainOptions{KeyName: "trial-1"})
	if e.Key != "trial-1" || e.Plan != "trial" || !e.Answer.Forwarded || limitOf(t, e, "trial.quota").CounterKey != "key:trial-1" {
		t.Errorf("by name: %+v", e)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, newReq("GET", "/partner/1", "192.0.2.1:1", "X-Api-Key", "secret-trial"))
	e, _ = g.Explain(ctx, newReq("GET", "/partner/1", "192.0.2.1:1", "X-Api-Key", "secret-trial"), ExplainOptions{})
	if e.Answer.Status != 429 || e.Binding != "trial.quota" || !strings.Contains(e.Answer.Body, "Limit Exceeded") {
		t.Errorf("quota used: %+v", e.Answer)
	}
	// A leaky queue: the second request would wait its turn.
	h.ServeHTTP(httptest.NewRecorder(), newReq("GET", "/shaped", "192.0.2.2:1"))
	e, _ = g.Explain(ctx, newReq("GET", "/shaped", "192.0.2.2:1"), ExplainOptions{})
	if !e.Answer.Forwarded || e.Answer.Delay < Duration(59*time.Minute) || limitOf(t, e, "queue").State.Delay != e.Answer.Delay {
		t.Errorf("queue: %+v", e.Answer)
	}
	// No route: the reverse proxy has nowhere to send it.
	e, _ = g.Explain(ctx, newReq("GET", "/nowhere", "192.0.2.3:1"), ExplainOptions{})
	if e.Answer.Status != 404 || e.Answer.Forwarded || e.Route != "" {
		t.Errorf("no route: %+v", e.Answer)
	}
	// The explanation is JSON with durations as Go writes them.
	b, err := json.Marshal(e)
	if err != nil || !strings.Contains(string(b), `"limits":[`) {
		t.Errorf("json %s: %v", b, err)
	}
	b, _ = json.Marshal(LimitState{ResetAfter: Duration(1500 * time.Millisecond)})
	var back LimitState
	if err := json.Unmarshal(b, &back); err != nil || back.ResetAfter != Duration(1500*time.Millisecond) || !strings.Contains(string(b), `"1.5s"`) {
		t.Errorf("duration JSON %s: %v %v", b, back, err)
	}
	// Only a policy can explain.
	g2, err := New(Options{Matcher: funcMatcher(func(*Request, *Match) error { return nil }),
		Engine: memEngine(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g2.Explain(ctx, newReq("GET", "/", "192.0.2.1:1"), ExplainOptions{}); err != ErrNotExplainable {
		t.Errorf("err %v", err)
	}
}

// TestExplainRequestTakesFieldsAsTheGateway: POST /v1/explain and
// floodgate explain build their request from an ExplainRequest, whose
// header values come as typed. The gateway's parsers never see the spaces
// and tabs at a value's ends, so a key pasted with one is the client's
// key there and must be here (it was explained as an unknown key, 403,
// while the gateway served it); a name or a value no request can carry is
// refused with the reason.
func TestExplainRequestTakesFieldsAsTheGateway(t *testing.T) {
	g, h := explainGateway(t)
	ctx := context.Background()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, newReq("GET", "/partner/1", "192.0.2.9:1", "X-Api-Key", "secret-trial"))
	if w.Code != http.StatusOK {
		t.Fatalf("the gateway with the key: %d", w.Code)
	}
	for _, v := range []string{" secret-trial", "secret-trial\t", " \tsecret-trial  "} {
		er := ExplainRequest{Path: "/partner/1", IP: "192.0.2.9", Headers: map[string]string{"X-Api-Key": v}}
		r, o, err := er.HTTPRequest(ctx)
		if err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		e, err := g.Explain(ctx, r, o)
		if err != nil {
			t.Fatal(err)
		}
		if e.Key != "trial-1" || e.Answer.Status == http.StatusForbidden {
			t.Errorf("key %q: explained as key %q, status %d; the gateway takes it as trial-1", v, e.Key, e.Answer.Status)
		}
	}
	for _, hs := range []map[string]string{{"X Api Key": "x"}, {"": "x"}, {"X-Api-Key": "a\r\nX-Other: b"}, {"X-Api-Key": "a\x00"}} {
		er := ExplainRequest{Path: "/partner/1", Headers: hs}
		if _, _, err := er.HTTPRequest(ctx); err == nil {
			t.Errorf("headers %q: explained; want refused", hs)
		}
	}
}

// TestExplainSaysWhatTheGatewayDoes: a request the gateway limits by a
// header-keyed limit (its path matched whatever its case, without its
// format suffix, with its escaped slash kept in its segment) is explained,
// without the header, as missing the header, never as a path the limit
// does not match.
func TestExplainSaysWhatTheGatewayDoes(t *testing.T) {
	for _, tc := range []struct{ server, pattern, path string }{
		{"path_matching: case_insensitive", "/api/orders", "/API/Orders"},
		{"format_suffix: ignore", "/api/orders", "/api/orders.json"},
		{"escaped_slash: segment", "/files/{id}", "/files/a%2Fb"},
		{"escaped_slash: both", "/files/{id}", "/files/a%2Fb"},
	} {
		p := compilePolicy(t, "explain.yaml", `
server: {`+tc.server+`}
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:9"}
limits:
  - {name: tenant, rate: 1, per: 1h, burst: 1, key: "header:X-Tenant", match: {paths: ["`+tc.pattern+`"]}}
`)
		g, h := policyMiddleware(t, p)
		var codes []int
		for range 2 {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, newReq("GET", tc.path, "198.51.100.7:5000", "X-Tenant", "t1"))
			codes = append(codes, w.Code)
		}
		if codes[0] != 200 || codes[1] != 429 {
			t.Fatalf("%s: %s with X-Tenant got %v, want the limit to apply", tc.server, tc.path, codes)
		}
		_, e := explainOf(t, g, ExplainRequest{Path: tc.path, IP: "198.51.100.7"})
		if l := limitOf(t, e, "tenant"); l.Matched || l.Missing != "header:X-Tenant" || !strings.Contains(l.Reason, "no X-Tenant header") {
			t.Errorf("%s: %s without X-Tenant explained as %+v; the gateway limits it once the header is there", tc.server, tc.path, l)
		}
	}
}

// TestExplainEscapedSlashRefusedChargesNoLimit: a path the gateway
// refuses 400 for its escaped slash (server.escaped_slash: reject, or a
// slash whose two readings choose different routes) is explained with no
// limit applying, as none counts it: the limit of its path still has its
// whole burst after the refusals.
func TestExplainEscapedSlashRefusedChargesNoLimit(t *testing.T) {
	for _, mode := range []string{"reject", "both"} {
		p := compilePolicy(t, "explain.yaml", `
server: {escaped_slash: `+mode+`}
routes:
  - {name: one, match: {paths: ["/files/{id}"]}, upstream: "http://127.0.0.1:9"}
  - {name: all, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:9"}
limits:
  - {name: files, rate: 1, per: 1h, burst: 1, key: client_ip, match: {paths: ["/files/**"]}}
`)
		g, h := policyMiddleware(t, p)
		_, e := explainOf(t, g, ExplainRequest{Path: "/files/a%2Fb", IP: "198.51.100.7"})
		var codes []int
		for _, path := range []string{"/files/a%2Fb", "/files/a%2Fb", "/files/x"} {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, newReq("GET", path, "198.51.100.7:5000"))
			codes = append(codes, w.Code)
		}
		if codes[0] != 400 || codes[1] != 400 || codes[2] != 200 {
			t.Fatalf("%s: gateway answered %v, want 400, 400 and 200 (nothing counted for the refused)", mode, codes)
		}
		if e.Answer.Status != 400 {
			t.Errorf("%s: explained answer %+v, the gateway answers 400", mode, e.Answer)
		}
		if l := limitOf(t, e, "files"); l.Matched || l.CounterKey != "" || !strings.Contains(l.Reason, "400") {
			t.Errorf("%s: files explained as %+v; the gateway refuses the request 400 and counts it under no limit", mode, l)
		}
	}
}

// TestExplainRepeatedFieldRefusedChargesNoLimit: a request the gateway
// refuses 400 for a field sent twice that a limit is keyed by, or for the
// API key's field spelled with '_' for '-', is explained as the escaped slash's
// 400 is: every limit of the policy listed, those its path meets "not
// checked", none with a counter key, and the answer 400.
func TestExplainRepeatedFieldRefusedChargesNoLimit(t *testing.T) {
	p := compilePolicy(t, "explain.yaml", `
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:9"}
limits:
  - {name: tenant, rate: 1, per: 1h, burst: 1, key: "header:X-Tenant", match: {paths: ["/api/**"]}}
  - {name: per-ip, rate: 1, per: 1h, burst: 1, key: client_ip}
  - {name: admin, rate: 1, per: 1h, burst: 1, key: client_ip, match: {paths: ["/admin/**"]}}
`)
	g, h := policyMiddleware(t, p)
	for _, hdr := range []map[string]string{
		{"X-Tenant": "a", "x-tenant": "b"},  // two lines of the field
		{"X_API_Key": "k", "X-Tenant": "a"}, // the API key's field, '_' for '-'
	} {
		r, e := explainOf(t, g, ExplainRequest{Path: "/api/x", IP: "198.51.100.7", Headers: hdr})
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r.Clone(context.Background()))
		if w.Code != 400 || e.Answer.Status != 400 {
			t.Fatalf("%v: gateway answered %d, explained %+v; want 400 for both", hdr, w.Code, e.Answer)
		}
		if len(e.Limits) != len(p.Limits()) {
			t.Fatalf("%v: explained %d limits %+v, want the policy's %d", hdr, len(e.Limits), e.Limits, len(p.Limits()))
		}
		for _, name := range []string{"tenant", "per-ip"} {
			if l := limitOf(t, e, name); l.Matched || l.CounterKey != "" || !strings.Contains(l.Reason, "not checked") || !strings.Contains(l.Reason, "400") {
				t.Errorf("%v: %s explained as %+v; the gateway refuses the request 400 and counts it under no limit", hdr, name, l)
			}
		}
		if l := limitOf(t, e, "admin"); l.Matched || strings.Contains(l.Reason, "not checked") {
			t.Errorf("%v: admin explained as %+v; its path does not match, whatever the refusal", hdr, l)
		}
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, newReq("GET", "/api/x", "198.51.100.7:5000", "X-Tenant", "a"))
	if w.Code != 200 {
		t.Fatalf("after the refusals the gateway answered %d, want 200: nothing counted for them", w.Code)
	}
}

// TestExplainQueuePastWriteTimeout: a request a leaky queue would hold
// past the policy's server.timeouts.write is refused at once by both
// engines (429); explain says so, rather than "forwarded after" a wait
// whose answer could no longer be written, and gives nothing back that
// its look did not take (explained twice, it is refused twice).
func TestExplainQueuePastWriteTimeout(t *testing.T) {
	p := compilePolicy(t, "explain.yaml", `
server: {timeouts: {write: 400ms}}
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:9"}
limits:
  - {name: queue, algorithm: leaky_queue, rate: 1, per: 2s, burst: 3, key: global}
`)
	g, h := policyMiddleware(t, p)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, newReq("GET", "/x", "198.51.100.7:5000"))
	if w.Code != 200 {
		t.Fatalf("the first request got %d, want 200 at once", w.Code)
	}
	for i := range 2 {
		_, e := explainOf(t, g, ExplainRequest{Path: "/x", IP: "198.51.100.7"})
		if e.Answer.Status != http.StatusTooManyRequests || e.Answer.Forwarded || e.Binding != "queue" {
			t.Errorf("explanation %d: binding %q, answer %+v; want 429 by the queue, its wait of about 2s past the write timeout of 400ms",
				i+1, e.Binding, e.Answer)
		}
	}
}
