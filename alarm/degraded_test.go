package alarm

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/internal/promtest"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memstore"
	"github.com/floodgate/floodgate/store/redisstore"
)

// TestStoreOutageFiresNoAlarm: while the Redis store is down, a plan
// quota that fails closed refuses every key, and a failure policy's
// decision says nothing about what a key has used: no key's alarm fires
// then, however many keys ask. A key that really reaches its quota on a
// healthy store still fires its alarm, and it is the only one the
// receiver ever gets.
func TestStoreOutageFiresNoAlarm(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	f, err := config.Parse("p.yaml", []byte(`
routes: [{name: r, match: {paths: ["/**"]}, upstream: none}]
plans: [{name: small, quota: {limit: 10, period: DAY}, on_failure: deny}]
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Compile(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	quota, ok := p.Limit("small.quota")
	if !ok {
		t.Fatal("no small.quota")
	}
	got := make(chan Event, 64)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev Event
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &ev); err != nil {
			t.Errorf("webhook body %q: %v", body, err)
		}
		got <- ev
	}))
	defer hook.Close()
	reg := prometheus.NewRegistry()
	a, err := New(Options{Dedup: NewLocalDedup(), Registerer: reg, TargetConcurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.SetPolicy(p, map[string]Plan{"small": {Thresholds: []int{80, 100}, Webhook: hook.URL, Secret: []byte("s")}}); err != nil {
		t.Fatal(err)
	}
	runAlarms(t, a)
	store, err := redisstore.New(redisstore.Options{URL: "redis://" + srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	// No circuit breaker: each decision asks the store, down or back.
	engine := limiter.New(store, limiter.Options{Timeout: 2 * time.Second, Observer: a,
		Breaker: limiter.BreakerOptions{Failures: -1, FailureRatio: 2}})
	decide := func(key string) limiter.Result {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var res limiter.Result
		if err := engine.Decide(ctx, &limiter.Request{Hits: []limiter.Hit{{Rule: quota.Rule, Key: key, Cost: 1}}}, &res); err != nil {
			t.Fatalf("decide %s: %v", key, err)
		}
		return res
	}
	if res := decide("key:before"); !res.Allowed || res.Degraded != limiter.NotDegraded {
		t.Fatalf("with Redis up: %+v", res)
	}
	srv.Kill()
	for i := range 20 {
		if res := decide(fmt.Sprintf("key:k%d", i)); res.Allowed || res.Degraded == limiter.NotDegraded {
			t.Fatalf("with Redis down, a quota that fails closed: %+v", res)
		}
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// The store is back: a key that uses its whole quota fires its two
	// alarms, queued behind whatever the outage queued.
	deadline := time.Now().Add(30 * time.Second)
	for used := 0; used < 10; {
		res := decide("key:real")
		switch {
		case res.Degraded == limiter.NotDegraded && res.Allowed:
			used++
		case time.Now().After(deadline):
			t.Fatalf("the store did not come back: %+v", res)
		default:
			time.Sleep(10 * time.Millisecond) // the client reconnects
		}
	}
	for range 2 {
		select {
		case ev := <-got:
			if ev.Key != "real" {
				t.Errorf("alarm %+v: key %q's alarm fired while the store was down", ev, ev.Key)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the real key's alarms did not arrive")
		}
	}
	if fired := promtest.Value(t, reg, "floodgate_quota_alarms_total", promtest.Labels{"result": "fired"}); fired != 2 {
		t.Errorf("%v alarms fired, want the real key's 2", fired)
	}
}

// TestLargeQuotaAlarmsAtItsThresholds: a plan whose quota is too large
// to be multiplied by a percentage in 64 bits (an "unlimited" plan)
// fires no alarm on a key's first request; a small plan's alarms, queued
// after it, are the only ones the receiver gets.
func TestLargeQuotaAlarmsAtItsThresholds(t *testing.T) {
	t.Parallel()
	f, err := config.Parse("p.yaml", []byte(`
routes: [{name: r, match: {paths: ["/**"]}, upstream: none}]
plans:
  - {name: unlimited, quota: {limit: 9223372036854775807, period: MONTH}}
  - {name: small, quota: {limit: 10, period: DAY}}
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Compile(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan Event, 64)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev Event
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &ev); err != nil {
			t.Errorf("webhook body %q: %v", body, err)
		}
		got <- ev
	}))
	defer hook.Close()
	reg := prometheus.NewRegistry()
	a, err := New(Options{Dedup: NewLocalDedup(), Registerer: reg, TargetConcurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	alarms := Plan{Thresholds: []int{80, 100}, Webhook: hook.URL, Secret: []byte("s")}
	if err := a.SetPolicy(p, map[string]Plan{"unlimited": alarms, "small": alarms}); err != nil {
		t.Fatal(err)
	}
	runAlarms(t, a)
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	engine := limiter.New(store, limiter.Options{Observer: a})
	decide := func(limit, key string) {
		t.Helper()
		l, ok := p.Limit(limit)
		if !ok {
			t.Fatalf("no %s", limit)
		}
		var res limiter.Result
		if err := engine.Decide(context.Background(), &limiter.Request{Hits: []limiter.Hit{{Rule: l.Rule, Key: key, Cost: 1}}}, &res); err != nil {
			t.Fatalf("decide %s: %v", key, err)
		}
		if !res.Allowed {
			t.Fatalf("%s %s refused: %+v", limit, key, res)
		}
	}
	for range 3 {
		decide("unlimited.quota", "key:big")
	}
	for range 10 {
		decide("small.quota", "key:small")
	}
	for range 2 {
		select {
		case ev := <-got:
			if ev.Key != "small" {
				t.Errorf("alarm %+v: %d of a quota of %d fired the %d%% alarm", ev, ev.Used, ev.Quota, ev.Threshold)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the small plan's alarms did not arrive")
		}
	}
	if fired := promtest.Value(t, reg, "floodgate_quota_alarms_total", promtest.Labels{"result": "fired"}); fired != 2 {
		t.Errorf("%v alarms fired, want the small plan's 2", fired)
	}
}
