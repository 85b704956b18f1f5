package redisstore

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// TestRefusedWritesFollowPolicy: a Redis that answers but refuses every
// write: full under maxmemory-policy noeviction (OOM) or short of the
// replicas that min-replicas-to-write asks for (NOREPLICAS). Each decision
// follows its limit's failure policy (deny refuses, allow admits), the
// breaker opens with a warning that names Redis' refusal (before, it said
// only "store failing", the same words as for a Redis that is down, so the
// log did not tell the operator that Redis was full), and once Redis takes
// writes again the decisions are Redis' and the count made before goes
// on: the refused calls wrote nothing.
func TestRefusedWritesFollowPolicy(t *testing.T) {
	for _, tc := range []struct {
		name         string
		enter, leave [][]string
		says         string
	}{
		{"OOM", [][]string{{"CONFIG", "SET", "maxmemory", "1"}}, [][]string{{"CONFIG", "SET", "maxmemory", "0"}},
			"OOM command not allowed"},
		{"NOREPLICAS", [][]string{{"CONFIG", "SET", "min-replicas-to-write", "1"}}, [][]string{{"CONFIG", "SET", "min-replicas-to-write", "0"}},
			"NOREPLICAS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startRedis(t, "--maxmemory-policy", "noeviction")
			testRefusedWrites(t, srv, tc.enter, tc.leave, tc.says)
		})
	}
}

func testRefusedWrites(t *testing.T, srv *redistest.Server, enter, leave [][]string, says string) {
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	s, err := New(Options{URL: "redis://" + srv.Addr, Prefix: uniquePrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	avoidHourBoundary()
	const max = 10
	deny := ruletest.With(t, floodgate.Limit{Name: "refused_deny", Algorithm: floodgate.FixedWindow, Max: max, Window: time.Hour},
		limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	allow := ruletest.With(t, floodgate.Limit{Name: "refused_allow", Algorithm: floodgate.FixedWindow, Max: max, Window: time.Hour},
		limiter.RuleOptions{OnFailure: floodgate.FailOpen})
	lim := limiter.New(s, limiter.Options{Logger: log, Timeout: 2 * time.Second, Breaker: limiter.BreakerOptions{ProbeInterval: 50 * time.Millisecond}})
	check := func(r *limiter.Rule) limiter.Result {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := lim.Check(ctx, []limiter.Hit{{Rule: r, Key: "k", Cost: 1}})
		if err != nil {
			t.Fatalf("Check: %v", err)
		}
		return res
	}
	for range 3 {
		if res := check(deny); !res.Allowed || res.Degraded != limiter.NotDegraded {
			t.Fatalf("healthy: %+v", res)
		}
	}
	do := func(cmds [][]string) {
		for _, c := range cmds {
			if out, err := srv.Do(c...); err != nil || out != "OK" {
				t.Fatalf("%v: %q, %v", c, out, err)
			}
		}
	}
	do(enter)
	for i := range 30 {
		if res := check(deny); res.Allowed || res.Degraded == limiter.NotDegraded {
			t.Fatalf("deny, decision %d while Redis refuses writes: allowed %v, degraded %v; want refused by policy", i, res.Allowed, res.Degraded)
		}
		if res := check(allow); !res.Allowed || res.Degraded == limiter.NotDegraded {
			t.Fatalf("allow, decision %d while Redis refuses writes: allowed %v, degraded %v; want allowed by policy", i, res.Allowed, res.Degraded)
		}
	}
	if st := lim.Stats(); !st.BreakerOpen || st.StoreFailures == 0 {
		t.Fatalf("breaker open %v after %d store failures; want open", st.BreakerOpen, st.StoreFailures)
	}
	var warning string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "circuit breaker open") {
			warning = line
		}
	}
	if !strings.Contains(warning, says) {
		t.Errorf("the breaker's warning does not name Redis' refusal (%s): %q", says, warning)
	}
	do(leave)
	deadline := time.Now().Add(10 * time.Second)
	res := check(deny)
	for res.Degraded != limiter.NotDegraded {
		if time.Now().After(deadline) {
			t.Fatal("10 s after Redis took writes again, decisions still follow the failure policy")
		}
		time.Sleep(20 * time.Millisecond)
		res = check(deny)
	}
	allowed := 3
	for ; res.Degraded == limiter.NotDegraded && res.Allowed; res = check(deny) {
		allowed++
	}
	if allowed != max || res.Degraded != limiter.NotDegraded {
		t.Errorf("%d allowed in all by a window of %d, then degraded %v; want %d and Redis' refusal: the refused calls wrote nothing",
			allowed, max, res.Degraded, max)
	}
}
