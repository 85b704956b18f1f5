package gateway

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
)

// tokenKit is an RS256 key pair written as a PEM file, and a stranger's key
// that forges tokens.
type tokenKit struct {
	key, forger *rsa.PrivateKey
	pemPath     string
}

var (
	kitOnce sync.Once
	kit     tokenKit
	kitErr  error
)

// newTokenKit makes the keys once for the package's tests and benchmarks
// (RSA key generation is slow).
func newTokenKit(tb testing.TB) *tokenKit {
	tb.Helper()
	kitOnce.Do(func() {
		if kit.key, kitErr = rsa.GenerateKey(rand.Reader, 2048); kitErr != nil {
			return
		}
		if kit.forger, kitErr = rsa.GenerateKey(rand.Reader, 2048); kitErr != nil {
			return
		}
		der, err := x509.MarshalPKIXPublicKey(&kit.key.PublicKey)
		if err != nil {
			kitErr = err
			return
		}
		dir, err := os.MkdirTemp("", "floodgate-jwt")
		if err != nil {
			kitErr = err
			return
		}
		kit.pemPath = filepath.Join(dir, "pub.pem")
		kitErr = os.WriteFile(kit.pemPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600)
	})
	if kitErr != nil {
		tb.Fatal(kitErr)
	}
	return &kit
}

// token signs a token for user with key, valid for an hour.
func (k *tokenKit) token(tb testing.TB, key *rsa.PrivateKey, user string) string {
	tb.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{
		"sub": user, "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString(key)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// userPolicy has a route whose limits count per user (/me) and one whose
// limits do not (/open); both count per address.
func userPolicy(tb testing.TB, k *tokenKit, perIP int) *policy.Policy {
	tb.Helper()
	src := fmt.Sprintf(`version: 1
server:
  user:
    jwt: {alg: RS256, key_file: %q}
routes:
  - name: me
    match: {paths: ["/me"]}
    upstream: http://127.0.0.1:9
  - name: open
    match: {paths: ["/open"]}
    upstream: http://127.0.0.1:9
  - name: anon
    match: {paths: ["/anon"]}
    upstream: http://127.0.0.1:9
    on_invalid_token: anonymous
limits:
  - name: per-user
    match: {routes: [me, anon]}
    algorithm: fixed_window
    limit: 3
    window: 1h
    key: user
  - name: per-ip
    algorithm: fixed_window
    limit: %d
    window: 1h
    key: client_ip
    scope: global
`, k.pemPath, perIP)
	p := compilePolicy(tb, "users.yaml", src)
	return p
}

// TestTokensVerifiedOnDemand: a token is verified only when a limit the
// request matched counts per user, only after the limits that do not, and
// once for as long as it is valid.
func TestTokensVerifiedOnDemand(t *testing.T) {
	t.Parallel()
	forFronts(t, allFronts, testTokensVerifiedOnDemand)
}

func testTokensVerifiedOnDemand(t *testing.T, fr string) {
	k := newTokenKit(t)
	var invalid atomic.Int64
	pm, err := NewPolicyMatcher(Fixed(userPolicy(t, k, 10)), PolicyMatcherOptions{OnInvalidToken: func(string) { invalid.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	_, srvURL, client := startFront(t, fr, Options{Matcher: pm, Engine: memEngine(t)},
		func(http.ResponseWriter, *http.Request) {})
	bearer := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

	// No limit of /open counts per user: a forged token costs nothing.
	forged := k.token(t, k.forger, "mallory")
	if a := do(t, client, "GET", srvURL+"/open", bearer(forged)); a.status != 200 {
		t.Fatalf("/open with a forged token: %d", a.status)
	}
	if n := pm.TokensVerified(); n != 0 || invalid.Load() != 0 {
		t.Fatalf("a token was verified (%d, %d invalid) for a route that needs no user", n, invalid.Load())
	}
	// /me counts per user: the token is verified once, then remembered.
	valid := k.token(t, k.key, "alice")
	var got []int
	for range 4 {
		got = append(got, do(t, client, "GET", srvURL+"/me", bearer(valid)).status)
	}
	if fmt.Sprint(got) != "[200 200 200 429]" {
		t.Errorf("alice on /me: %v, want 3 allowed by her per-user limit", got)
	}
	if n := pm.TokensVerified(); n != 1 {
		t.Errorf("a repeated valid token was verified %d times, want 1", n)
	}
	// A forged token on /me is verified, fails, is counted, and the request
	// is refused with 401 (after the per-address limit counted it).
	if a := do(t, client, "GET", srvURL+"/me", bearer(forged)); a.status != 401 || a.header.Get("WWW-Authenticate") == "" {
		t.Errorf("/me with a forged token: %d %v, want 401 with a challenge", a.status, a.header)
	}
	if pm.TokensVerified() != 2 || invalid.Load() != 1 {
		t.Errorf("forged token: %d verified, %d invalid; want 2 and 1", pm.TokensVerified(), invalid.Load())
	}
	// A route that takes such requests as anonymous lets it through without
	// a user (its per-user limit does not apply), still counted.
	if a := do(t, client, "GET", srvURL+"/anon", bearer(forged)); a.status != 200 {
		t.Errorf("/anon with a forged token: %d, want 200 (anonymous)", a.status)
	}
	if pm.TokensVerified() != 3 || invalid.Load() != 2 {
		t.Errorf("forged token on /anon: %d verified, %d invalid; want 3 and 2", pm.TokensVerified(), invalid.Load())
	}
	// The per-address limit (10) is used up: a new forged token is refused
	// before it costs a verification.
	for i := 0; i < 10; i++ {
		do(t, client, "GET", srvURL+"/open", nil)
	}
	if a := do(t, client, "GET", srvURL+"/me", bearer(k.token(t, k.forger, "eve"))); a.status != 429 {
		t.Errorf("forged token over the per-address limit: %d, want 429", a.status)
	}
	if n := pm.TokensVerified(); n != 3 {
		t.Errorf("a token was verified (%d) for a request the per-address limit refused", n)
	}
}

// BenchmarkForgedToken: a forged RS256 token on a route whose limits do not
// count per user costs what the same request without a token costs.
func BenchmarkForgedToken(b *testing.B) {
	k := newTokenKit(b)
	for _, c := range []struct {
		name, path string
		token      string
	}{
		{"unused/none", "/open", ""},
		{"unused/forged", "/open", k.token(b, k.forger, "mallory")},
		{"per-user/valid", "/me", k.token(b, k.key, "alice")},
	} {
		b.Run(c.name, func(b *testing.B) {
			p := userPolicy(b, k, 1<<40)
			pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{})
			if err != nil {
				b.Fatal(err)
			}
			g, err := New(Options{Matcher: pm, Engine: limiter.New(newMemStore(b, nil), limiter.Options{})})
			if err != nil {
				b.Fatal(err)
			}
			hdr := map[string]string{}
			if c.token != "" {
				hdr["Authorization"] = "Bearer " + c.token
			}
			want := 200
			if c.path == "/me" {
				want = 429 // the per-user limit of 3 is soon used up
			}
			benchGatewayAfter(b, g, want, c.path, hdr, 3)
		})
	}
}

// TestBadTokensAre401OnPerUserRoutes: a token the identity package refuses
// before it checks a signature (one padded past the longest token it
// verifies, one whose header lists critical extensions) is a token that
// did not verify: a route with per-user limits answers it 401 with a
// challenge, on every front, and the upstream never sees it.
func TestBadTokensAre401OnPerUserRoutes(t *testing.T) {
	t.Parallel()
	forFronts(t, allFronts, testBadTokensAre401OnPerUserRoutes)
}

func testBadTokensAre401OnPerUserRoutes(t *testing.T, fr string) {
	k := newTokenKit(t)
	reasons := make(chan string, 4)
	pm, err := NewPolicyMatcher(Fixed(userPolicy(t, k, 100)), PolicyMatcherOptions{OnInvalidToken: func(r string) { reasons <- r }})
	if err != nil {
		t.Fatal(err)
	}
	var served atomic.Int64
	_, srvURL, client := startFront(t, fr, Options{Matcher: pm, Engine: memEngine(t)},
		func(http.ResponseWriter, *http.Request) { served.Add(1) })
	sign := func(claims jwt.MapClaims, header map[string]any) string {
		t.Helper()
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
		maps.Copy(tok.Header, header)
		s, err := tok.SignedString(k.key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	exp := time.Now().Add(time.Hour).Unix()
	for _, c := range []struct {
		name, token, reason string
	}{
		{"padded past 9 KiB", sign(jwt.MapClaims{"sub": "alice", "exp": exp, "pad": strings.Repeat("p", 9<<10)}, nil), "too_long"},
		{"crit in its header", sign(jwt.MapClaims{"sub": "alice", "exp": exp}, map[string]any{"crit": []string{"x"}}), "critical"},
	} {
		if c.name == "padded past 9 KiB" && len(c.token) <= 9<<10 {
			t.Fatalf("the padded token has %d bytes", len(c.token))
		}
		a := do(t, client, "GET", srvURL+"/me", map[string]string{"Authorization": "Bearer " + c.token})
		if a.status != http.StatusUnauthorized || a.header.Get("WWW-Authenticate") == "" {
			t.Errorf("a token %s: %d %v, want 401 with a challenge", c.name, a.status, a.header)
		}
		select {
		case r := <-reasons:
			if r != c.reason {
				t.Errorf("a token %s was refused as %q, want %q", c.name, r, c.reason)
			}
		default:
			t.Errorf("a token %s was not counted as invalid", c.name)
		}
	}
	if n := served.Load(); n != 0 {
		t.Errorf("the upstream served %d requests with bad tokens", n)
	}
	// The same route takes a good token.
	if a := do(t, client, "GET", srvURL+"/me", map[string]string{"Authorization": "Bearer " + k.token(t, k.key, "alice")}); a.status != 200 {
		t.Errorf("a good token: %d", a.status)
	}
}

// TestIdentityFieldsOnce: a request that carries the API key's field, the
// token's or the user header more than once is refused with 400 and
// reaches no upstream, on every front: the gateway reads the first line,
// an upstream may read the last, and would then serve one client while
// another was charged. Once each, the request passes.
func TestIdentityFieldsOnce(t *testing.T) {
	t.Parallel()
	forFronts(t, allFronts, testIdentityFieldsOnce)
}

func testIdentityFieldsOnce(t *testing.T, fr string) {
	k := newTokenKit(t)
	p := compilePolicy(t, "once.yaml", fmt.Sprintf(`version: 1
server:
  api_key_header: x-api-key
  trusted_proxies: [127.0.0.1]
  user:
    jwt: {alg: RS256, key_file: %q}
    header: X-User
plans:
  - {name: gold, rate: 100, burst: 100}
  - {name: trial, rate: 3, per: 1m, burst: 3}
keys:
  - {name: acme, plan: gold, sha256: "6371cb7a907cc8f10740229732c4b6164b285169494b85304468313513427878"}
routes:
  - {name: api, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:1"}
limits:
  - {name: per-ip, rate: 1000, per: 1h, burst: 1000}
`, k.pemPath))
	pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var reached atomic.Int64
	_, base, _ := startFront(t, fr, Options{Matcher: pm, Engine: memEngine(t)},
		func(http.ResponseWriter, *http.Request) { reached.Add(1) })
	tok := k.token(t, k.key, "alice")
	for _, c := range []struct {
		fields string
		status int
	}{
		{"x-api-key: secret\r\n", 200},
		{"x-api-key: secret\r\nX-Api-Key: other\r\n", 400},
		{"x-api-key: \r\nx-api-key: secret\r\n", 400},
		{"Authorization: Bearer " + tok + "\r\n", 200},
		{"Authorization: Bearer " + tok + "\r\nAuthorization: Bearer x.y.z\r\n", 400},
		{"X-User: alice\r\n", 200},
		{"X-User: alice\r\nx-user: bob\r\n", 400},
	} {
		before := reached.Load()
		head := "GET /x HTTP/1.1\r\nHost: a.example\r\n" + c.fields + "\r\n"
		if status := rawStatus(t, base, head); status != c.status {
			t.Errorf("%q: status %d, want %d", c.fields, status, c.status)
		}
		if n := reached.Load() - before; c.status == 400 && n != 0 {
			t.Errorf("%q: reached the upstream", c.fields)
		}
	}
}

// TestKeyedFieldsOnce: a limit counted per value of a header field
// (key: header:X-Tenant) is charged to the field's first line; an upstream
// may act on another (the last, as many frameworks read a repeated field).
// "X-Tenant: other" then "X-Tenant: acme" would be charged to "other" and
// served as acme: acme's limit bypassed with a fresh first value each
// time, or spent on another tenant's counter. Such a request is refused
// with 400, as one repeating an identity field is, and reaches no upstream.
func TestKeyedFieldsOnce(t *testing.T) {
	t.Parallel()
	forFronts(t, allFronts, testKeyedFieldsOnce)
}

func testKeyedFieldsOnce(t *testing.T, fr string) {
	p := compilePolicy(t, "keyed.yaml", `version: 1
routes:
  - {name: api, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:1"}
limits:
  - {name: per-tenant, rate: 1, per: 1h, burst: 1, key: "header:X-Tenant"}
`)
	pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	served := map[string]int{}
	_, base, _ := startFront(t, fr, Options{Matcher: pm, Engine: memEngine(t)},
		func(_ http.ResponseWriter, r *http.Request) {
			vs := r.Header.Values("X-Tenant") // the upstream acts on the last line
			mu.Lock()
			served[vs[len(vs)-1]]++
			mu.Unlock()
		})
	if status := rawStatus(t, base, "GET /x HTTP/1.1\r\nHost: a.example\r\nX-Tenant: acme\r\n\r\n"); status != 200 {
		t.Fatalf("acme's one request: %d", status)
	}
	if status := rawStatus(t, base, "GET /x HTTP/1.1\r\nHost: a.example\r\nX-Tenant: acme\r\n\r\n"); status != 429 {
		t.Fatalf("acme's second request: %d, want 429", status)
	}
	for i, fields := range []string{
		"X-Tenant: other-1\r\nX-Tenant: acme\r\n",
		"x-tenant: other-2\r\nX-TENANT: acme\r\n",
		"X-Tenant: \r\nX-Tenant: acme\r\n",
	} {
		status := rawStatus(t, base, "GET /x HTTP/1.1\r\nHost: a.example\r\n"+fields+"\r\n")
		if status != http.StatusBadRequest {
			t.Errorf("%d %q: status %d, want 400", i, fields, status)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if served["acme"] != 1 {
		t.Errorf("the upstream served acme %d times past its limit of 1 (%v)", served["acme"], served)
	}
}

// TestNAT64ClientsCountApart: IPv4 clients that reach the gateway through
// a translator (NAT64/SIIT in front of an IPv6-only service) arrive as
// addresses of 64:ff9b::/96. Keyed by /64 they would share one counter,
// and one client would spend every other's budget; each is counted as the
// IPv4 address it holds, the same counter as when it comes over IPv4.
func TestNAT64ClientsCountApart(t *testing.T) {
	t.Parallel()
	forFronts(t, allFronts, testNAT64ClientsCountApart)
}

func testNAT64ClientsCountApart(t *testing.T, fr string) {
	p := compilePolicy(t, "nat64.yaml", `version: 1
server:
  trusted_proxies: [127.0.0.1]
routes:
  - {name: api, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:1"}
limits:
  - {name: per-ip, rate: 1, per: 1h, burst: 1}
`)
	pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, base, _ := startFront(t, fr, Options{Matcher: pm, Engine: memEngine(t)},
		func(http.ResponseWriter, *http.Request) {})
	for _, c := range []struct {
		from   string
		status int
	}{
		{"64:ff9b::198.51.100.7", 200},
		{"64:ff9b::198.51.100.7", 429},
		{"64:ff9b::198.51.100.8", 200}, // another IPv4 client of the translator
		{"198.51.100.7", 429},          // the first, over IPv4
		{"2001:db8::1", 200},
		{"2001:db8::2", 429}, // one /64
	} {
		head := "GET /x HTTP/1.1\r\nHost: a.example\r\nX-Forwarded-For: " + c.from + "\r\n\r\n"
		if status := rawStatus(t, base, head); status != c.status {
			t.Errorf("from %s: status %d, want %d", c.from, status, c.status)
		}
	}
}
