package admin

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/keystore"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memstore"
)

// planRig is the admin API and the gateway of one policy file, as serve
// wires them: a Reloader that follows the file, the API's keys in a key
// file, one memstore (its clock set by the test) that the gateway charges
// and the API peeks at, each behind an httptest server on loopback. The
// gateway's upstream answers 200 to every request it lets through.
type planRig struct {
	t     *testing.T
	path  string
	rl    *policy.Reloader
	keys  *keystore.Store
	ns    atomic.Int64
	api   string
	gw    string
	token string
}

func newPlanRig(t *testing.T, src string, start time.Time) *planRig {
	t.Helper()
	return newPlanRigWith(t, src, start, nil)
}

// newPlanRigWith is newPlanRig with the API's keys in backend (nil: a key
// file).
func newPlanRigWith(t *testing.T, src string, start time.Time, backend keystore.Backend) *planRig {
	t.Helper()
	dir := t.TempDir()
	if backend == nil {
		backend = keystore.NewFileBackend(filepath.Join(dir, "keys.json"))
	}
	r := &planRig{t: t, path: filepath.Join(dir, "floodgate.yaml"), token: "ops-token"}
	r.ns.Store(start.UnixNano())
	r.write(src)
	rl, err := policy.NewReloader(policy.ReloaderOptions{Path: r.path})
	if err != nil {
		t.Fatal(err)
	}
	r.rl = rl
	now := func() time.Time { return time.Unix(0, r.ns.Load()) }
	keys, err := keystore.New(context.Background(), keystore.Options{Backend: backend, Policy: rl.Policy, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	rl.SetKeySource(keys)
	r.keys = keys
	st, err := memstore.New(memstore.Options{Now: r.ns.Load, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	engine := limiter.New(st, limiter.Options{})
	a, err := New(Options{Tokens: []Token{{Name: "ops", SHA256: sha256.Sum256([]byte(r.token))}}, Keys: keys,
		Audit: NewFileAudit(filepath.Join(dir, "audit.jsonl"), 0), Policy: rl.Policy, Engine: engine, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	apiSrv := httptest.NewServer(a)
	t.Cleanup(apiSrv.Close)
	r.api = apiSrv.URL + "/api/v1"
	pm, err := gateway.NewPolicyMatcher(rl, gateway.PolicyMatcherOptions{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(gateway.Options{Matcher: pm, Engine: engine})
	if err != nil {
		t.Fatal(err)
	}
	gwSrv := httptest.NewServer(g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
	})))
	t.Cleanup(gwSrv.Close)
	r.gw = gwSrv.URL
	return r
}

// write replaces the policy file atomically.
func (r *planRig) write(src string) {
	r.t.Helper()
	tmp := r.path + ".tmp"
	if err := os.WriteFile(tmp, []byte(src), 0o644); err != nil {
		r.t.Fatal(err)
	}
	if err := os.Rename(tmp, r.path); err != nil {
		r.t.Fatal(err)
	}
}

// reload applies the policy file src, as a SIGHUP does, and has the key
// store follow it, as serve's console does on each reload.
func (r *planRig) reload(src string) {
	r.t.Helper()
	r.write(src)
	if err := r.rl.Reload(); err != nil {
		r.t.Fatal(err)
	}
	r.keys.Refresh(context.Background())
}

// call makes an admin API call and decodes its answer into out (if not
// nil); it returns the status.
func (r *planRig) call(method, path, body string, out any) int {
	r.t.Helper()
	req, err := http.NewRequest(method, r.api+path, strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+r.token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer res.Body.Close()
	if out != nil {
		if err := json.NewDecoder(res.Body).Decode(out); err != nil {
			r.t.Fatalf("%s %s: %v", method, path, err)
		}
	}
	return res.StatusCode
}

// newKey makes a key of plan through the API and returns its secret.
func (r *planRig) newKey(name, plan string) string {
	r.t.Helper()
	var v struct{ Secret string }
	if st := r.call("POST", "/keys", `{"name":"`+name+`","plan":"`+plan+`"}`, &v); st != http.StatusCreated || v.Secret == "" {
		r.t.Fatalf("POST /keys %s: %d", name, st)
	}
	return v.Secret
}

// send makes one request through the gateway with the API key and
// returns the answer (its body read and closed).
func (r *planRig) send(path, apiKey string) *http.Response {
	r.t.Helper()
	req, err := http.NewRequest("GET", r.gw+path, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	if apiKey != "" {
		req.Header.Set("X-Api-Key", apiKey)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	res.Body.Close()
	return res
}

// statuses sends n requests and returns their statuses.
func (r *planRig) statuses(n int, path, apiKey string) string {
	r.t.Helper()
	var out []string
	for range n {
		out = append(out, http.StatusText(r.send(path, apiKey).StatusCode))
	}
	return strings.Join(out, ", ")
}

// TestKeyWithOwnLimitSurvivesPlanReload: a reload that takes the quota
// (or the throttle) from a plan leaves every key of the plan working, the
// keys given their own quota (or rate) through the API among them: their
// own value has nothing left to replace. Before, those keys, and only
// they, were answered 403 from the reload on while GET /keys still
// listed them active: loosening a plan locked out its best customers.
func TestKeyWithOwnLimitSurvivesPlanReload(t *testing.T) {
	const before = `routes:
  - {name: api, match: {paths: ["/api/**"]}, api_key_required: true, upstream: none}
plans:
  - {name: basic, rate: 100, burst: 100, quota: {limit: 5, period: DAY}}
`
	r := newPlanRig(t, before, time.Date(2026, 6, 10, 9, 0, 0, 0, time.UTC))
	plain := r.newKey("plain", "basic")
	own := r.newKey("own", "basic")
	if st := r.call("PATCH", "/keys/own", `{"quota":50,"rate":200}`, nil); st != http.StatusOK {
		t.Fatalf("PATCH own: %d", st)
	}
	if got := r.statuses(1, "/api/x", own); got != "OK" {
		t.Fatalf("the key with its own quota, before the reload: %s", got)
	}
	for _, after := range []struct{ what, plan string }{
		{"the plan's quota removed", "{name: basic, rate: 100, burst: 100}"},
		{"the plan's throttle removed", "{name: basic, quota: {limit: 5, period: DAY}}"},
	} {
		r.reload("routes:\n  - {name: api, match: {paths: [\"/api/**\"]}, api_key_required: true, upstream: none}\nplans:\n  - " + after.plan + "\n")
		if got := r.statuses(1, "/api/x", plain); got != "OK" {
			t.Fatalf("%s: the key without limits of its own: %s", after.what, got)
		}
		if got := r.statuses(1, "/api/x", own); got != "OK" {
			var v KeyView
			r.call("GET", "/keys/own", "", &v)
			t.Errorf("%s: the key with its own quota and rate: %s, want OK (listed %q)", after.what, got, v.State)
		}
		var u map[string]any
		if st := r.call("GET", "/keys/own/usage", "", &u); st != http.StatusOK {
			t.Errorf("%s: GET /keys/own/usage: %d %v", after.what, st, u)
		}
		if st := r.call("POST", "/keys/own/rotate", `{"overlap":"1h"}`, nil); st != http.StatusOK {
			t.Errorf("%s: rotating the key: %d", after.what, st)
		}
	}
	if st := r.call("PATCH", "/keys/plain", `{"rate":300}`, nil); st != http.StatusBadRequest {
		t.Errorf("giving a key its own rate in a plan without a throttle: %d, want 400", st)
	}
}
