package httpapi

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// TestReserveSettle reserves an estimate, settles below it (the rest comes
// back), refuses a second settle, and settles above an estimate (the
// excess is charged as far as the limit allows, the rest reported).
func TestReserveSettle(t *testing.T) {
	url, _ := start(t)
	resp, m := post(t, url+"/v1/reserve", `{"hits":[{"limit":"global","key":"k","cost":60},{"limit":"login","key":"k"}],"ttl":30}`)
	tok, _ := m["reservation"].(string)
	if resp.StatusCode != 200 || m["allowed"] != true || tok == "" {
		t.Fatalf("reserve: %d %v", resp.StatusCode, m)
	}
	if resp.Header.Get("RateLimit") == "" {
		t.Error("no RateLimit field on a reservation")
	}
	// 40 of global left: a second estimate of 50 does not fit.
	if resp, m := post(t, url+"/v1/reserve", `{"limit":"global","key":"k","cost":50}`); resp.StatusCode != 429 || m["reservation"] != nil {
		t.Fatalf("second reserve: %d %v", resp.StatusCode, m)
	}
	resp, m = post(t, url+"/v1/settle", `{"reservation":"`+tok+`","actual":{"global":15}}`)
	if resp.StatusCode != 200 || m["settled"] != true || m["overrun"] != float64(0) {
		t.Fatalf("settle: %d %v", resp.StatusCode, m)
	}
	ds := m["decisions"].([]any)
	if g := ds[0].(map[string]any); g["limit"] != "global" || g["remaining"] != float64(85) {
		t.Errorf("global after settling 15 of 60: %v", g)
	}
	if l := ds[1].(map[string]any); l["remaining"] != float64(2) {
		t.Errorf("login, not named, keeps its estimate: %v", l)
	}
	if resp, m := post(t, url+"/v1/settle", `{"reservation":"`+tok+`","cancel":true}`); resp.StatusCode != 404 || m["code"] != CodeUnknownReservation {
		t.Fatalf("second settle: %d %v", resp.StatusCode, m)
	}
	_, m = post(t, url+"/v1/reserve", `{"limit":"global","key":"k","cost":10}`)
	resp, m = post(t, url+"/v1/settle", `{"reservation":"`+m["reservation"].(string)+`","actual":200}`)
	if resp.StatusCode != 200 || m["overrun"] != float64(200-10-75) {
		t.Fatalf("settle 200 of 10: %d %v, want overrun 115 (75 left after the estimate)", resp.StatusCode, m)
	}
}

// TestReserveConcurrency holds a concurrency slot from reserve to settle,
// which /v1/check cannot.
func TestReserveConcurrency(t *testing.T) {
	url, _ := start(t)
	var toks []string
	for i := 0; i < 2; i++ {
		resp, m := post(t, url+"/v1/reserve", `{"limit":"conc","key":"k"}`)
		if resp.StatusCode != 200 {
			t.Fatalf("slot %d: %d %v", i, resp.StatusCode, m)
		}
		toks = append(toks, m["reservation"].(string))
	}
	if resp, _ := post(t, url+"/v1/reserve", `{"limit":"conc","key":"k"}`); resp.StatusCode != 429 {
		t.Fatalf("third slot of 2: %d", resp.StatusCode)
	}
	post(t, url+"/v1/settle", `{"reservation":"`+toks[0]+`","cancel":true}`)
	if resp, _ := post(t, url+"/v1/reserve", `{"limit":"conc","key":"k"}`); resp.StatusCode != 200 {
		t.Fatalf("after a settle: %d", resp.StatusCode)
	}
}

// TestReserveErrors: bad requests are clear 4xx answers and change nothing.
func TestReserveErrors(t *testing.T) {
	url, eng := start(t)
	_, m := post(t, url+"/v1/reserve", `{"limit":"login","key":"k"}`)
	tok := m["reservation"].(string)
	for _, c := range []struct {
		path, body string
		status     int
		code       string
	}{
		{"/v1/reserve", `{"limit":"login","ttl":0}`, 400, CodeBadRequest},
		{"/v1/reserve", `{"limit":"login","ttl":"1m"}`, 400, CodeBadJSON},
		{"/v1/reserve", `{"limit":"login","cost":1.5}`, 400, CodeInvalidCost},
		{"/v1/reserve", `{"limit":"nope"}`, 404, CodeUnknownLimit},
		{"/v1/reserve", `{"limit":"login","cost":4}`, 422, CodeNeverFits},
		{"/v1/settle", `{"reservation":"` + tok + `"}`, 400, CodeBadRequest},
		{"/v1/settle", `{"reservation":"` + tok + `","actual":-1}`, 400, CodeInvalidCost},
		{"/v1/settle", `{"reservation":"` + tok + `","actual":{"other":1}}`, 400, CodeBadRequest},
		{"/v1/settle", `{"reservation":"` + tok + `","actual":1,"cancel":true}`, 400, CodeBadRequest},
		{"/v1/settle", `{"reservation":"not a token","actual":1}`, 400, CodeBadRequest},
		{"/v1/settle", `{"reservation":"` + strings.Repeat("A", 40) + `","actual":1}`, 400, CodeBadRequest},
	} {
		resp, m := post(t, url+c.path, c.body)
		if resp.StatusCode != c.status || m["code"] != c.code {
			t.Errorf("%s %s: %d %v, want %d %s", c.path, c.body, resp.StatusCode, m, c.status, c.code)
		}
	}
	if n := eng.checks.Load(); n != 1 {
		t.Errorf("%d decisions reached the engine, want the first reservation's only", n)
	}
	if resp, m := post(t, url+"/v1/settle", `{"reservation":"`+tok+`","actual":0}`); resp.StatusCode != http.StatusOK {
		t.Errorf("the reservation after the errors: %d %v", resp.StatusCode, m)
	}
}

// TestSettleRepeatedHit: a reservation that names one limit and key twice
// settles as a whole, and so does a token that repeats a hit reserved once
// (the hits name one settle record in the store): the answer is never a
// 404 after units were given back.
func TestSettleRepeatedHit(t *testing.T) {
	t.Parallel()
	url, _ := start(t)
	free := func(key string) float64 {
		t.Helper()
		_, m := post(t, url+"/v1/peek", `{"limit":"login","key":"`+key+`"}`)
		return m["remaining"].(float64) + 1
	}
	_, m := post(t, url+"/v1/reserve", `{"hits":[{"limit":"login","key":"k"},{"limit":"login","key":"k"}]}`)
	tok, _ := m["reservation"].(string)
	if tok == "" || free("k") != 1 {
		t.Fatalf("reserve twice: %v, %v free", m, free("k"))
	}
	if resp, m := post(t, url+"/v1/settle", `{"reservation":"`+tok+`","actual":1}`); resp.StatusCode != http.StatusOK || free("k") != 1 {
		t.Fatalf("settle at the estimates: %d %v, %v free; want 200 and 1 free", resp.StatusCode, m, free("k"))
	}
	if resp, _ := post(t, url+"/v1/settle", `{"reservation":"`+tok+`","actual":0}`); resp.StatusCode != http.StatusNotFound || free("k") != 1 {
		t.Fatalf("a second settle: %d, %v free; want 404 and nothing given back", resp.StatusCode, free("k"))
	}
	// A token repeating the hit of a reservation made once.
	_, m = post(t, url+"/v1/reserve", `{"limit":"login","key":"j","cost":2}`)
	raw, err := base64.RawURLEncoding.DecodeString(m["reservation"].(string))
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(string(raw), `{"l":"login","k":"j","c":2`)
	end := strings.Index(string(raw[max(start, 0):]), "}")
	if start < 0 || end < 0 {
		t.Fatalf("token %s has no hit to repeat", raw)
	}
	hit := string(raw[start : start+end+1])
	forged := strings.Replace(string(raw), hit, hit+","+hit, 1)
	if forged == string(raw) {
		t.Fatalf("token %s has no hit to repeat", raw)
	}
	tok = base64.RawURLEncoding.EncodeToString([]byte(forged))
	resp, m := post(t, url+"/v1/settle", `{"reservation":"`+tok+`","actual":0}`)
	if resp.StatusCode != http.StatusOK || free("j") != 3 {
		t.Fatalf("settle of a repeated hit: %d %v, %v free; want 200 and the reservation given back", resp.StatusCode, m, free("j"))
	}
}

// TestSettleOverrunNeverWraps: a settle far above its estimates on two
// limits reports an overrun of at least each hit's, never a total that
// wrapped around below zero.
func TestSettleOverrunNeverWraps(t *testing.T) {
	t.Parallel()
	url, _ := start(t)
	_, m := post(t, url+"/v1/reserve", `{"hits":[{"limit":"global","key":"w"},{"limit":"bucket","key":"w"}]}`)
	tok, _ := m["reservation"].(string)
	if tok == "" {
		t.Fatalf("reserve: %v", m)
	}
	resp, err := http.Post(url+"/v1/settle", "application/json",
		strings.NewReader(`{"reservation":"`+tok+`","actual":9223372036854775807}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out SettleResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || len(out.Decisions) != 2 {
		t.Fatalf("settle: %d %+v", resp.StatusCode, out)
	}
	for _, d := range out.Decisions {
		if d.Overrun <= 0 || out.Overrun < d.Overrun {
			t.Errorf("overrun %d in all, %d on %q: want a total of at least each hit's, above 0", out.Overrun, d.Overrun, d.Limit)
		}
	}
	if out.Overrun != math.MaxInt64 {
		t.Errorf("overrun %d in all, want it held at %d", out.Overrun, int64(math.MaxInt64))
	}
}

// TestReservedSlotHeldUntilSettle: a reservation of a concurrency limit
// holds its slot for as long as it can be settled. A ttl longer than the
// limit's lease_ttl (which frees the slot) is refused, and a reservation
// without one lives no longer than the lease: once the slot has gone to
// another caller, the first reservation is no longer held, and its
// settle is 404, never a second holder of a limit of one.
func TestReservedSlotHeldUntilSettle(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(fixedNow)
	st, err := memstore.New(memstore.Options{Now: now.Load, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	eng := &countingEngine{Engine: limiter.New(st, limiter.Options{})}
	limits := Rules(ruletest.Rule(t, floodgate.Limit{Name: "slot", Algorithm: floodgate.Concurrency, Max: 1, LeaseTTL: 10 * time.Second}))
	ts := httptest.NewServer(New(eng, limits, Options{}))
	t.Cleanup(ts.Close)

	resp, m := post(t, ts.URL+"/v1/reserve", `{"limit":"slot","key":"a","ttl":300}`)
	if resp.StatusCode != http.StatusBadRequest || m["code"] != CodeBadRequest || !strings.Contains(fmt.Sprint(m["error"]), "lease") {
		t.Errorf("ttl 300 against a lease of 10 s: %d %v, want 400 bad_request naming the lease", resp.StatusCode, m)
	}
	if n := eng.checks.Load(); n != 0 {
		t.Errorf("a refused ttl reached the engine %d times", n)
	}
	if resp, m := post(t, ts.URL+"/v1/reserve", `{"limit":"slot","key":"b","ttl":10}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("ttl at the lease: %d %v", resp.StatusCode, m)
	} else {
		post(t, ts.URL+"/v1/settle", `{"reservation":"`+m["reservation"].(string)+`","cancel":true}`)
	}

	_, m = post(t, ts.URL+"/v1/reserve", `{"limit":"slot","key":"k"}`)
	first, _ := m["reservation"].(string)
	if first == "" {
		t.Fatalf("first reservation: %v", m)
	}
	now.Add(int64(30 * time.Second)) // past the lease, within the default ttl
	resp, m = post(t, ts.URL+"/v1/reserve", `{"limit":"slot","key":"k"}`)
	second, _ := m["reservation"].(string)
	if resp.StatusCode != http.StatusOK || second == "" {
		t.Fatalf("second reservation once the lease expired: %d %v", resp.StatusCode, m)
	}
	if resp, m := post(t, ts.URL+"/v1/settle", `{"reservation":"`+first+`","actual":1}`); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the first reservation, its slot given to the second: %d %v, want 404 (two held a limit of 1)", resp.StatusCode, m)
	}
	if resp, m := post(t, ts.URL+"/v1/settle", `{"reservation":"`+second+`","actual":1}`); resp.StatusCode != http.StatusOK {
		t.Errorf("the second reservation: %d %v", resp.StatusCode, m)
	}
}
