package httpapi

import (
	"fmt"
	"net/http"
	"reflect"
	"testing"

	"github.com/floodgate/floodgate/limiter"
)

// TestSettleSentAgainAnswersAlike: a settle sent again with the same
// actual cost (its caller never got the first answer) is answered 200 as
// the first was, overrun included, and charges nothing more, on the
// embedded store and on Redis; a settle of that reservation at another
// cost, or a cancel, is still 404 unknown_reservation.
func TestSettleSentAgainAnswersAlike(t *testing.T) {
	t.Parallel()
	mem, _ := start(t)
	red, _ := onRedis(t, limiter.Options{})
	for _, c := range []struct {
		store, url, limit string
		capacity          int64
	}{{"memory", mem, "global", 100}, {"Redis", red, "tokens", 1000}} {
		est, actual := c.capacity*6/10, c.capacity*15/10
		_, m := post(t, c.url+"/v1/reserve", fmt.Sprintf(`{"limit":%q,"key":"again","cost":%d}`, c.limit, est))
		tok, _ := m["reservation"].(string)
		if tok == "" {
			t.Fatalf("%s: reserve: %v", c.store, m)
		}
		body := fmt.Sprintf(`{"reservation":%q,"actual":%d}`, tok, actual)
		resp, first := post(t, c.url+"/v1/settle", body)
		if resp.StatusCode != http.StatusOK || first["overrun"] != float64(actual-c.capacity) {
			t.Fatalf("%s: settle %d of %d: %d %v, want overrun %d", c.store, actual, est, resp.StatusCode, first, actual-c.capacity)
		}
		resp, again := post(t, c.url+"/v1/settle", body)
		if resp.StatusCode != http.StatusOK || !reflect.DeepEqual(again, first) {
			t.Errorf("%s: the same settle sent again: %d %v, want 200 %v", c.store, resp.StatusCode, again, first)
		}
		for _, other := range []string{fmt.Sprintf(`"actual":%d`, est), `"cancel":true`} {
			resp, m := post(t, c.url+"/v1/settle", fmt.Sprintf(`{"reservation":%q,%s}`, tok, other))
			if resp.StatusCode != http.StatusNotFound || m["code"] != CodeUnknownReservation {
				t.Errorf("%s: a settle with %s after the first: %d %v, want 404", c.store, other, resp.StatusCode, m)
			}
		}
		_, m = post(t, c.url+"/v1/peek", fmt.Sprintf(`{"limit":%q,"key":"again"}`, c.limit))
		if m["remaining"] != float64(0) || m["allowed"] != false {
			t.Errorf("%s: after the settles: %v, want the limit spent once, nothing left", c.store, m)
		}
	}
}
