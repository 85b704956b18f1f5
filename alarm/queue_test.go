package alarm

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/internal/promtest"
)

// stuckDedup is a Deduper whose claims never answer until ctx ends, as
// a Redis that stopped answering: Run stays on one alarm.
type stuckDedup struct{ called chan struct{} }

func (d stuckDedup) Once(ctx context.Context, _ string, _ time.Time) (bool, error) {
	select {
	case d.called <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return false, ctx.Err()
}

// TestFullAlarmQueuesDrop: with the alarms' queue full (its worker stuck
// on a claim that never answers), a decision that crosses a threshold
// returns at once, and its alarm is dropped and counted in
// floodgate_quota_alarms_total{result="dropped"}; with a receiver that
// never answers and its own queue full, each further alarm for it is
// dropped and counted in floodgate_alarm_webhooks_total{result="dropped"},
// and another receiver's alarms are still delivered.
func TestFullAlarmQueuesDrop(t *testing.T) {
	t.Parallel()
	p := plansPolicy(t)

	t.Run("queue", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		dedup := stuckDedup{called: make(chan struct{}, 1)}
		a, err := New(Options{Dedup: dedup, QueueSize: 4, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.SetPolicy(p, map[string]Plan{"slow": {Thresholds: []int{100}}}); err != nil {
			t.Fatal(err)
		}
		runAlarms(t, a)
		usePlan(a, p, "slow", "key:first", 10)
		select {
		case <-dedup.called:
		case <-time.After(30 * time.Second):
			t.Fatal("the first alarm was not claimed")
		}
		// Run is stuck on the first alarm. Four more fill the queue; the
		// next 16 are dropped, and no decision waits for room: the claim
		// never answers, so a decision that waited would never return.
		done := make(chan time.Duration)
		go func() {
			start := time.Now()
			for i := range 20 {
				usePlan(a, p, "slow", fmt.Sprintf("key:k%d", i), 10)
			}
			done <- time.Since(start)
		}()
		select {
		case took := <-done:
			t.Logf("20 decisions crossing a threshold, 16 of them with the queue full: %v", took)
		case <-time.After(30 * time.Second):
			t.Fatal("decisions wait for room in the alarms' queue")
		}
		if got := promtest.Value(t, reg, "floodgate_quota_alarms_total", promtest.Labels{"plan": "slow", "threshold": "100", "result": "dropped"}); got != 16 {
			t.Errorf("dropped alarms: %v, want 16", got)
		}
	})

	t.Run("webhook", func(t *testing.T) {
		t.Parallel()
		hung := make(chan struct{}, 64)
		release := make(chan struct{})
		slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hung <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		defer slow.Close()
		defer close(release) // before slow.Close, which waits for its handlers
		fastGot := make(chan struct{}, 8)
		fast := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fastGot <- struct{}{}
		}))
		defer fast.Close()

		reg := prometheus.NewRegistry()
		a, err := New(Options{Dedup: NewLocalDedup(), Timeout: time.Minute, TargetQueueSize: 2, TargetConcurrency: 1, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.SetPolicy(p, map[string]Plan{
			"slow": {Thresholds: []int{100}, Webhook: slow.URL, Secret: []byte("s")},
			"fast": {Thresholds: []int{100}, Webhook: fast.URL, Secret: []byte("f")},
		}); err != nil {
			t.Fatal(err)
		}
		runAlarms(t, a)
		usePlan(a, p, "slow", "key:first", 10)
		select {
		case <-hung:
		case <-time.After(30 * time.Second):
			t.Fatal("the receiver got nothing")
		}
		// One alarm is in flight; two fill the receiver's queue, eight are
		// dropped without being claimed (they fire at their keys' next
		// requests once there is room: TestDroppedAlarmFiresLater).
		for i := range 10 {
			usePlan(a, p, "slow", fmt.Sprintf("key:k%d", i), 10)
		}
		waitFor(t, "the alarms to be handled", func() bool {
			return promtest.Value(t, reg, "floodgate_alarm_webhooks_total", promtest.Labels{"result": "dropped"}) == 8
		})
		if got := promtest.Value(t, reg, "floodgate_quota_alarms_total", promtest.Labels{"plan": "slow", "result": "fired"}); got != 3 {
			t.Errorf("alarms fired: %v, want 3 (the one in flight and the two queued)", got)
		}
		if got := promtest.Value(t, reg, "floodgate_quota_alarms_total", promtest.Labels{"result": "dropped"}); got != 0 {
			t.Errorf("alarms dropped from the main queue: %v, want 0", got)
		}
		usePlan(a, p, "fast", "key:f", 10)
		select {
		case <-fastGot:
		case <-time.After(30 * time.Second):
			t.Fatal("another receiver's alarm was not delivered while this one's queue was full")
		}
		if n := len(hung); n != 0 {
			t.Errorf("the hanging receiver got %d more requests, want none while the first hangs", n)
		}
	})
}
