package admin

import (
	"context"
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/internal/redisconn"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/keystore"
	"github.com/floodgate/floodgate/policy"
)

// TestChangeAuditedWhenTheCallerLeaves: a change the API made is audited
// even when its caller hangs up before the entry is written (a client's
// timeout, or a token holder hiding what it did). The keys and the audit
// log are in a real Redis; the caller leaves at the moment the entry is
// stamped, once the key is revoked.
func TestChangeAuditedWhenTheCallerLeaves(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	c, err := redisconn.Open("redis://" + rs.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f, err := config.Parse("p.yaml", []byte(`routes:
  - {name: all, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:1"}
plans:
  - {name: basic, rate: 1, per: 1h, burst: 3}
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Compile(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	pol := func() *policy.Policy { return p }
	ctx := context.Background()
	keys, err := keystore.New(ctx, keystore.Options{Backend: keystore.NewRedisBackend(c), Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := keys.Create(ctx, "acme", "basic", policy.KeyOptions{}); err != nil {
		t.Fatal(err)
	}
	audit := NewRedisAudit(c, 0)

	// The caller's request, and the server's context of it.
	callCtx, hangUp := context.WithCancel(ctx)
	defer hangUp()
	var served atomic.Pointer[context.Context]
	now := func() time.Time {
		// The entry is being stamped: the key is revoked. The caller
		// leaves, and the server sees it go.
		hangUp()
		if sc := served.Load(); sc != nil {
			select {
			case <-(*sc).Done():
			case <-time.After(20 * time.Second):
				t.Error("the server did not see the caller leave")
			}
		}
		return time.Now()
	}
	a, err := New(Options{Tokens: []Token{{Name: "ops", SHA256: sha256.Sum256([]byte("ops-token"))}}, Keys: keys,
		Audit: audit, Policy: pol, Engine: noEngine{}, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := r.Context()
		served.Store(&rc)
		a.ServeHTTP(w, r)
	}))
	defer srv.Close()

	req, err := http.NewRequestWithContext(callCtx, "POST", srv.URL+"/api/v1/keys/acme/revoke", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer ops-token")
	if resp, err := srv.Client().Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the call was answered (%s) though its caller left", resp.Status)
	}

	rec, err := keys.Get("acme")
	if err != nil || !rec.Revoked {
		t.Fatalf("the key: %+v, %v; want it revoked", rec, err)
	}
	// The handler may still be writing the entry: wait for it.
	deadline := time.Now().Add(20 * time.Second)
	for {
		entries, err := audit.List(ctx, Query{Target: "acme", Action: "key.revoke"})
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) == 1 && entries[0].Actor == "ops" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the revocation of acme is not in the audit log: %+v", entries)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
