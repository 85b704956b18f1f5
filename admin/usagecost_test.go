package admin

import (
	"context"
	"crypto/sha256"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/keystore"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memstore"
)

// TestUsageAllowedNowAsTheGatewayAnswers: a limit's usage says whether a
// request of it would pass now as the gateway would answer it, for a limit
// whose request costs more than one unit (cost: 5 of 12 a minute, 2 units
// left after two requests: the next is refused), and its left is what the
// counter holds, on the gateway's engine and clock.
func TestUsageAllowedNowAsTheGatewayAnswers(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(up.Close)
	f, err := config.Parse("p.yaml", []byte(`routes:
  - {name: all, match: {paths: ["/**"]}, upstream: "`+up.URL+`"}
limits:
  - {name: heavy, algorithm: fixed_window, limit: 12, window: 1m, cost: 5, key: global}
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Compile(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	pol := func() *policy.Policy { return p }
	now := time.Date(2026, 12, 6, 12, 0, 10, 0, time.UTC)
	st, err := memstore.New(memstore.Options{Now: now.UnixNano, SweepInterval: -1, SnapshotInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	eng := limiter.New(st, limiter.Options{})
	pm, err := gateway.NewPolicyMatcher(gateway.Fixed(p), gateway.PolicyMatcherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(gateway.Options{Matcher: pm, Engine: eng})
	if err != nil {
		t.Fatal(err)
	}
	gw := httptest.NewServer(g)
	t.Cleanup(gw.Close)
	keys, err := keystore.New(context.Background(), keystore.Options{
		Backend: keystore.NewFileBackend(filepath.Join(t.TempDir(), "keys.json")), Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Options{Tokens: []Token{{Name: "ops", SHA256: sha256.Sum256([]byte("ops-token"))}}, Keys: keys,
		Audit: NewFileAudit(filepath.Join(t.TempDir(), "audit.jsonl"), 0), Policy: pol, Engine: eng, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	l, _ := p.Limit("heavy")
	for i := range 4 {
		u, err := a.Peek(context.Background(), l, "global")
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Get(gw.URL + "/x")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		passed := resp.StatusCode == http.StatusOK
		wantLeft := max(12-5*int64(i), 2)
		if u.Allowed != passed || u.Left != wantLeft || u.Used != 12-wantLeft {
			t.Errorf("before request %d: allowed_now %v, left %d, used %d; the gateway answered %d, with %d units left",
				i+1, u.Allowed, u.Left, u.Used, resp.StatusCode, wantLeft)
		}
	}
}
