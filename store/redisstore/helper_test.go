package redisstore

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/limiter"
)

// The exactness tests run the store in several OS processes at once: the
// test binary runs itself again with helperEnv set, and TestMain hands
// such a process to helperMain instead of the tests.
const (
	helperEnv      = "FLOODGATE_REDISSTORE_HELPER" // the scenario
	helperURL      = "FLOODGATE_REDISSTORE_URL"
	helperPrefix   = "FLOODGATE_REDISSTORE_PREFIX"
	helperAttempts = "FLOODGATE_REDISSTORE_ATTEMPTS"
	helperDuration = "FLOODGATE_REDISSTORE_DURATION" // leased scenarios: how long to run
	workers        = 50                              // goroutines per process
	users          = 4                               // subjects of the per-user limit
)

// helperReport is what a helper process prints on stdout.
type helperReport struct {
	Allowed, Denied, Errors int64
	PerUser                 [users]int64
	// Calls is the number of script calls that decided Requests requests.
	Calls, Requests int64
	// LeaseTakes and LeaseGrants are the engine's (leased scenarios).
	LeaseTakes, LeaseGrants uint64
}

// Leased scenarios: their limits, the instances that share them and the
// lease settings.
const (
	leasedProcs    = 4
	leasedLifetime = 100 * time.Millisecond
	leasedShare    = 4
	leasedRate     = 2000 // per second, token bucket
	leasedBurst    = 200
	leasedMax      = 1000 // per hour, fixed window
)

// scenarioRules returns the rules of a scenario; every process compiles the
// same rules, so they share their counters. The first rule is the one that
// binds.
func scenarioRules(name string) ([]*limiter.Rule, error) {
	var ls []floodgate.Limit
	switch name {
	case "fixed":
		ls = []floodgate.Limit{{Name: "ex_fixed", Algorithm: floodgate.FixedWindow, Max: 1000, Window: time.Hour}}
	case "tokenbucket":
		// One unit an hour: nothing refills during the test.
		ls = []floodgate.Limit{{Name: "ex_tb", Algorithm: floodgate.TokenBucket, Rate: 1, Per: time.Hour, Burst: 1000}}
	case "leased_tb":
		ls = []floodgate.Limit{{Name: "ex_leased_tb", Algorithm: floodgate.TokenBucket, Rate: leasedRate, Per: time.Second, Burst: leasedBurst}}
	case "leased_fixed":
		ls = []floodgate.Limit{{Name: "ex_leased_fixed", Algorithm: floodgate.FixedWindow, Max: leasedMax, Window: time.Hour}}
	case "three":
		ls = []floodgate.Limit{
			{Name: "ex_global", Algorithm: floodgate.FixedWindow, Max: 1000, Window: time.Hour},
			{Name: "ex_user", Algorithm: floodgate.FixedWindow, Max: 400, Window: time.Hour},
			{Name: "ex_route", Algorithm: floodgate.TokenBucket, Rate: 1, Per: time.Hour, Burst: 5000},
		}
	default:
		return nil, fmt.Errorf("unknown scenario %q", name)
	}
	var rules []*limiter.Rule
	for _, l := range ls {
		o := limiter.RuleOptions{OnFailure: floodgate.FailClosed}
		if strings.HasPrefix(name, "leased_") {
			o.Consistency = floodgate.Leased
		}
		r, err := limiter.NewRuleWith(l, o)
		if err != nil {
			return nil, err
		}
		rules = append(rules, r)
	}
	return rules, nil
}

// scenarioHits returns the hits of one request by worker w: per user, per
// route and global for "three", one global key otherwise.
func scenarioHits(rules []*limiter.Rule, w int) []limiter.Hit {
	if len(rules) == 1 {
		return []limiter.Hit{{Rule: rules[0], Key: "one", Cost: 1}}
	}
	return []limiter.Hit{
		{Rule: rules[1], Key: "user" + strconv.Itoa(w%users), Cost: 1},
		{Rule: rules[2], Key: "route:/orders", Cost: 1},
		{Rule: rules[0], Key: "global", Cost: 1},
	}
}

func helperMain() int {
	rules, err := scenarioRules(os.Getenv(helperEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	attempts, _ := strconv.Atoi(os.Getenv(helperAttempts))
	s, err := New(Options{URL: os.Getenv(helperURL), Prefix: os.Getenv(helperPrefix)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer s.Close()
	var mu sync.Mutex
	var rep helperReport
	var wg sync.WaitGroup
	if strings.HasPrefix(os.Getenv(helperEnv), "leased_") {
		return helperLeased(s, rules)
	}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hits := scenarioHits(rules, w)
			out := make([]floodgate.Decision, len(hits))
			var mine helperReport
			for range attempts {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := s.Apply(ctx, limiter.Charge, hits, out)
				cancel()
				all := err == nil
				for _, d := range out {
					all = all && d.Allowed
				}
				switch {
				case err != nil:
					mine.Errors++
				case all:
					mine.Allowed++
					mine.PerUser[w%users]++
				default:
					mine.Denied++
				}
			}
			mu.Lock()
			rep.Allowed += mine.Allowed
			rep.Denied += mine.Denied
			rep.Errors += mine.Errors
			for i := range rep.PerUser {
				rep.PerUser[i] += mine.PerUser[i]
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	s.Flush()
	rep.Calls, rep.Requests = s.Calls()
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		return 3
	}
	return 0
}

// helperLeased runs a leased scenario through the engine: for a duration
// (the token bucket) or a number of attempts (the fixed window), then
// gives back what is left in its leases.
func helperLeased(s *Store, rules []*limiter.Rule) int {
	attempts, _ := strconv.Atoi(os.Getenv(helperAttempts))
	d, _ := time.ParseDuration(os.Getenv(helperDuration))
	l := limiter.New(s, limiter.Options{Timeout: 10 * time.Second, Instances: leasedProcs,
		Lease: limiter.LeaseOptions{Lifetime: leasedLifetime, Share: leasedShare}})
	stop := time.Now().Add(d)
	var allowed, denied, errs atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			hits := scenarioHits(rules, 0)
			for i := 0; d > 0 && time.Now().Before(stop) || d == 0 && i < attempts; i++ {
				res, err := l.Check(context.Background(), hits)
				switch {
				case err != nil || res.Degraded != limiter.NotDegraded:
					errs.Add(1)
				case res.Allowed:
					allowed.Add(1)
				default:
					denied.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if err := l.ReturnLeases(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	st := l.Stats()
	rep := helperReport{Allowed: allowed.Load(), Denied: denied.Load(), Errors: errs.Load(),
		LeaseTakes: st.LeaseTakes, LeaseGrants: st.LeaseGrants}
	rep.Calls, rep.Requests = s.Calls()
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		return 3
	}
	return 0
}

// runHelpers runs procs helper processes of a scenario against url and
// returns their reports.
func runHelpers(t *testing.T, procs int, scenario, url, prefix string, attempts int, env ...string) []helperReport {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		rep helperReport
		err error
	}
	results := make(chan result, procs)
	for p := 0; p < procs; p++ {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, exe, "-test.run=^TestHelperProcess$")
			cmd.Env = append(os.Environ(),
				helperEnv+"="+scenario, helperURL+"="+url, helperPrefix+"="+prefix,
				helperAttempts+"="+strconv.Itoa(attempts))
			cmd.Env = append(cmd.Env, env...)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				results <- result{err: fmt.Errorf("helper: %v: %s", err, stderr.String())}
				return
			}
			var rep helperReport
			if err := json.Unmarshal(out, &rep); err != nil {
				results <- result{err: fmt.Errorf("helper output %q: %v", out, err)}
				return
			}
			results <- result{rep: rep}
		}()
	}
	var reps []helperReport
	for p := 0; p < procs; p++ {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		reps = append(reps, r.rep)
	}
	return reps
}
