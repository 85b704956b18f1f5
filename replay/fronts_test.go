package replay

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/accesslog"
	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/gateway/edge"
	"github.com/floodgate/floodgate/guard"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memstore"
	"github.com/golang-jwt/jwt/v5"
)

// The request flow's front ends answer one request alike: the reverse
// proxy on the net/http and edge engines, the gateway's middleware, a
// Guard's middleware and an explanation of the request just before it is
// sent. TestFrontsAgree drives random but reproducible sequences of
// requests (methods, odd paths, repeated and odd fields, API keys known,
// unknown and absent, tokens good and forged, forwarded addresses from
// trusted and untrusted peers, costs from a field and from a body) through
// all of them, each on an embedded store of its own on one clock moved by
// hand, and compares the answers field by field.

// frontsSecret is the HS256 secret of frontsPolicy's tokens.
const frontsSecret = "a-secret-of-at-least-thirty-two-bytes!"

// frontsPolicy writes the policy file of TestFrontsAgree, its routes
// forwarded to upstream, and returns its path.
func frontsPolicy(t *testing.T, upstream string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "secret.txt"), []byte(frontsSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("key-1"))
	src := fmt.Sprintf(`version: 1
server:
  trusted_proxies: [127.0.0.1/32]
  api_key_header: x-api-key
  user: {jwt: {alg: HS256, key_file: secret.txt}}
  unknown_key_limit: {rate: 3, per: 1m}
  headers: {binding_limit: X-Binding-Limit}
routes:
  - {name: partner, match: {paths: ["/partner/**"]}, upstream: %[1]q, api_key_required: true}
  - {name: me, match: {paths: ["/me/**"]}, upstream: %[1]q}
  - {name: login, match: {methods: [POST], paths: ["/login"]}, upstream: %[1]q}
  - {name: chat, match: {methods: [POST], paths: ["/v1/chat"]}, upstream: %[1]q}
  - {name: rest, match: {paths: ["/**"]}, upstream: %[1]q, stage: dev}
stages:
  - {name: dev, rate: 30, per: 1m}
plans:
  - {name: gold, rate: 4, per: 1m, quota: {limit: 9, period: DAY}, routes: [partner]}
keys:
  - {name: k1, plan: gold, sha256: %[2]s}
limits:
  - {name: per-user, rate: 3, per: 1m, key: user, match: {routes: [me]}}
  - {name: login, algorithm: sliding_log, limit: 2, window: 10m, count_on: [401], match: {routes: [login]}, scope: method}
  - {name: tokens, algorithm: sliding_log, limit: 300, window: 1m, key: client_ip, match: {routes: [chat]}, estimate: {body: max_tokens, default: 40}}
  - {name: weighted, algorithm: fixed_window, limit: 12, window: 1m, key: client_ip, match: {paths: ["/w/**"]}, estimate: {header: X-Cost, default: 2}}
  - {name: per-tenant, algorithm: fixed_window, limit: 4, window: 1m, key: "header:X-Tenant", match: {paths: ["/t/**"]}}
  - {name: per-client, rate: 8, per: 1m, key: client_ip}
`, upstream, hex.EncodeToString(sum[:]))
	path := filepath.Join(dir, "fronts.yaml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// frontsService is the upstream of the proxies and the next handler of
// the middlewares: POST /login is 401 without the right password,
// anything else 200 with its method and path. It reads the path with its
// dot segments resolved, as NGINX does: the proxies send it so resolved
// (gateway.ResolveDotSegments), the middlewares pass it on as it came.
var frontsService = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	if r.URL.Path == "/login" && r.Header.Get("X-Password") != "right" {
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, "wrong password\n")
		return
	}
	p, _ := gateway.ResolveDotSegments(r.URL.EscapedPath())
	io.WriteString(w, "ok "+r.Method+" "+p+"\n")
})

// frontsReq is one request of a sequence: its raw head's parts, the
// address it is sent from, and its body.
type frontsReq struct {
	method, target string
	from           string // 127.0.0.1 (a trusted proxy) or 127.0.0.2
	fields         [][2]string
	body           string
}

func (q frontsReq) String() string {
	return fmt.Sprintf("%s %s from %s %v body %q", q.method, q.target, q.from, q.fields, q.body)
}

// frontsSequence makes n requests from seed.
// Bodies, when set, tell a chat request's cost in its body (which no
// log holds, so the replay is not compared then).
func frontsSequence(t *testing.T, seed uint64, n int, bodies bool) []frontsReq {
	rnd := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	pick := func(s ...string) string { return s[rnd.IntN(len(s))] }
	token := func(user, secret string) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": user, "exp": time.Now().Add(time.Hour).Unix()}).
			SignedString([]byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	tokens := []string{token("ana", frontsSecret), token("bo", frontsSecret), token("ana", strings.Repeat("x", 40))}
	paths := []string{
		"/partner/a", "/partner/%61", "/partner//a", "/partner/a/../b", "/Partner/a", "/partner",
		"/me/x", "/me/%2e%2e/x", "/me/x?y=1", "/me//x",
		"/login", "/login/", "/LOGIN", "/login?next=/x",
		"/v1/chat", "/v1/chat/", "/v1//chat",
		"/w/a", "/w/%2F", "/w/a;b",
		"/t/a", "/t/%7E",
		"/", "/x/./y", "/x%20y", "/%C3%A9", "/a?b=%41",
	}
	out := make([]frontsReq, n)
	for i := range out {
		q := frontsReq{method: pick("GET", "GET", "POST", "PUT", "HEAD", "DELETE"), target: pick(paths...), from: pick("127.0.0.1", "127.0.0.2")}
		if strings.HasPrefix(q.target, "/login") || strings.HasPrefix(q.target, "/v1") {
			q.method = pick("POST", "POST", "GET")
		}
		add := func(k, v string) { q.fields = append(q.fields, [2]string{k, v}) }
		switch rnd.IntN(6) {
		case 0:
			add("X-Api-Key", "key-1")
		case 1:
			add(pick("x-api-key", "X-API-KEY"), pick("Bearer key-1", "key-2", "key-1 "))
		case 2:
			add("X-Api-Key", "key-1")
			add("X-Api-Key", pick("key-1", "key-2"))
		}
		switch rnd.IntN(5) {
		case 0, 1:
			add("Authorization", "Bearer "+tokens[rnd.IntN(len(tokens))])
		case 2:
			add("authorization", "bearer "+tokens[0])
		}
		switch rnd.IntN(4) {
		case 0:
			add("X-Forwarded-For", pick("203.0.113.1", "203.0.113.2", "198.51.100.7, 203.0.113.1", "2001:db8::1", "::ffff:203.0.113.1", "garbage"))
		case 1:
			add("X-Forwarded-For", "203.0.113.9")
			add("x-forwarded-for", pick("203.0.113.1", "127.0.0.1"))
		}
		if rnd.IntN(3) == 0 {
			add("X-Cost", pick("1", "3", "0", "-2", "x", "5", "13", "99999999999999999999"))
		}
		if rnd.IntN(3) == 0 {
			add("X-Tenant", pick("a", "b", "", " a"))
		}
		if q.method == "POST" && rnd.IntN(2) == 0 {
			add("X-Password", "right")
		}
		if q.method == "POST" || q.method == "PUT" {
			switch rnd.IntN(4) {
			case 0:
				if bodies {
					q.body = fmt.Sprintf(`{"max_tokens":%d}`, 10+rnd.IntN(120))
				}
			case 1:
				q.body = `{"max_tokens":"50"}`
			case 2:
				q.body = `not json`
			}
		}
		out[i] = q
	}
	return out
}

// frontsAnswer is what a client sees of one answer, as compared.
type frontsAnswer struct {
	status                                 int
	retryAfter, policy, rateLimit, binding string
	body                                   string
}

func (a frontsAnswer) String() string {
	return fmt.Sprintf("%d Retry-After=%q RateLimit-Policy=%q RateLimit=%q binding=%q body=%q",
		a.status, a.retryAfter, a.policy, a.rateLimit, a.binding, a.body)
}

// send sends q to addr over a connection of its own from q.from, and
// reads the answer to the end.
func (q frontsReq) send(t *testing.T, addr string) frontsAnswer {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(q.from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: api.example\r\nConnection: close\r\n", q.method, q.target)
	for _, f := range q.fields {
		fmt.Fprintf(&b, "%s: %s\r\n", f[0], f[1])
	}
	if q.body != "" || q.method == "POST" || q.method == "PUT" {
		fmt.Fprintf(&b, "Content-Type: application/json\r\nContent-Length: %d\r\n", len(q.body))
	}
	b.WriteString("\r\n")
	b.WriteString(q.body)
	if _, err := io.WriteString(c, b.String()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: q.method})
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	io.Copy(io.Discard, c) // to the end: the answer is over
	return frontsAnswer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"),
		policy: resp.Header.Get("RateLimit-Policy"), rateLimit: resp.Header.Get("RateLimit"),
		binding: resp.Header.Get("X-Binding-Limit"), body: string(body)}
}

// httpRequest is q as an *http.Request arriving at a server, for Explain.
func (q frontsReq) httpRequest(t *testing.T) *http.Request {
	t.Helper()
	r := httptest.NewRequest(q.method, q.target, strings.NewReader(q.body))
	r.Host = "api.example"
	r.RemoteAddr = q.from + ":50000"
	for _, f := range q.fields {
		r.Header.Add(f[0], strings.TrimSpace(f[1])) // as a server reads a field's line
	}
	if q.body != "" || q.method == "POST" || q.method == "PUT" {
		r.Header.Set("Content-Type", "application/json")
	}
	return r
}

// frontsGateway is one gateway of the comparison, with its own store.
type frontsGateway struct {
	name string
	g    *gateway.Gateway
	addr string
	log  *recordLog
}

// TestFrontsAgree sends the sequences of a few seeds to every front and
// compares the answers.
func TestFrontsAgree(t *testing.T) {
	seeds := uint64(6)
	if v, err := strconv.ParseUint(os.Getenv("FRONTS_SEEDS"), 10, 64); err == nil {
		seeds = v
	}
	for seed := uint64(1); seed <= seeds; seed++ {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) { frontsAgree(t, seed, 60) })
	}
}

func frontsAgree(t *testing.T, seed uint64, n int) {
	up := httptest.NewServer(frontsService)
	t.Cleanup(up.Close)
	cfg := frontsPolicy(t, up.URL)
	f, err := config.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Compile(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	var clock atomic.Int64
	clock.Store(time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC).UnixNano())
	now := clock.Load
	newStore := func() *memstore.Store {
		st, err := memstore.New(memstore.Options{Now: now, SweepInterval: -1, SnapshotInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	listen := func(h http.Handler) string {
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return srv.Listener.Addr().String()
	}
	newGateway := func(name string) *frontsGateway {
		pm, err := gateway.NewPolicyMatcher(gateway.Fixed(p), gateway.PolicyMatcherOptions{})
		if err != nil {
			t.Fatal(err)
		}
		fg := &frontsGateway{name: name, log: &recordLog{}}
		fg.g, err = gateway.New(gateway.Options{Matcher: pm, Engine: limiter.New(newStore(), limiter.Options{}),
			Fields: gateway.FieldOptions(p.Server().Headers), MethodOverride: gateway.MethodOverrideOf(p.Server().MethodOverride),
			AccessLog: fg.log})
		if err != nil {
			t.Fatal(err)
		}
		return fg
	}
	nh := newGateway("net/http")
	nh.addr = listen(nh.g)
	ed := newGateway("edge")
	{
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		e := edge.New(ed.g, edge.Options{Fallback: &http.Server{Handler: ed.g}})
		done := make(chan error, 1)
		go func() { done <- e.Serve(ln) }()
		t.Cleanup(func() { e.Close(); ln.Close(); <-done })
		ed.addr = ln.Addr().String()
	}
	mw := newGateway("middleware")
	mw.addr = listen(mw.g.Middleware(frontsService))
	gd, err := guard.New(guard.File(cfg), guard.Options{Store: newStore(), ReloadInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gd.Close() })
	gdAddr := listen(gd.Middleware(frontsService))
	gateways := []*frontsGateway{nh, ed, mw}

	// The replay, fed the net/http gateway's access log with the fields a
	// log can hold (header:NAME columns).
	rp, err := NewReplayer(p)
	if err != nil {
		t.Fatal(err)
	}
	defer rp.Close()
	bodies := seed%2 == 1

	rnd := rand.New(rand.NewPCG(seed, 7))
	for i, q := range frontsSequence(t, seed, n, bodies) {
		// Explained on the net/http gateway just before it is sent.
		e, err := nh.g.Explain(context.Background(), q.httpRequest(t), gateway.ExplainOptions{})
		if err != nil {
			t.Fatalf("request %d %s: explain: %v", i, q, err)
		}
		var answers []frontsAnswer
		for _, fg := range gateways {
			answers = append(answers, q.send(t, fg.addr))
			fg.log.wait(t, i+1)
		}
		answers = append(answers, q.send(t, gdAddr))
		names := []string{"net/http", "edge", "middleware", "guard"}
		ref := answers[0]
		for j := 1; j < len(answers); j++ {
			if answers[j] != ref {
				t.Errorf("request %d %s:\n  %-10s %s\n  %-10s %s", i, q, names[0], ref, names[j], answers[j])
			}
		}
		// The explanation: forwarded or the gateway's own answer, and on a
		// refusal (which charges nothing) its fields and binding limit.
		switch {
		case e.Answer.Forwarded:
			if ref.status == http.StatusTooManyRequests || ref.status == http.StatusForbidden {
				t.Errorf("request %d %s: explained forwarded, answered %s", i, q, ref)
			}
		case e.Answer.Status != ref.status:
			t.Errorf("request %d %s: explained %d (%s), answered %s", i, q, e.Answer.Status, e.Binding, ref)
		case ref.status == http.StatusTooManyRequests:
			got := frontsAnswer{status: e.Answer.Status, body: e.Answer.Body}
			for _, h := range e.Answer.Headers {
				switch http.CanonicalHeaderKey(h.Name) {
				case "Retry-After":
					got.retryAfter = h.Value
				case "Ratelimit-Policy":
					got.policy = h.Value
				case "Ratelimit":
					got.rateLimit = h.Value
				case "X-Binding-Limit":
					got.binding = h.Value
				}
			}
			if q.method == http.MethodHead {
				got.body = "" // a HEAD answer has no body
			}
			if got != ref {
				t.Errorf("request %d %s:\n  answered  %s\n  explained %s", i, q, ref, got)
			}
		}
		if !bodies {
			// The record as the replay reads the gateway's JSON log.
			lr := nh.log.get(i)
			var rec Record
			if err := newJSONParser(newInterner()).parse(accesslog.AppendJSON(nil, &lr), &rec); err != nil {
				t.Fatalf("request %d: reading its log line: %v", i, err)
			}
			// The log's times as a gateway on this clock would write them:
			// the fixed clock does not move during a request, and a
			// request refused before any limit is logged at its arrival,
			// read from the wall clock.
			rec.Time, rec.Duration = clock.Load(), 0
			for _, f := range q.fields {
				if k := http.CanonicalHeaderKey(f[0]); k == "X-Cost" || k == "X-Tenant" {
					rec.Headers = append(rec.Headers, Header{Name: k, Value: strings.TrimSpace(f[1])})
				}
			}
			o := rp.Decide(&rec)
			got := lr.Status
			switch {
			case o.Denied:
				got = http.StatusTooManyRequests
			case o.Forbidden:
				got = http.StatusForbidden
			}
			binding := ""
			if b := o.Binding(); b != nil && o.Denied {
				binding = b.Name
			}
			if got != ref.status || binding != ref.binding {
				t.Errorf("request %d %s: replayed %d (binding %q), answered %s", i, q, got, binding, ref)
			}
		}
		clock.Add(int64(time.Duration(rnd.IntN(4000)) * time.Millisecond))
	}
}
