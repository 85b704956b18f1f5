package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/limiter"
)

// helpersURL is the URL helper processes reach the shared server of mode
// by (a Cluster through other seed primaries than newCluster's).
func helpersURL(t testing.TB, mode string) string {
	if mode == "cluster" {
		c := sharedCluster(t)
		return "redis+cluster://" + c.Addrs()[0] + "," + c.Addrs()[2]
	}
	return "redis://" + sharedServer(t).Addr
}

// TestExactAcrossProcesses: 4 OS processes × 50 goroutines on one Redis
// admit exactly the limit, 1,000, and no denied request consumes anything.
func TestExactAcrossProcesses(t *testing.T) {
	const procs = 4
	attempts := 10 // per goroutine: 2,000 requests for 1,000 units
	for _, mode := range modes {
		for _, scenario := range []string{"fixed", "tokenbucket", "three"} {
			t.Run(mode+"/"+scenario, func(t *testing.T) {
				url := helpersURL(t, mode)
				prefix := uniquePrefix(t)
				avoidHourBoundary()
				total := sumReports(runHelpers(t, procs, scenario, url, prefix, attempts))
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
		err := s.Decide(ctx, []limiter.Hit{h}, true, out)
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

// TestReserveExactAcrossProcesses: 4 OS processes × 50 goroutines reserve
// on one Redis through the engine (see helperReserve). At the instant
// every goroutine has reserved 10 of 1,000 units, exactly 100 hold a
// reservation. With the limit full, the settles above the estimate charge
// nothing: all of their excess is overrun. The settles below, and 10 more
// reservations per goroutine of random estimates settled at random costs,
// leave the limit holding exactly the units the settles kept (the actual
// costs less the overruns), never more than the limit; and every allowed
// request charged its user's limit once, denied ones nothing (on a
// Cluster the user's limit is in another slot and denies after the
// reserve: the reserve's charge and settle record are given back).
func TestReserveExactAcrossProcesses(t *testing.T) {
	const procs, attempts = 4, 10
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			url := helpersURL(t, mode)
			prefix := uniquePrefix(t)
			avoidHourBoundary()
			total := sumReports(runHelpers(t, procs, "reserve", url, prefix, attempts))
			t.Logf("%+v", total)
			if total.Errors != 0 {
				t.Fatalf("%d errors", total.Errors)
			}
			if total.Held != 1000/reserveFirst {
				t.Fatalf("%d reservations of %d held at once on a limit of 1000, want exactly %d",
					total.Held, reserveFirst, 1000/reserveFirst)
			}
			if total.FirstAbove == 0 || total.FirstOverrun != 2*total.FirstAbove {
				t.Fatalf("%d settles of 12 on 10 reserved on a full limit: %d overrun, want all %d",
					total.FirstAbove, total.FirstOverrun, 2*total.FirstAbove)
			}
			if total.Below == 0 || total.Above <= total.FirstAbove || total.Denied == 0 {
				t.Fatalf("the run settled %d below and %d above, denied %d: it does not exercise them all",
					total.Below, total.Above, total.Denied)
			}
			if total.Charged > 1000 {
				t.Fatalf("settles kept %d units of 1000", total.Charged)
			}
			if total.Allowed+total.Denied != procs*workers*(attempts+1) {
				t.Fatalf("%d answers for %d requests", total.Allowed+total.Denied, procs*workers*(attempts+1))
			}
			s, err := New(Options{URL: url, Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			rules, err := scenarioRules("reserve")
			if err != nil {
				t.Fatal(err)
			}
			free := func(h limiter.Hit) int64 {
				h.Cost, h.Reserve = 1, false
				out := make([]floodgate.Decision, 1)
				if err := s.Decide(context.Background(), []limiter.Hit{h}, true, out); err != nil {
					t.Fatal(err)
				}
				if !out[0].Allowed {
					return 0
				}
				return out[0].Remaining + 1
			}
			if n := free(reserveHits(rules, 0, 1, false)[0]); n != 1000-total.Charged {
				t.Fatalf("the reserved limit has %d free, want 1000 less the %d units settled", n, total.Charged)
			}
			for u := range users {
				if n := free(reserveHits(rules, u, 1, true)[1]); n != reserveUserMax-total.PerUser[u] {
					t.Fatalf("user %d: %d free, want %d less %d allowed", u, n, reserveUserMax, total.PerUser[u])
				}
			}
		})
	}
}
