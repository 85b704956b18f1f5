package alarm

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestTargetConcurrencyBound: a receiver that holds every delivery open
// never has more than Options.TargetConcurrency of them under way at
// once, however many alarms wait for it, and every waiting alarm is
// delivered as places come free.
func TestTargetConcurrencyBound(t *testing.T) {
	t.Parallel()
	const limit, keys = 3, 6 // two thresholds a key: 12 alarms
	release := make(chan struct{}, 2*keys)
	stop := make(chan struct{})
	arrived := make(chan struct{}, 2*keys)
	var now, peak, delivered atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := now.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		arrived <- struct{}{}
		select {
		case <-release:
			delivered.Add(1)
		case <-stop:
		case <-r.Context().Done():
		}
		now.Add(-1)
	}))
	defer srv.Close()
	defer close(stop) // before srv.Close, which waits for its handlers
	p := plansPolicy(t)
	a, err := New(Options{Dedup: NewLocalDedup(), Timeout: time.Minute, TargetConcurrency: limit})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.SetPolicy(p, map[string]Plan{"slow": {Thresholds: []int{80, 100}, Webhook: srv.URL, Secret: []byte("s")}}); err != nil {
		t.Fatal(err)
	}
	runAlarms(t, a)
	for i := range keys {
		usePlan(a, p, "slow", fmt.Sprintf("key:k%d", i), 10)
	}
	// queued counts the alarms waiting in the receiver's queue.
	queued := func() int {
		a.tmu.Lock()
		defer a.tmu.Unlock()
		n := 0
		for _, tg := range a.targets {
			n += len(tg.queue)
		}
		return n
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s (under way %d, queued %d)", what, now.Load(), queued())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	got := 0
	take := func() {
		t.Helper()
		select {
		case <-arrived:
			got++
		case <-time.After(30 * time.Second):
			t.Fatalf("the receiver got %d deliveries, want %d", got, 2*keys)
		}
	}
	for range limit {
		take()
	}
	// Every other alarm waits for a place.
	wait("the other alarms queued", func() bool { return queued() == 2*keys-limit || now.Load() > limit })
	if n := peak.Load(); n != limit {
		t.Fatalf("%d deliveries under way at once, want %d", n, limit)
	}
	// One place at a time comes free; each goes to one waiting alarm.
	for got < 2*keys {
		release <- struct{}{}
		take()
		if n := peak.Load(); n > limit {
			t.Fatalf("%d deliveries under way at once, want at most %d", n, limit)
		}
	}
	for range limit {
		release <- struct{}{}
	}
	wait("every alarm delivered", func() bool { return delivered.Load() == 2*keys })
	if n := peak.Load(); n > limit {
		t.Fatalf("%d deliveries under way at once, want at most %d", n, limit)
	}
}
