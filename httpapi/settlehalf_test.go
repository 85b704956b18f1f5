package httpapi

import (
	"net/http"
	"testing"
)

// TestSettleOfAnUnknownHitChangesNothing: a settle answered 404
// unknown_reservation has given nothing back. A token that names, beside
// the hit it reserved, a hit it never reserved (or whose settle record
// the store no longer holds) is answered 404; the reserved hit must then
// still hold its estimate, not be settled behind the 404.
func TestSettleOfAnUnknownHitChangesNothing(t *testing.T) {
	t.Parallel()
	url, _ := start(t)
	free := func(key string) float64 {
		t.Helper()
		_, m := post(t, url+"/v1/peek", `{"limit":"login","key":"`+key+`"}`)
		return m["remaining"].(float64) + 1
	}
	_, raw := reserveToken(t, url, "v")
	if free("v") != 2 {
		t.Fatalf("after reserving 1 of 3: %v free", free("v"))
	}
	hit := `{"l":"login","k":"v","c":1`
	tok := forge(t, raw, hit, `{"l":"global","k":"v","c":1},`+hit)
	resp, m := post(t, url+"/v1/settle", `{"reservation":"`+tok+`","actual":0}`)
	if resp.StatusCode == http.StatusNotFound && free("v") != 2 {
		t.Fatalf("settle answered %d %v, yet login gave its unit back (%v free, want 2): half applied behind a 404",
			resp.StatusCode, m, free("v"))
	}
}
