package redisstore

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
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
	helperProcs    = "FLOODGATE_REDISSTORE_PROCS"    // the reserve scenario: how many processes meet
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
	// The reserve scenario: reservations held at once in its first round,
	// of which FirstAbove settled above the estimate first, with
	// FirstOverrun units of overrun; settles below and above their
	// estimates, the units the settles left charged (actual costs less
	// overruns), and the overrun units, in all.
	Held, FirstAbove, FirstOverrun int64
	Below, Above, Charged, Overrun int64
}

// add adds o to r, field by field.
func (r *helperReport) add(o *helperReport) {
	r.Allowed += o.Allowed
	r.Denied += o.Denied
	r.Errors += o.Errors
	for i := range r.PerUser {
		r.PerUser[i] += o.PerUser[i]
	}
	r.Calls += o.Calls
	r.Requests += o.Requests
	r.LeaseTakes += o.LeaseTakes
	r.LeaseGrants += o.LeaseGrants
	r.Held += o.Held
	r.FirstAbove += o.FirstAbove
	r.FirstOverrun += o.FirstOverrun
	r.Below += o.Below
	r.Above += o.Above
	r.Charged += o.Charged
	r.Overrun += o.Overrun
}

// sumReports adds the reports of helper processes.
func sumReports(reps []helperReport) helperReport {
	var total helperReport
	for i := range reps {
		total.add(&reps[i])
	}
	return total
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
	case "reserve":
		// The reserved limit (one unit an hour: nothing refills during the
		// test), then a plain one in another slot that denies later.
		ls = []floodgate.Limit{
			{Name: "ex_res_global", Algorithm: floodgate.TokenBucket, Rate: 1, Per: time.Hour, Burst: 1000},
			{Name: "ex_res_user", Algorithm: floodgate.FixedWindow, Max: reserveUserMax, Window: time.Hour},
		}
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
	if os.Getenv(helperEnv) == "reserve" {
		return helperReserve(s, rules)
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
				err := s.Decide(ctx, hits, false, out)
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
			rep.add(&mine)
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

// The reserve scenario: the first round reserves reserveFirst each on the
// global limit of 1,000 units; later requests reserve an estimate there and
// charge 1 on their user's limit (users of reserveUserMax each).
const (
	reserveUserMax = 15
	reserveFirst   = 10
)

// reserveHits returns the hits of one request of worker w of the reserve
// scenario: est reserved on the global limit, and with user 1 on the
// user's.
func reserveHits(rules []*limiter.Rule, w int, est int64, user bool) []limiter.Hit {
	hits := []limiter.Hit{{Rule: rules[0], Key: "global", Cost: est, Reserve: true}}
	if user {
		hits = append(hits, limiter.Hit{Rule: rules[1], Key: "user" + strconv.Itoa(w%users), Cost: 1})
	}
	return hits
}

// helperReserve runs the reserve scenario through the engine. First every
// worker reserves reserveFirst and holds it until every worker of every
// process has tried (the processes meet at a counter in Redis), so that
// the reservations held at that instant are what the limit allows at
// once. The limit is then full: the odd holders settle above the estimate
// (12) first, and all of their excess is overrun; once all of them have
// (the processes meet again), the even ones settle below it (1). Then each
// worker reserves random estimates and settles each at a random actual
// cost from 0 to twice the estimate.
func helperReserve(s *Store, rules []*limiter.Rule) int {
	attempts, _ := strconv.Atoi(os.Getenv(helperAttempts))
	procs, _ := strconv.Atoi(os.Getenv(helperProcs))
	ctx := context.Background()
	l := limiter.New(s, limiter.Options{Timeout: 10 * time.Second})
	var mu sync.Mutex // guards rep
	var rep helperReport
	var tried, above, wg sync.WaitGroup
	tried.Add(workers)
	above.Add(workers)
	met, metAgain := make(chan struct{}), make(chan struct{})
	for w := range workers {
		wg.Go(func() {
			var mine helperReport
			rng := rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(w)))
			reserve := func(est int64, user bool) (*limiter.Request, bool) {
				req := &limiter.Request{Hits: reserveHits(rules, w, est, user)}
				var res limiter.Result
				err := l.Decide(ctx, req, &res)
				switch {
				case err != nil || res.Degraded != limiter.NotDegraded:
					mine.Errors++
				case res.Allowed:
					mine.Allowed++
					if user {
						mine.PerUser[w%users]++
					}
					return req, true
				default:
					mine.Denied++
				}
				return nil, false
			}
			settle := func(req *limiter.Request, est, actual int64) int64 {
				var res limiter.Result
				if err := l.Settle(ctx, req, append([]int64{actual}, make([]int64, len(req.Hits)-1)...), &res); err != nil {
					mine.Errors++
					return 0
				}
				over := res.Decisions[0].Overrun
				mine.Charged += actual - over
				mine.Overrun += over
				if actual < est {
					mine.Below++
				} else if actual > est {
					mine.Above++
				}
				return over
			}
			req, held := reserve(reserveFirst, false)
			if held {
				mine.Held++
			}
			tried.Done()
			<-met
			if held && w%2 == 1 {
				mine.FirstAbove++
				mine.FirstOverrun += settle(req, reserveFirst, 12)
			}
			above.Done()
			<-metAgain
			if held && w%2 == 0 {
				settle(req, reserveFirst, 1)
			}
			for range attempts {
				est := 1 + rng.Int64N(8)
				if req, ok := reserve(est, true); ok {
					settle(req, est, rng.Int64N(2*est+1))
				}
			}
			mu.Lock()
			rep.add(&mine)
			mu.Unlock()
		})
	}
	tried.Wait()
	if err := meet(s, os.Getenv(helperPrefix)+"meet", procs); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	close(met)
	above.Wait()
	if err := meet(s, os.Getenv(helperPrefix)+"meet-again", procs); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	close(metAgain)
	wg.Wait()
	rep.Calls, rep.Requests = s.Calls()
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		return 3
	}
	return 0
}

// meet counts this process in at key and waits (a minute at most) until
// procs processes have.
func meet(s *Store, key string, procs int) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.client.Do(ctx, s.client.B().Incr().Key(key).Build()).Error(); err != nil {
		return fmt.Errorf("meet: %w", err)
	}
	for {
		n, err := s.client.Do(ctx, s.client.B().Get().Key(key).Build()).AsInt64()
		if err != nil {
			return fmt.Errorf("meet: %w", err)
		}
		if n >= int64(procs) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("meet: %d of %d processes: %w", n, procs, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
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
				helperAttempts+"="+strconv.Itoa(attempts), helperProcs+"="+strconv.Itoa(procs))
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

// applyOp asks st for o, the tests' way of driving every verb alike: a
// settle answers as decisions (Allowed: found; Limit: the capacity), a
// release and a refund answer nothing.
func applyOp(ctx context.Context, st limiter.Store, o scriptOp, hits []limiter.Hit, out []floodgate.Decision) error {
	switch o {
	case opCharge, opPeek:
		return st.Decide(ctx, hits, o == opPeek, out)
	case opRelease:
		return st.(limiter.Releaser).Release(ctx, hits)
	case opRefund:
		return st.(limiter.Refunder).Refund(ctx, hits)
	case opReserve:
		return st.(limiter.Reserver).Reserve(ctx, hits, out)
	}
	settled := make([]limiter.Settled, len(hits))
	err := st.(limiter.Reserver).Settle(ctx, hits, settled)
	for i, a := range settled {
		out[i] = floodgate.Decision{Allowed: a.Found, Limit: hits[i].Rule.Capacity(), Remaining: a.Remaining, Overrun: a.Overrun}
	}
	return err
}
