package admin

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/keystore"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/redisstore"
)

// TestQuotaResetsAtOnEveryInstance: two instances sharing a Redis, their
// clocks two seconds ahead of the server's and two seconds behind it,
// report the same resets_at for a key's daily quota: the zone's midnight
// (Asia/Kolkata's, 18:30 UTC), not each instance's clock plus the time
// left by the server's.
func TestQuotaResetsAtOnEveryInstance(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	store, err := redisstore.New(redisstore.Options{URL: "redis://" + srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	f, err := config.Parse("p.yaml", []byte(`routes:
  - {name: api, match: {paths: ["/**"]}, api_key_required: true, upstream: none}
plans:
  - {name: basic, quota: {limit: 10, period: DAY, time_zone: Asia/Kolkata}}
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Compile(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	pol := func() *policy.Policy { return p }
	ctx := context.Background()
	engine := limiter.New(store, limiter.Options{})
	l, ok := p.Limit("basic.quota")
	if !ok {
		t.Fatal("no basic.quota")
	}
	var res limiter.Result
	if err := engine.Decide(ctx, &limiter.Request{Hits: []limiter.Hit{{Rule: l.Rule, Key: "key:acme", Cost: 3}}}, &res); err != nil || !res.Allowed {
		t.Fatalf("charge: %+v %v", res, err)
	}
	var got []Use
	for _, skew := range []time.Duration{2 * time.Second, -2 * time.Second} {
		keys, err := keystore.New(ctx, keystore.Options{Backend: keystore.NewFileBackend(t.TempDir() + "/keys.json"), Policy: pol})
		if err != nil {
			t.Fatal(err)
		}
		a, err := New(Options{Keys: keys, Audit: NewFileAudit(t.TempDir()+"/audit.jsonl", 0), Policy: pol, Engine: engine,
			Now: func() time.Time { return time.Now().Add(skew) }})
		if err != nil {
			t.Fatal(err)
		}
		u, err := a.Peek(ctx, l, "key:acme")
		if err != nil {
			t.Fatal(err)
		}
		if u.Used != 3 || u.Degraded {
			t.Fatalf("instance %v off: %+v, want 3 used", skew, u)
		}
		got = append(got, u)
	}
	if !got[0].ResetsAt.Equal(got[1].ResetsAt) {
		t.Errorf("the instances report different resets: %v and %v", got[0].ResetsAt, got[1].ResetsAt)
	}
	// Both name a boundary of the quota's days: its midnight.
	lim := l.Rule.Limit()
	for _, u := range got {
		at := u.ResetsAt.UnixNano()
		if algo.QuotaBoundary(&lim, at) != at {
			t.Errorf("resets_at %v is not a midnight in Asia/Kolkata", u.ResetsAt)
		}
	}
}
