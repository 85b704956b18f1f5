package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/limiter"
)

// TestExactAcrossProcesses: 4 OS processes × 50 goroutines on one Redis
// admit exactly the limit, 1,000, and no denied request consumes anything.
func TestExactAcrossProcesses(t *testing.T) {
	const procs = 4
	attempts := 10 // per goroutine: 2,000 requests for 1,000 units
	for _, mode := range []string{"standalone", "cluster"} {
		for _, scenario := range []string{"fixed", "tokenbucket", "three"} {
			t.Run(mode+"/"+scenario, func(t *testing.T) {
				var url string
				if mode == "standalone" {
					url = "redis://" + sharedServer(t).Addr
				} else {
					c := sharedCluster(t)
					url = "redis+cluster://" + c.Addrs()[0] + "," + c.Addrs()[2]
				}
				prefix := uniquePrefix(t)
				avoidHourBoundary()
				reps := runHelpers(t, procs, scenario, url, prefix, attempts)
				var total helperReport
				for _, r := range reps {
					total.Allowed += r.Allowed
					total.Denied += r.Denied
					total.Errors += r.Errors
					total.Calls += r.Calls
					total.Requests += r.Requests
					for i := range r.PerUser {
						total.PerUser[i] += r.PerUser[i]
					}
				}
				t.Logf("%+v", total)
				if total.Errors != 0 {
					t.Fatalf("%d errors", total.Errors)
				}
				if total.Allowed != 1000 {
					t.Fatalf("allowed %d, want exactly 1000 (denied %d)", total.Allowed, total.Denied)
				}
				if total.Allowed+total.Denied != int64(procs*workers*attempts) {
					t.Fatalf("%d answers for %d requests", total.Allowed+total.Denied, procs*workers*attempts)
				}
				checkFinalCounts(t, url, prefix, scenario, total)
			})
		}
	}
}

// checkFinalCounts peeks at every counter: each holds exactly what the
// allowed requests took, so denied requests consumed nothing.
func checkFinalCounts(t *testing.T, url, prefix, scenario string, total helperReport) {
	t.Helper()
	s, err := New(Options{URL: url, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rules, err := scenarioRules(scenario)
	if err != nil {
		t.Fatal(err)
	}
	peek := func(h limiter.Hit) floodgate.Decision {
		out := make([]floodgate.Decision, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := s.Apply(ctx, limiter.Peek, []limiter.Hit{h}, out)
		if err != nil {
			t.Fatal(err)
		}
		return out[0]
	}
	// A peek of cost 1 reports what one more unit would leave: the limit
	// minus the units taken minus one, or a denial with 0 when full.
	want := func(what string, d floodgate.Decision, taken int64) {
		t.Helper()
		left := d.Limit - taken
		if left == 0 {
			if d.Allowed || d.Remaining != 0 {
				t.Fatalf("%s: %+v, want exhausted (%d taken)", what, d, taken)
			}
			return
		}
		if !d.Allowed || d.Remaining != left-1 {
			t.Fatalf("%s: %+v, want %d taken of %d", what, d, taken, d.Limit)
		}
	}
	if len(rules) == 1 {
		want("the one key", peek(limiter.Hit{Rule: rules[0], Key: "one", Cost: 1}), 1000)
		return
	}
	hits := scenarioHits(rules, 0)
	if mode := s.Mode(); mode == Cluster {
		seen := map[uint16]bool{}
		for _, h := range hits {
			seen[slot(s.Key(h.Rule, h.Key))] = true
		}
		if len(seen) < 2 {
			t.Fatalf("the three limits share one slot; the test wants several")
		}
	}
	want("global", peek(hits[2]), total.Allowed)
	want("route", peek(hits[1]), total.Allowed)
	for u := 0; u < users; u++ {
		want("user", peek(scenarioHits(rules, u)[0]), total.PerUser[u])
	}
}

// avoidHourBoundary waits, when an hour boundary is less than a minute
// away, until it has passed: the fixed windows of an hour would start afresh
// in the middle of the test.
func avoidHourBoundary() {
	now := time.Now()
	next := now.Truncate(time.Hour).Add(time.Hour)
	if left := next.Sub(now); left < time.Minute {
		time.Sleep(left + time.Second)
	}
}
