package console

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/floodgate/floodgate/access"
	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/penalty"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memstore"
)

// offences is a penalty.Backend that keeps the bans in memory and
// records the context of each offence it is asked to count.
type offences struct {
	penalty.Backend
	mu   sync.Mutex
	ctxs []context.Context
	errs []error // each context's Err when the offence was counted
}

func (o *offences) Offend(ctx context.Context, r *config.Ban, key string) (*penalty.Ban, error) {
	o.mu.Lock()
	o.ctxs = append(o.ctxs, ctx)
	o.errs = append(o.errs, ctx.Err())
	o.mu.Unlock()
	return o.Backend.Offend(ctx, r, key)
}

// TestKeeperBoundsItsOutcomes: without penalty-box rules an outcome asks
// the backend nothing; with them, an offence is counted under a deadline
// no later than the bound given, also when the request's own context has
// ended (its client left).
func TestKeeperBoundsItsOutcomes(t *testing.T) {
	be := &offences{Backend: penalty.NewMemory(0, nil)}
	rule := config.Ban{Name: "flood", Key: config.BanKeyClientIP, After: 3, Within: time.Minute,
		Ban: time.Minute, MaxBan: 5 * time.Minute, Growth: 2}
	m := &gateway.Match{ClientKey: "10.0.0.1", RefusedBy: policy.IdentityClientIP} // refused by a per-address limit
	gone, leave := context.WithCancel(context.Background())
	leave()

	for _, rules := range [][]config.Ban{nil, {rule}} {
		box, err := penalty.New(rules, penalty.Options{Backend: be})
		if err != nil {
			t.Fatal(err)
		}
		k := &Keeper{box: box}
		before := time.Now()
		k.Outcome(gone, time.Second, m, true, 429)
		box.Close()
		be.mu.Lock()
		n := len(be.ctxs)
		var ctx context.Context
		var cerr error
		if n > 0 {
			ctx, cerr = be.ctxs[n-1], be.errs[n-1]
		}
		be.mu.Unlock()
		if len(rules) == 0 {
			if n != 0 {
				t.Fatalf("%d offences counted without rules", n)
			}
			continue
		}
		if n != 1 {
			t.Fatalf("%d offences counted, want 1", n)
		}
		dl, ok := ctx.Deadline()
		if !ok || dl.After(before.Add(time.Second+100*time.Millisecond)) {
			t.Fatalf("offence counted with deadline %v (set: %v), want within 1 s of %v", dl, ok, before)
		}
		if cerr != nil {
			t.Fatalf("the offence's context had ended with the request's: %v", cerr)
		}
	}
}

// TestKeeperBansUsersWhereNoLimitCountsPerUser: the console's keeper in
// front of the gateway refuses a user its penalty box banned on a route
// whose limits do not count per user, with a token of hers the gateway
// never verified before (a new login), and counts her offences there: the
// gateway verifies the token for the keeper. A token that does not verify
// is not hers.
func TestKeeperBansUsersWhereNoLimitCountsPerUser(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	keyFile := filepath.Join(t.TempDir(), "jwt.key")
	if err := os.WriteFile(keyFile, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := config.Parse("p.yaml", []byte(`version: 1
server:
  user:
    jwt: {alg: HS256, key_file: "`+keyFile+`"}
  bans:
    - {name: logins, key: user, after: 2, within: 1m, ban: 1m, count_on: [401]}
routes:
  - {name: login, match: {paths: ["/login"]}, upstream: none}
  - {name: open, match: {paths: ["/open"]}, upstream: none}
limits:
  - {name: per-ip, match: {routes: [open]}, algorithm: fixed_window, limit: 1000, window: 1h, key: client_ip}
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Compile(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	box, err := penalty.New(f.Server.Bans, penalty.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	pm, err := gateway.NewPolicyMatcher(gateway.Fixed(p), gateway.PolicyMatcherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := memstore.New(memstore.Options{SnapshotInterval: -1, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	lists := access.New(&f.Server.Access, nil, 0, nil)
	defer lists.Close()
	g, err := gateway.New(gateway.Options{Matcher: pm, Engine: limiter.New(ms, limiter.Options{}), Gatekeeper: &Keeper{lists: lists, box: box}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/login" {
			w.WriteHeader(http.StatusUnauthorized) // a wrong second factor
		}
	})))
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	sign := func(key []byte, claims jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	get := func(path, tok string) int {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	exp := time.Now().Add(time.Hour).Unix()
	alice := sign(secret, jwt.MapClaims{"sub": "alice", "exp": exp, "jti": "1"})
	// Two failed second factors: her ban (count_on 401, keyed by user).
	for range 2 {
		if st := get("/login", alice); st != http.StatusUnauthorized {
			t.Fatalf("alice's login: %d, want the upstream's 401", st)
		}
	}
	var banned bool
	for range 200 {
		if _, _, banned = box.Banned("", "", "alice"); banned {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !banned {
		t.Fatalf("alice is not banned after two failed logins with her token on a route without per-user limits")
	}
	if st := get("/open", sign(secret, jwt.MapClaims{"sub": "alice", "exp": exp, "jti": "2"})); st != http.StatusTooManyRequests {
		t.Errorf("banned alice with a new token on /open: %d, want 429", st)
	}
	if st := get("/open", sign([]byte("fedcba9876543210fedcba9876543210"), jwt.MapClaims{"sub": "alice", "exp": exp})); st != http.StatusOK {
		t.Errorf("a forged token naming alice on /open: %d, want 200 (no user)", st)
	}
	if st := get("/open", sign(secret, jwt.MapClaims{"sub": "bob", "exp": exp})); st != http.StatusOK {
		t.Errorf("bob on /open: %d, want 200", st)
	}
}
