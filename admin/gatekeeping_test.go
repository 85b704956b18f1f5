package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/floodgate/floodgate/penalty"
)

// manyBans is a penalty box holding n bans.
type manyBans int

func (n manyBans) List(context.Context) ([]penalty.Ban, error) {
	out := make([]penalty.Ban, n)
	for i := range out {
		out[i] = penalty.Ban{Rule: "flood", Key: fmt.Sprintf("ip:10.0.%d", i), Until: time.Now().Add(time.Minute)}
	}
	return out, nil
}

func (manyBans) Lift(context.Context, string, string) error { return penalty.ErrNoBan }

// TestListBansBounded: a flood from many addresses can earn 100,000 bans;
// GET /api/v1/bans lists 1,000 of them unless asked for more (10,000 at
// most), and says how many there are.
func TestListBansBounded(t *testing.T) {
	a := &API{o: Options{Bans: manyBans(25000), Now: time.Now}}
	list := func(query string) (int, int, error) {
		v, err := a.listBans(nil, httptest.NewRequest("GET", "/api/v1/bans"+query, nil), "")
		if err != nil {
			return 0, 0, err
		}
		m := v.(map[string]any)
		return len(m["bans"].([]banView)), m["total"].(int), nil
	}
	for query, want := range map[string]int{"": 1000, "?limit=3": 3, "?limit=10000": 10000} {
		n, total, err := list(query)
		if err != nil || n != want || total != 25000 {
			t.Errorf("GET /api/v1/bans%s: %d bans of %d (%v), want %d of 25000", query, n, total, err, want)
		}
	}
	for _, query := range []string{"?limit=0", "?limit=10001", "?limit=x"} {
		var he *httpError
		if _, _, err := list(query); !errors.As(err, &he) || he.status != http.StatusBadRequest {
			t.Errorf("GET /api/v1/bans%s: %v, want a 400", query, err)
		}
	}
}
