package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memstore"
)

// fixedNow is ten seconds into a minute, far from every window's end.
var fixedNow = time.Date(2026, 11, 30, 12, 0, 10, 0, time.UTC).UnixNano()

// countingEngine counts the engine calls that reach the store.
type countingEngine struct {
	limiter.Engine
	checks, peeks atomic.Int64
}

func (c *countingEngine) Decide(ctx context.Context, req *limiter.Request, res *limiter.Result) error {
	if req.Peek {
		c.peeks.Add(1)
	} else {
		c.checks.Add(1)
	}
	return c.Engine.Decide(ctx, req, res)
}

func testRules(t testing.TB) Limits {
	return Rules(
		ruletest.Rule(t, floodgate.Limit{Name: "login", Algorithm: floodgate.FixedWindow, Max: 3, Window: time.Minute}),
		ruletest.Rule(t, floodgate.Limit{Name: "global", Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Minute}),
		ruletest.Rule(t, floodgate.Limit{Name: "bucket", Algorithm: floodgate.TokenBucket, Rate: 1, Per: time.Second, Burst: 5}),
		ruletest.Shadow(t, floodgate.Limit{Name: "shadow", Algorithm: floodgate.FixedWindow, Max: 1, Window: time.Minute}),
		ruletest.Rule(t, floodgate.Limit{Name: "conc", Algorithm: floodgate.Concurrency, Max: 2}),
	)
}

func newEngine(t testing.TB) *countingEngine {
	st, err := memstore.New(memstore.Options{Now: func() int64 { return fixedNow }, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &countingEngine{Engine: limiter.New(st, limiter.Options{})}
}

// start serves the API on a real loopback listener.
func start(t *testing.T) (string, *countingEngine) {
	t.Helper()
	eng := newEngine(t)
	ts := httptest.NewServer(New(eng, testRules(t), Options{MaxBodyBytes: 1024}))
	t.Cleanup(ts.Close)
	return ts.URL, eng
}

func post(t *testing.T, url, body string) (*http.Response, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("answer is not JSON: %q", raw)
	}
	return resp, m
}

func TestCheckSingleHitThen429(t *testing.T) {
	t.Parallel()
	url, _ := start(t)
	for i := 1; i <= 3; i++ {
		resp, m := post(t, url+"/v1/check", `{"limit":"login","key":"1.2.3.4","cost":1}`)
		if resp.StatusCode != 200 || m["allowed"] != true || m["remaining"] != float64(3-i) {
			t.Fatalf("request %d: %d %v", i, resp.StatusCode, m)
		}
		if m["binding_limit"] != "login" || m["limit"] != float64(3) || m["reset"] != float64(50) {
			t.Errorf("request %d: %v", i, m)
		}
		if got := resp.Header.Get("RateLimit"); got != `"login";r=`+string(rune('0'+3-i))+`;t=50` {
			t.Errorf("RateLimit %q", got)
		}
	}
	resp, m := post(t, url+"/v1/check", `{"limit":"login","key":"1.2.3.4"}`)
	if resp.StatusCode != http.StatusTooManyRequests || m["allowed"] != false || m["retry_after"] != float64(50) {
		t.Fatalf("4th: %d %v", resp.StatusCode, m)
	}
	if resp.Header.Get("Retry-After") != "50" || resp.Header.Get("RateLimit-Policy") != `"login";q=3;w=60` {
		t.Errorf("headers %v", resp.Header)
	}
	// Another key counts on its own.
	if resp, _ := post(t, url+"/v1/check", `{"limit":"login","key":"5.6.7.8"}`); resp.StatusCode != 200 {
		t.Fatalf("other key: %d", resp.StatusCode)
	}
}

func TestBatchIsAllOrNothing(t *testing.T) {
	t.Parallel()
	url, _ := start(t)
	for range 3 {
		post(t, url+"/v1/check", `{"limit":"login","key":"k"}`)
	}
	resp, m := post(t, url+"/v1/check", `{"hits":[{"limit":"login","key":"k"},{"limit":"global","key":"g"}]}`)
	if resp.StatusCode != 429 || m["binding_limit"] != "login" {
		t.Fatalf("batch: %d %v", resp.StatusCode, m)
	}
	ds := m["decisions"].([]any)
	if len(ds) != 2 || ds[0].(map[string]any)["allowed"] != false || ds[1].(map[string]any)["allowed"] != true {
		t.Fatalf("decisions %v", ds)
	}
	// The global limit was not charged by the denied batch.
	_, m = post(t, url+"/v1/peek", `{"limit":"global","key":"g"}`)
	// A peek answers what a check would: 99 left after this one.
	if m["remaining"] != float64(99) {
		t.Fatalf("global after a denied batch: %v, want 99 remaining after a cost of 1 (nothing used)", m)
	}
}

func TestPeekChargesNothing(t *testing.T) {
	t.Parallel()
	url, eng := start(t)
	for range 5 {
		resp, m := post(t, url+"/v1/peek", `{"limit":"login","key":"p"}`)
		if resp.StatusCode != 200 || m["remaining"] != float64(2) {
			t.Fatalf("peek: %d %v, want what a check would leave (2)", resp.StatusCode, m)
		}
	}
	if eng.checks.Load() != 0 {
		t.Fatal("peek charged")
	}
}

func TestShadowLimitNeverDenies(t *testing.T) {
	t.Parallel()
	url, _ := start(t)
	for i := range 3 {
		resp, m := post(t, url+"/v1/check", `{"limit":"shadow","key":"s"}`)
		if resp.StatusCode != 200 || m["allowed"] != true {
			t.Fatalf("shadow %d: %d %v", i, resp.StatusCode, m)
		}
		if resp.Header.Get("RateLimit") != "" {
			t.Errorf("a shadow limit added fields")
		}
	}
}

func TestErrorsAreClearAndChangeNothing(t *testing.T) {
	t.Parallel()
	url, eng := start(t)
	cases := []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"bad json", "POST", "/v1/check", `{"limit":`, 400, CodeBadJSON},
		{"not an object", "POST", "/v1/check", `[1,2]`, 400, CodeBadJSON},
		{"unknown field", "POST", "/v1/check", `{"limit":"login","key":"k","cots":1}`, 400, CodeBadJSON},
		{"unknown field in hits", "POST", "/v1/check", `{"hits":[{"limit":"login","weight":2}]}`, 400, CodeBadJSON},
		{"trailing data", "POST", "/v1/check", `{"limit":"login"} {"limit":"login"}`, 400, CodeBadJSON},
		{"both forms", "POST", "/v1/check", `{"limit":"login","hits":[{"limit":"login"}]}`, 400, CodeBadRequest},
		{"empty", "POST", "/v1/check", `{}`, 400, CodeBadRequest},
		{"empty hits", "POST", "/v1/check", `{"hits":[]}`, 400, CodeBadRequest},
		{"no limit", "POST", "/v1/check", `{"key":"k"}`, 400, CodeBadRequest},
		{"cost zero", "POST", "/v1/check", `{"limit":"login","key":"k","cost":0}`, 400, CodeInvalidCost},
		{"cost negative", "POST", "/v1/check", `{"limit":"login","key":"k","cost":-2}`, 400, CodeInvalidCost},
		{"cost fraction", "POST", "/v1/check", `{"limit":"login","key":"k","cost":1.5}`, 400, CodeInvalidCost},
		{"cost huge", "POST", "/v1/check", `{"limit":"login","key":"k","cost":1e30}`, 400, CodeInvalidCost},
		{"unknown limit", "POST", "/v1/check", `{"limit":"nope","key":"k"}`, 404, CodeUnknownLimit},
		{"unknown limit in batch", "POST", "/v1/check", `{"hits":[{"limit":"login","key":"k"},{"limit":"nope"}]}`, 404, CodeUnknownLimit},
		{"never fits", "POST", "/v1/check", `{"limit":"login","key":"k","cost":4}`, 422, CodeNeverFits},
		{"concurrency", "POST", "/v1/check", `{"limit":"conc","key":"k"}`, 422, CodeUnsupportedLimit},
		{"too large", "POST", "/v1/check", `{"limit":"login","key":"` + strings.Repeat("x", 2000) + `"}`, 413, CodeTooLarge},
		{"wrong method", "GET", "/v1/check", ``, 405, CodeMethod},
		{"wrong path", "POST", "/v2/check", `{"limit":"login"}`, 404, CodeNotFound},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, url+c.path, strings.NewReader(c.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if resp.StatusCode != c.status || m["code"] != c.code || m["error"] == "" {
			t.Errorf("%s: %d %v, want %d %s", c.name, resp.StatusCode, m, c.status, c.code)
		}
	}
	if n := eng.checks.Load() + eng.peeks.Load(); n != 0 {
		t.Fatalf("invalid requests reached the engine %d times", n)
	}
	_, m := post(t, url+"/v1/peek", `{"limit":"login","key":"k"}`)
	if m["remaining"] != float64(2) {
		t.Fatalf("login/k after invalid requests: %v, want nothing used", m)
	}
}

func TestPolicyLimitsNil(t *testing.T) {
	t.Parallel()
	l := PolicyLimits(nilPolicy)
	if _, ok := l.Limit("x"); ok {
		t.Fatal("a nil policy found a limit")
	}
}

func nilPolicy() *policy.Policy { return nil }

// TestDecisionNamesTheKeySent: a decision names the key the client sent,
// also one long enough that the engine counts it by its hash (it named
// the hash, which the client never sent).
func TestDecisionNamesTheKeySent(t *testing.T) {
	t.Parallel()
	url, _ := start(t)
	key := strings.Repeat("k", 400)
	resp, m := post(t, url+"/v1/check", `{"limit":"login","key":"`+key+`"}`)
	ds, _ := m["decisions"].([]any)
	if resp.StatusCode != 200 || len(ds) != 1 {
		t.Fatalf("%d %v", resp.StatusCode, m)
	}
	if got := ds[0].(map[string]any)["key"]; got != key {
		t.Errorf("the decision names key %.80q, want the one sent", got)
	}
}
