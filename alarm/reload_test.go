package alarm

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestReloadMovesPendingAlarms: a receiver that keeps failing holds its
// plan's alarms (one retried, the others queued behind it); a reload that
// gives the plan another webhook and secret sends every one of them
// there, signed with the new secret, and the old receiver is not asked
// again once they have arrived.
func TestReloadMovesPendingAlarms(t *testing.T) {
	t.Parallel()
	var oldCalls atomic.Int32
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		oldCalls.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer failing.Close()
	got := make(chan Event, 16)
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !Verify([]byte("new"), r.Header.Get("X-Floodgate-Timestamp"), body, r.Header.Get("X-Floodgate-Signature")) {
			w.WriteHeader(http.StatusUnauthorized)
			t.Errorf("a body not signed with the new secret: %s", body)
			return
		}
		var ev Event
		if err := json.Unmarshal(body, &ev); err != nil {
			t.Errorf("webhook body %q: %v", body, err)
		}
		got <- ev
	}))
	defer good.Close()
	p := testPolicy(t)
	a, err := New(Options{Dedup: NewLocalDedup(), TargetConcurrency: 1, MaxAttempts: 1 << 20, Backoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.SetPolicy(p, map[string]Plan{"small": {Thresholds: []int{100}, Webhook: failing.URL, Secret: []byte("old")}}); err != nil {
		t.Fatal(err)
	}
	runAlarms(t, a)
	for i := range 3 {
		use(a, p, fmt.Sprintf("key:k%d", i), 10)
	}
	waitFor(t, "the failing receiver to be retried", func() bool { return oldCalls.Load() >= 3 })
	if err := a.SetPolicy(p, map[string]Plan{"small": {Thresholds: []int{100}, Webhook: good.URL, Secret: []byte("new")}}); err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for range 3 {
		select {
		case ev := <-got:
			keys[ev.Key] = true
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of the 3 pending alarms reached the new webhook", len(keys))
		}
	}
	if len(keys) != 3 {
		t.Errorf("the new webhook got %v, want k0, k1 and k2 once each", keys)
	}
	// Every delivery has left the old receiver: it is asked no more.
	before := oldCalls.Load()
	use(a, p, "key:last", 10)
	select {
	case ev := <-got:
		if ev.Key != "last" {
			t.Errorf("alarm %+v, want key last's", ev)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a new alarm did not reach the new webhook")
	}
	if n := oldCalls.Load(); n != before {
		t.Errorf("the old receiver was asked %d more times after the alarms moved", n-before)
	}
}
