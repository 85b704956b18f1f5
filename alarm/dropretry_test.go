package alarm

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/internal/promtest"
	"github.com/floodgate/floodgate/internal/redisconn"
	"github.com/floodgate/floodgate/internal/redistest"
)

// TestDroppedAlarmFiresLater: alarms dropped because their webhook's
// queue is full (a receiver slower than a burst of keys crossing their
// thresholds) are not lost for the rest of their quota period. Their
// claims are not kept, so another instance sharing the Redis fires one
// at the key's next request there; and once the queue has room, the
// key's next request after the retry pause queues it again on the
// instance that dropped it.
func TestDroppedAlarmFiresLater(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, err := redisconn.Open("redis://" + srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	release := make(chan struct{})
	asked := make(chan struct{}, 8)
	slowGot := make(chan Event, 8)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		asked <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		var ev Event
		if err := json.Unmarshal(body, &ev); err == nil {
			slowGot <- ev
		}
	}))
	defer slow.Close()
	fastGot := make(chan Event, 8)
	fast := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var ev Event
		if err := json.Unmarshal(body, &ev); err == nil {
			fastGot <- ev
		}
	}))
	defer fast.Close()
	p := testPolicy(t)

	var offset atomic.Int64 // the first instance's clock, moved by hand
	base := time.Now()
	reg := prometheus.NewRegistry()
	first, err := New(Options{Dedup: NewRedisDedup(c), Registerer: reg, TargetConcurrency: 1, TargetQueueSize: 1,
		Now: func() time.Time { return base.Add(time.Duration(offset.Load())) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.SetPolicy(p, map[string]Plan{"small": {Thresholds: []int{100}, Webhook: slow.URL, Secret: []byte("s")}}); err != nil {
		t.Fatal(err)
	}
	runAlarms(t, first)
	dropped := func() float64 {
		return promtest.Value(t, reg, "floodgate_alarm_webhooks_total", promtest.Labels{"result": "dropped"})
	}

	// a is being sent, b waits in the queue of 1, c and d find it full.
	use(first, p, "key:a", 10)
	select {
	case <-asked:
	case <-time.After(30 * time.Second):
		t.Fatal("a's alarm was not sent")
	}
	use(first, p, "key:b", 10)
	waitFor(t, "b's alarm to be queued", func() bool {
		first.tmu.Lock()
		defer first.tmu.Unlock()
		for _, tg := range first.targets {
			if len(tg.queue) == 1 {
				return true
			}
		}
		return false
	})
	use(first, p, "key:c", 10)
	waitFor(t, "c's alarm to be dropped", func() bool { return dropped() == 1 })
	use(first, p, "key:d", 10)
	waitFor(t, "d's alarm to be dropped", func() bool { return dropped() == 2 })

	// Another instance on the same Redis fires c at c's next request there.
	second, err := New(Options{Dedup: NewRedisDedup(c)})
	if err != nil {
		t.Fatal(err)
	}
	if err := second.SetPolicy(p, map[string]Plan{"small": {Thresholds: []int{100}, Webhook: fast.URL, Secret: []byte("s")}}); err != nil {
		t.Fatal(err)
	}
	runAlarms(t, second)
	use(second, p, "key:c", 10)
	select {
	case ev := <-fastGot:
		if ev.Key != "c" {
			t.Errorf("the other instance delivered %q; want c", ev.Key)
		}
	case <-time.After(10 * time.Second):
		t.Error("c's alarm, dropped by a full queue on one instance, was never fired by the other: its claim stood")
	}

	// The receiver catches up; d's next request on the first instance,
	// after the retry pause, queues d's alarm again.
	close(release)
	for range 2 {
		select {
		case <-slowGot:
		case <-time.After(30 * time.Second):
			t.Fatal("a and b were not delivered")
		}
	}
	use(first, p, "key:d", 10) // within the pause: still held back
	offset.Store(int64(dropRetry + time.Second))
	use(first, p, "key:d", 10)
	select {
	case ev := <-slowGot:
		if ev.Key != "d" {
			t.Errorf("delivered %q; want d", ev.Key)
		}
	case <-time.After(10 * time.Second):
		t.Error("d's alarm, dropped while the queue was full, never fired once the queue had room")
	}
	if n := dropped(); n != 2 {
		t.Errorf("%v alarms counted dropped; want 2 (one each for c and d)", n)
	}
}
