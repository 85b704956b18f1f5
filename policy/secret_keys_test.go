package policy_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/identity"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// TestCredentialHeaderKeysAreHashed counts requests per header field that
// carries a credential (the API key header, Authorization, the token's
// header, Cookie), as an operator may write "key: header:X-Api-Key" for a
// limit per API key. The counters must still be per value, and the
// store's state file, which holds every counter key, must not hold the
// secrets.
func TestCredentialHeaderKeysAreHashed(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "jwt-secret.txt")
	if err := os.WriteFile(keyFile, []byte("a-secret-of-at-least-32-bytes-for-hs256\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := compile(t, `
server:
  api_key_header: x-api-key
  user: {jwt: {alg: HS256, key_file: "`+keyFile+`", header: x-token}}
routes:
  - {name: r, match: {paths: ["/**"]}, upstream: none}
limits:
  - {name: per-key, rate: 2, per: 1m, key: "header:x-api-key"}
  - {name: per-auth, rate: 2, per: 1m, key: "header:authorization"}
  - {name: per-token, rate: 2, per: 1m, key: "header:X-Token"}
  - {name: per-cookie, rate: 2, per: 1m, key: ["client_ip", "header:cookie"]}
`)
	state := filepath.Join(dir, "state")
	st, err := memstore.New(memstore.Options{StatePath: state, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	pm, err := gateway.NewPolicyMatcher(gateway.Fixed(p), gateway.PolicyMatcherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(gateway.Options{Matcher: pm, Engine: limiter.New(st, limiter.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	secrets := []string{"sk-live-4f1c2a9d7e", "Bearer tok-0c9e55aa31", "tok-77d1e0b3c2", "session=ck-5b0e9f12"}
	send := func(i int, value string) int {
		hdr := http.Header{}
		hdr.Set([]string{"X-Api-Key", "Authorization", "X-Token", "Cookie"}[i], value)
		v := &gateway.Request{Method: "GET", Path: "/x", Proto: "HTTP/1.1", Peer: ip("192.0.2.7"),
			Known: &gateway.Known{ClientIP: ip("192.0.2.7"), UserKnown: true}, Header: identity.Header(hdr)}
		h := g.Handle(context.Background(), v, gateway.HandleOptions{Hold: true})
		defer h.Done(http.StatusOK)
		if h.Err != nil {
			t.Fatalf("decide: %v", h.Err)
		}
		if h.Forwarded {
			return http.StatusOK
		}
		return h.Status
	}
	for i, secret := range secrets {
		for n := range 2 {
			if s := send(i, secret); s != 0 && s != http.StatusOK {
				t.Fatalf("%s: request %d answered %d", p.Limits()[i+1].Name, n+1, s)
			}
		}
		if s := send(i, secret); s != http.StatusTooManyRequests {
			t.Errorf("%s: third request with one value answered %d, want 429", p.Limits()[i+1].Name, s)
		}
		if s := send(i, secret+"-other"); s == http.StatusTooManyRequests {
			t.Errorf("%s: another value shares the count", p.Limits()[i+1].Name)
		}
	}
	if err := st.Snapshot(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) == 0 {
		t.Fatal("empty state file")
	}
	for _, secret := range secrets {
		part := strings.TrimPrefix(secret, "Bearer ")
		if bytes.Contains(data, []byte(part)) {
			t.Errorf("the state file holds the secret %q", part)
		}
	}
}
