package alarm

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/internal/promtest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
)

// plansPolicy has the plans slow and fast, each with a quota of 10 a day.
func plansPolicy(t *testing.T) *policy.Policy {
	t.Helper()
	f, err := config.Parse("p.yaml", []byte(`
routes: [{name: r, match: {paths: ["/**"]}, upstream: none}]
plans:
  - {name: slow, quota: {limit: 10, period: DAY}}
  - {name: fast, quota: {limit: 10, period: DAY}}
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Compile(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// usePlan tells a that the key has used `used` of plan's quota of 10.
func usePlan(a *Alarms, p *policy.Policy, plan, counter string, used int64) {
	l, _ := p.Limit(plan + ".quota")
	req := &limiter.Request{Hits: []limiter.Hit{{Rule: l.Rule, Key: counter, Cost: 1}}}
	res := &limiter.Result{Allowed: true, Decisions: []floodgate.Decision{{Allowed: true, Limit: 10, Remaining: 10 - used, ResetAfter: untilDayEnds()}}}
	a.ObserveDecision(req, res)
}

// runAlarms runs a until the test ends.
func runAlarms(t *testing.T, a *Alarms) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestHangingReceiverDelaysOnlyItsOwnAlarms: a receiver that never
// answers holds as many of its own alarms as it is given; another plan's
// alarm is delivered meanwhile, while every request to the hanging one is
// still open.
func TestHangingReceiverDelaysOnlyItsOwnAlarms(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	hung := make(chan struct{}, 64)
	var slowAnswered atomic.Int32
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hung <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		slowAnswered.Add(1)
	}))
	defer slow.Close()
	defer close(release) // before slow.Close, which waits for its handlers
	fastGot := make(chan Event, 8)
	fast := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev Event
		body, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(body, &ev)
		fastGot <- ev
	}))
	defer fast.Close()

	p := plansPolicy(t)
	// Each attempt may take a minute: the hanging receiver's requests stay
	// open for the whole test.
	a, err := New(Options{Dedup: NewLocalDedup(), Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.SetPolicy(p, map[string]Plan{
		"slow": {Thresholds: []int{80, 100}, Webhook: slow.URL, Secret: []byte("s")},
		"fast": {Thresholds: []int{100}, Webhook: fast.URL, Secret: []byte("f")},
	}); err != nil {
		t.Fatal(err)
	}
	runAlarms(t, a)
	// Eight alarms for the hanging receiver: more than it is given at once.
	for i := range 4 {
		usePlan(a, p, "slow", fmt.Sprintf("key:s%d", i), 10)
	}
	for i := range 4 {
		select {
		case <-hung:
		case <-time.After(30 * time.Second):
			t.Fatalf("the hanging receiver got %d requests, want 4", i)
		}
	}
	usePlan(a, p, "fast", "key:f", 10)
	select {
	case ev := <-fastGot:
		if ev.Plan != "fast" || ev.Key != "f" {
			t.Errorf("event %+v", ev)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the other plan's alarm was not delivered while the receiver hung")
	}
	if n := slowAnswered.Load(); n != 0 {
		t.Fatalf("%d requests to the hanging receiver ended before the other plan's alarm arrived", n)
	}
}

// waitFor polls cond until it holds, failing the test after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRedirectsNotFollowed: a receiver that answers a redirect to another
// server gets the alarm once; the other server sees nothing, and the
// webhook counts as failed, not retried.
func TestRedirectsNotFollowed(t *testing.T) {
	t.Parallel()
	for _, code := range []int{http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			t.Parallel()
			var elsewhere atomic.Int32
			other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				elsewhere.Add(1)
			}))
			defer other.Close()
			var calls atomic.Int32
			hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				http.Redirect(w, r, other.URL+"/collect", code)
			}))
			defer hook.Close()
			reg := prometheus.NewRegistry()
			a, err := New(Options{Dedup: NewLocalDedup(), Registerer: reg, Backoff: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			p := testPolicy(t)
			a.SetPolicy(p, map[string]Plan{"small": {Thresholds: []int{100}, Webhook: hook.URL, Secret: []byte("s")}})
			runAlarms(t, a)
			use(a, p, "key:k", 10)
			result := func(r string) float64 {
				return promtest.Value(t, reg, "floodgate_alarm_webhooks_total", promtest.Labels{"result": r})
			}
			waitFor(t, "the webhook's outcome", func() bool { return result("delivered")+result("failed") == 1 })
			if calls.Load() != 1 || elsewhere.Load() != 0 || result("failed") != 1 {
				t.Errorf("%d calls to the receiver, %d to where it redirects, %v failed; want 1, 0 and 1",
					calls.Load(), elsewhere.Load(), result("failed"))
			}
		})
	}
}
