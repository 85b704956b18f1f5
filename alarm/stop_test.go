package alarm

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/internal/promtest"
	"github.com/floodgate/floodgate/internal/redisconn"
	"github.com/floodgate/floodgate/internal/redistest"
)

// TestStopGivesClaimsBack: an instance that stops (a rolling restart)
// with alarms claimed and not delivered, one being sent to a receiver
// that has not answered and one queued behind it, gives their claims back
// and counts them abandoned; another instance sharing the Redis then
// fires and delivers both. The claims stood until the quota period ended,
// so no instance fired those alarms again.
func TestStopGivesClaimsBack(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, err := redisconn.Open("redis://" + srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hanging := make(chan struct{})
	asked := make(chan struct{}, 4)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked <- struct{}{}
		select {
		case <-hanging:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(hanging)
	got := make(chan Event, 4)
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var ev Event
		if err := json.Unmarshal(body, &ev); err != nil {
			t.Errorf("webhook body %q: %v", body, err)
		}
		got <- ev
	}))
	defer good.Close()
	p := testPolicy(t)

	reg := prometheus.NewRegistry()
	first, err := New(Options{Dedup: NewRedisDedup(c), Registerer: reg, TargetConcurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.SetPolicy(p, map[string]Plan{"small": {Thresholds: []int{100}, Webhook: slow.URL, Secret: []byte("s")}}); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { first.Run(ctx); close(done) }()
	use(first, p, "key:a", 10)
	select {
	case <-asked: // a's alarm is being sent
	case <-time.After(30 * time.Second):
		t.Fatal("the first instance sent nothing")
	}
	use(first, p, "key:b", 10)
	waitFor(t, "b's alarm to be claimed and queued", func() bool {
		first.tmu.Lock()
		defer first.tmu.Unlock()
		for _, tg := range first.targets {
			if len(tg.queue) == 1 {
				return true
			}
		}
		return false
	})
	stop()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if n := promtest.Value(t, reg, "floodgate_alarm_webhooks_total", promtest.Labels{"result": "abandoned"}); n != 2 {
		t.Errorf("%v alarms counted abandoned; want 2", n)
	}

	second, err := New(Options{Dedup: NewRedisDedup(c)})
	if err != nil {
		t.Fatal(err)
	}
	if err := second.SetPolicy(p, map[string]Plan{"small": {Thresholds: []int{100}, Webhook: good.URL, Secret: []byte("s")}}); err != nil {
		t.Fatal(err)
	}
	runAlarms(t, second)
	use(second, p, "key:a", 10)
	use(second, p, "key:b", 10)
	keys := map[string]bool{}
	for len(keys) < 2 {
		select {
		case ev := <-got:
			keys[ev.Key] = true
		case <-time.After(30 * time.Second):
			t.Fatalf("the other instance delivered %v of the alarms the stopped one left; want a and b", keys)
		}
	}
}
