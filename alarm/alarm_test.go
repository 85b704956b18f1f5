package alarm

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
)

func testPolicy(t *testing.T) *policy.Policy {
	t.Helper()
	f, err := config.Parse("p.yaml", []byte(`
routes: [{name: r, match: {paths: ["/**"]}, upstream: none}]
plans: [{name: small, quota: {limit: 10, period: DAY}}]
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

// untilDayEnds is what a store answers as a daily quota's reset: the time
// until the next UTC midnight, where its period ends. (A fixed hour would
// put the boundary nearest the reset at the midnight just past whenever it
// is before 11:00 UTC, and every decision then in a period of its own.)
func untilDayEnds() time.Duration {
	now := time.Now().UTC()
	return time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC).Sub(now)
}

// use tells a that the key has used `used` of the plan's quota of 10.
func use(a *Alarms, p *policy.Policy, counter string, used int64) {
	l, _ := p.Limit("small.quota")
	req := &limiter.Request{Hits: []limiter.Hit{{Rule: l.Rule, Key: counter, Cost: 1}}}
	res := &limiter.Result{Allowed: true, Decisions: []floodgate.Decision{{Allowed: true, Limit: 10, Remaining: 10 - used, ResetAfter: untilDayEnds()}}}
	a.ObserveDecision(req, res)
}

// TestWebhookRetried: a webhook that fails twice is retried with backoff
// and delivered once, signed; each threshold fires once.
func TestWebhookRetried(t *testing.T) {
	t.Parallel()
	var calls, ok atomic.Int32
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if calls.Add(1) <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if Verify([]byte("s3cret"), r.Header.Get("X-Floodgate-Timestamp"), body, r.Header.Get("X-Floodgate-Signature")) {
			ok.Add(1)
		}
	}))
	defer hook.Close()
	p := testPolicy(t)
	a, err := New(Options{Dedup: NewLocalDedup(), Backoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	a.SetPolicy(p, map[string]Plan{"small": {Thresholds: []int{100, 80}, Webhook: hook.URL, Secret: []byte("s3cret")}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	for used := int64(1); used <= 12; used++ {
		use(a, p, "key:tiny", min(used, 10))
	}
	use(a, p, "key:other", 5) // below every threshold
	deadline := time.Now().Add(10 * time.Second)
	for ok.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if ok.Load() != 2 || calls.Load() != 4 {
		t.Errorf("%d signed deliveries in %d calls, want 2 in 4 (two failures retried)", ok.Load(), calls.Load())
	}
}

func TestSignature(t *testing.T) {
	t.Parallel()
	body := []byte(`{"type":"quota.threshold"}`)
	sig := Sign([]byte("k"), "1700000000", body)
	if !Verify([]byte("k"), "1700000000", body, sig) {
		t.Error("own signature refused")
	}
	if Verify([]byte("k"), "1700000001", body, sig) || Verify([]byte("x"), "1700000000", body, sig) {
		t.Error("a signature of another time or secret accepted")
	}
}

func TestKeyName(t *testing.T) {
	for in, want := range map[string]string{"key:acme": "acme", "key:acme#3": "acme", "key:a#b": "a#b"} {
		if got := keyName(in); got != want {
			t.Errorf("keyName(%q) = %q, want %q", in, got, want)
		}
	}
}
