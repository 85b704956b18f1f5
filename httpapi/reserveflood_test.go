package httpapi

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// TestLongTTLFloodKeepsOthersReservations: one caller fills the embedded
// store's reservation table once with reservations it never settles,
// each asking for the longest ttl (a day), and stops. Other callers then
// reserve with the default ttl, one after another, and settle. The flood
// is older than every one of them, so it is what a full table drops: a
// reservation made after the flood keeps its record until a table's share
// of new reservations came after it, and settles at its actual cost; a
// concurrency slot reserved after it is given back by its settle.
func TestLongTTLFloodKeepsOthersReservations(t *testing.T) {
	t.Parallel()
	const table = 64
	st, err := memstore.New(memstore.Options{Now: func() int64 { return fixedNow }, SweepInterval: -1, Shards: 1, MaxReservations: table})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	eng := limiter.New(st, limiter.Options{})
	limits := Rules(
		ruletest.Rule(t, floodgate.Limit{Name: "tokens", Algorithm: floodgate.FixedWindow, Max: 1000, Window: time.Hour}),
		ruletest.Rule(t, floodgate.Limit{Name: "slot", Algorithm: floodgate.Concurrency, Max: 1, LeaseTTL: time.Minute}),
	)
	ts := httptest.NewServer(New(eng, limits, Options{}))
	t.Cleanup(ts.Close)

	// The flood: a table's worth of reservations on keys of its own, 32
	// hits a request, each held for a day and never settled.
	for n := 0; n < table; n += 32 {
		var hits []string
		for i := n; i < n+32; i++ {
			hits = append(hits, fmt.Sprintf(`{"limit":"tokens","key":"flood-%d","cost":1}`, i))
		}
		resp, m := post(t, ts.URL+"/v1/reserve", `{"hits":[`+strings.Join(hits, ",")+`],"ttl":86400}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("flood reserve: %d %v", resp.StatusCode, m)
		}
	}

	// Tenants reserve 400 tokens with the default ttl, one after another,
	// and settle each at 10 once the next one has reserved.
	reserve := func(body string) string {
		t.Helper()
		resp, m := post(t, ts.URL+"/v1/reserve", body)
		tok, _ := m["reservation"].(string)
		if resp.StatusCode != http.StatusOK || tok == "" {
			t.Fatalf("reserve %s: %d %v", body, resp.StatusCode, m)
		}
		return tok
	}
	prev := reserve(`{"limit":"tokens","key":"tenant-0","cost":400}`)
	lost := 0
	for i := 1; i <= 4; i++ {
		next := reserve(fmt.Sprintf(`{"limit":"tokens","key":"tenant-%d","cost":400}`, i))
		if resp, m := post(t, ts.URL+"/v1/settle", `{"reservation":"`+prev+`","actual":10}`); resp.StatusCode != http.StatusOK {
			lost++
			t.Errorf("tenant-%d's settle, one reservation after its own and long after the flood: %d %v, want 200 (it pays its estimate of 400 instead of 10)", i-1, resp.StatusCode, m)
		}
		prev = next
	}

	// A concurrency slot reserved after the flood, its settle lost: the
	// slot stays taken until its lease ends, and the tenant is refused.
	slot := reserve(`{"limit":"slot","key":"tenant-a"}`)
	reserve(`{"limit":"tokens","key":"tenant-b","cost":1}`)
	if resp, m := post(t, ts.URL+"/v1/settle", `{"reservation":"`+slot+`","cancel":true}`); resp.StatusCode != http.StatusOK {
		t.Errorf("settle of tenant-a's slot: %d %v, want 200", resp.StatusCode, m)
	}
	if resp, m := post(t, ts.URL+"/v1/reserve", `{"limit":"slot","key":"tenant-a"}`); resp.StatusCode != http.StatusOK {
		t.Errorf("tenant-a's next slot, its only one settled: %d %v, want 200", resp.StatusCode, m)
	}
}
