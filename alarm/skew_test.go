package alarm

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/promtest"
	"github.com/floodgate/floodgate/internal/redisconn"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/limiter"
)

// TestAlarmPeriodAcrossClockSkew: two instances sharing a Redis, one's
// clock two seconds ahead of the store's and the other's two seconds
// behind, see the same key cross its threshold a minute before the day
// ends by the store's clock. They name the same period (the day that
// ends at midnight UTC) and the same alarm, so its webhook fires once.
func TestAlarmPeriodAcrossClockSkew(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, err := redisconn.Open("redis://" + srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := make(chan Event, 4)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var ev Event
		if err := json.Unmarshal(body, &ev); err != nil {
			t.Errorf("webhook body %q: %v", body, err)
		}
		got <- ev
	}))
	defer hook.Close()
	p := testPolicy(t)
	l, _ := p.Limit("small.quota")

	// The store's clock: a minute before midnight UTC; the daily quota's
	// decisions are a minute from their reset.
	midnight := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	store := midnight.Add(-time.Minute)
	var instances []*Alarms
	var regs []*prometheus.Registry
	for _, skew := range []time.Duration{2 * time.Second, -2 * time.Second} {
		reg := prometheus.NewRegistry()
		regs = append(regs, reg)
		a, err := New(Options{Dedup: NewRedisDedup(c), Registerer: reg, Now: func() time.Time { return store.Add(skew) }})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.SetPolicy(p, map[string]Plan{"small": {Thresholds: []int{80}, Webhook: hook.URL, Secret: []byte("s")}}); err != nil {
			t.Fatal(err)
		}
		runAlarms(t, a)
		instances = append(instances, a)
	}
	for i, a := range instances {
		req := &limiter.Request{Hits: []limiter.Hit{{Rule: l.Rule, Key: "key:acme", Cost: 1}}}
		res := &limiter.Result{Allowed: true, Decisions: []floodgate.Decision{{
			Allowed: true, Limit: 10, Remaining: 1 - int64(i), ResetAfter: midnight.Sub(store)}}}
		a.ObserveDecision(req, res)
	}
	count := func(result string) (n float64) {
		for _, reg := range regs {
			n += promtest.Value(t, reg, "floodgate_quota_alarms_total", promtest.Labels{"result": result})
		}
		return n
	}
	waitFor(t, "both instances to claim the alarm", func() bool { return count("fired")+count("duplicate") == 2 })
	if n := count("fired"); n != 1 {
		t.Errorf("the alarm fired %v times for one period; want once", n)
	}
	for range int(count("fired")) {
		select {
		case ev := <-got:
			if !ev.PeriodEnd.Equal(midnight) {
				t.Errorf("an alarm names the period ending %v; want %v", ev.PeriodEnd, midnight)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a fired alarm's webhook was not sent")
		}
	}
}
