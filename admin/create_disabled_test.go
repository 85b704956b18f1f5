package admin

import (
	"context"
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/internal/redisconn"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/keystore"
	"github.com/floodgate/floodgate/policy"
)

// leaveAfterAdd is a key backend whose caller leaves once a new record is
// written, before the answer goes out.
type leaveAfterAdd struct {
	keystore.Backend
	leave func()
}

func (b leaveAfterAdd) Add(ctx context.Context, r keystore.Record, most int) (string, string, error) {
	from, to, err := b.Backend.Add(ctx, r, most)
	b.leave()
	return from, to, err
}

// TestKeyCreatedDisabledInOneWrite: a key asked for disabled is written
// disabled, in one change, so that no instance ever holds it usable and a
// caller that leaves once it is written (a client's timeout) leaves it
// disabled and audited. Before, it was made usable, then disabled by a
// second change, which the caller's leaving cancelled: the key stayed
// usable and its creation was not audited.
func TestKeyCreatedDisabledInOneWrite(t *testing.T) {
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

	callCtx, hangUp := context.WithCancel(ctx)
	defer hangUp()
	var served atomic.Pointer[context.Context]
	leave := func() {
		hangUp()
		if sc := served.Load(); sc != nil {
			select {
			case <-(*sc).Done():
			case <-time.After(20 * time.Second):
				t.Error("the server did not see the caller leave")
			}
		}
	}
	keys, err := keystore.New(ctx, keystore.Options{Backend: leaveAfterAdd{keystore.NewRedisBackend(c), leave}, Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	audit := NewRedisAudit(c, 0)
	a, err := New(Options{Tokens: []Token{{Name: "ops", SHA256: sha256.Sum256([]byte("ops-token"))}}, Keys: keys,
		Audit: audit, Policy: pol, Engine: noEngine{}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := r.Context()
		served.Store(&rc)
		a.ServeHTTP(w, r)
	}))
	defer srv.Close()

	req, err := http.NewRequestWithContext(callCtx, "POST", srv.URL+"/api/v1/keys",
		strings.NewReader(`{"name": "acme", "plan": "basic", "disabled": true}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer ops-token")
	req.Header.Set("Content-Type", "application/json")
	if resp, err := srv.Client().Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the call was answered (%s) though its caller left", resp.Status)
	}

	// What another instance reads from the same Redis.
	other, err := keystore.New(ctx, keystore.Options{Backend: keystore.NewRedisBackend(c), Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := other.Get("acme")
	if err != nil {
		t.Fatalf("the key: %v", err)
	}
	if !rec.Disabled {
		t.Fatalf("the key asked for disabled is stored usable: %+v", rec)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		entries, err := audit.List(ctx, Query{Target: "acme", Action: "key.create"})
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) == 1 && entries[0].Actor == "ops" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the creation of acme is not in the audit log: %+v", entries)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
