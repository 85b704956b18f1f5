package policy_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// The requests of these tests reach the gateway as HTTP requests: it works
// out who sent them from the peer and the header fields, with the policy's
// server settings, before the policy matches them.

func TestSpoofedForwardedForThroughTheEngine(t *testing.T) {
	t.Parallel()
	p := compile(t, `
server:
  trusted_proxies: [10.0.0.0/8]
limits:
  - {name: per-ip, rate: 1, per: 1h, burst: 2}
`)
	r := newRig(t, p, t0)
	// An untrusted client rotates X-Forwarded-For: it stays one client.
	var got []int
	for _, fake := range []string{"1.1.1.1", "2.2.2.2", "10.0.0.5, 3.3.3.3"} {
		a := r.serve(httpRequest("GET", "/", "203.0.113.5:4000", map[string]string{"X-Forwarded-For": fake}))
		got = append(got, a.status)
	}
	if got[0] != 200 || got[1] != 200 || got[2] != 429 {
		t.Errorf("spoofing client: %v, want 200 200 429", got)
	}
	// Behind the trusted proxy, two clients are two keys.
	for _, client := range []string{"198.51.100.1", "198.51.100.2"} {
		req := httpRequest("GET", "/", "10.0.0.1:80", map[string]string{"X-Forwarded-For": client})
		if a := r.serve(req); a.status != 200 {
			t.Errorf("client %s behind the proxy: %d", client, a.status)
		}
	}
}

func TestForgedOrExpiredJWTNeverBecomesAUser(t *testing.T) {
	t.Parallel()
	secret := []byte("0123456789abcdef0123456789abcdef-policy")
	keyFile := filepath.Join(t.TempDir(), "secret.txt")
	if err := os.WriteFile(keyFile, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	p := compile(t, `
server:
  user:
    jwt: {alg: HS256, key_file: "`+keyFile+`"}
limits:
  - {name: urgent, algorithm: quota, limit: 1, period: DAY, key: user}
`)
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
		a := r.serve(httpRequest("POST", "/notices/urgent", "203.0.113.5:4000", h))
		if a.user != "" {
			t.Fatalf("bad token became user %q", a.user)
		}
		if a.status != 401 {
			t.Errorf("bad token answered %d, want 401", a.status)
		}
	}
	// The real teacher's budget is untouched.
	real := httpRequest("POST", "/notices/urgent", "198.51.100.9:4000", token(secret, t0.Add(time.Hour)))
	if a := r.serve(real); a.status != 200 || a.user != "teacher-7" {
		t.Errorf("teacher's first notice: %+v", a)
	}
	if a := r.serve(real); a.status != 429 || a.message != "Limit Exceeded" {
		t.Errorf("teacher's second notice: %+v", a)
	}
}
