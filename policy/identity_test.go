package policy

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/floodgate/floodgate/identity"
)

// request resolves an HTTP request's identity as the gateway does and
// turns it into a policy request.
func request(res *identity.Resolver, method, path, peer string, headers map[string]string, now time.Time) *Request {
	hr := httptest.NewRequest(method, path, nil)
	hr.RemoteAddr = peer
	for k, v := range headers {
		hr.Header.Set(k, v)
	}
	id := res.ResolveAt(hr, now)
	return &Request{Method: method, Path: path, ClientIP: id.ClientIP, ClientKey: id.ClientKey, User: id.User, Header: hr.Header}
}

func TestSpoofedForwardedForThroughTheEngine(t *testing.T) {
	t.Parallel()
	p := compile(t, `
server:
  trusted_proxies: [10.0.0.0/8]
limits:
  - {name: per-ip, rate: 1, per: 1h, burst: 2}
`)
	res, err := identity.NewResolver(p.Server().IdentityOptions())
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, p, t0)
	// An untrusted client rotates X-Forwarded-For: it stays one client.
	var got []int
	for _, fake := range []string{"1.1.1.1", "2.2.2.2", "10.0.0.5, 3.3.3.3"} {
		a := r.do(request(res, "GET", "/", "203.0.113.5:4000", map[string]string{"X-Forwarded-For": fake}, t0))
		got = append(got, a.status)
	}
	if got[0] != 200 || got[1] != 200 || got[2] != 429 {
		t.Errorf("spoofing client: %v, want 200 200 429", got)
	}
	// Behind the trusted proxy, two clients are two keys.
	for _, client := range []string{"198.51.100.1", "198.51.100.2"} {
		req := request(res, "GET", "/", "10.0.0.1:80", map[string]string{"X-Forwarded-For": client}, t0)
		if a := r.do(req); a.status != 200 {
			t.Errorf("client %s behind the proxy: %d", client, a.status)
		}
	}
}

func TestForgedOrExpiredJWTNeverBecomesAUser(t *testing.T) {
	t.Parallel()
	secret := []byte("0123456789abcdef0123456789abcdef-policy")
	p := compile(t, `
limits:
  - {name: urgent, algorithm: quota, limit: 1, period: DAY, key: user}
`)
	res, err := identity.NewResolver(identity.Options{JWT: &identity.JWTOptions{Alg: "HS256", Key: secret}})
	if err != nil {
		t.Fatal(err)
	}
	token := func(key []byte, exp time.Time) map[string]string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "teacher-7", "exp": exp.Unix()}).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return map[string]string{"Authorization": "Bearer " + s}
	}
	r := newRig(t, p, t0)
	forged := token([]byte("guessed-guessed-guessed-guessed-xx"), t0.Add(time.Hour))
	expired := token(secret, t0.Add(-time.Hour))
	for _, h := range []map[string]string{forged, expired, forged} {
		req := request(res, "POST", "/notices/urgent", "203.0.113.5:4000", h, t0)
		if req.User != "" {
			t.Fatalf("bad token became user %q", req.User)
		}
		r.do(req)
	}
	// The real teacher's budget is untouched.
	real := request(res, "POST", "/notices/urgent", "198.51.100.9:4000", token(secret, t0.Add(time.Hour)), t0)
	if real.User != "teacher-7" {
		t.Fatalf("valid token gave user %q", real.User)
	}
	if a := r.do(real); a.status != 200 {
		t.Errorf("teacher's first notice: %+v", a)
	}
	if a := r.do(real); a.status != 429 || a.message != "Limit Exceeded" {
		t.Errorf("teacher's second notice: %+v", a)
	}
}
