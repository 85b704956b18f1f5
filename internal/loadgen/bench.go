package loadgen

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/cli"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/redisstore"
)

const benchUsage = `usage: floodgate bench [--store memory|URL] [--algorithm NAME] [--keys N]
                       [--concurrency N] [--duration D] [limit flags] [--json]

Sends charge decisions for random keys from concurrent workers through the
engine (package limiter, as floodgate serve decides) to a store for a fixed
time, then prints the throughput, the allowed/denied/degraded/error counts
and the latency percentiles of one decision. It stops by itself after
--duration; the keys are made before the clock starts. --direct calls the
store without the engine (no deadline, breaker or failure policy).

Stores: memory (the embedded store) or a Redis URL: redis://host:port/db,
rediss://..., redis+cluster://h1:p1,h2:p2, redis+sentinel://h1:p1/master,
redis+unix:///path/of/the.sock.
On Redis it also reports the script calls and the CPU time of the servers
per decision (from INFO, before and after the run), and takes the Redis
store's modes: --batch 1 sends one script call per decision.

With --json it prints exactly one object:
  {"decisions_per_sec": F, "allowed": N, "denied": N, "degraded": N,
   "errors": N, "p50_us": F, "p99_us": F, "p999_us": F, "max_us": F,
   "redis_calls_per_decision": F, "redis_cpu_us_per_decision": F,
   "slow_calls": N, "hard_timeouts": N, "store_failures": N,
   "late_deadlines": N, "breaker_opens": N}
(the redis fields are 0 for the memory store; the last five are the
engine's: store calls given more time past --store-timeout because Redis
kept answering, those of them that reached the hard timeout, calls held
against the store (an error, or no progress for a deadline), deadlines
noticed late because this process did not run, and how often the circuit
breaker opened; 0 with --direct). With --timeline FILE it also
writes one JSON object per --interval to FILE: {"t_ms": end of the interval
in Unix ms, "allowed": N, "denied": N, "degraded": N, "errors": N,
"p99_us": F, "max_us": F}.

Flags:
`

// benchConfig is what the flags of floodgate bench describe.
type benchConfig struct {
	store        string
	limit        floodgate.Limit
	keys         int
	concurrency  int
	duration     time.Duration
	timeout      time.Duration
	storeTimeout time.Duration
	onFailure    floodgate.FailurePolicy
	instances    int
	direct       bool
	prefix       string
	flushDelay   time.Duration
	batch        int
	inFlight     int
	timeline     string
	interval     time.Duration
	denyCache    bool
	leased       bool
	leaseLife    time.Duration
	maxRate      float64
	json         bool
}

func parseBenchFlags(args []string, stdout io.Writer) (*benchConfig, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg := &benchConfig{}
	alg := fs.String("algorithm", "token_bucket", "algorithm: "+benchAlgorithmList())
	fs.StringVar(&cfg.store, "store", "memory", "memory, or a Redis URL")
	fs.IntVar(&cfg.keys, "keys", 1000, "distinct keys, chosen at random")
	fs.IntVar(&cfg.concurrency, "concurrency", 50, "concurrent workers")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "how long to run")
	fs.DurationVar(&cfg.timeout, "timeout", time.Second, "the caller's deadline of one decision (a worker's deadline serves a tenth of it: each decision has 0.9 to 1 times it)")
	fs.DurationVar(&cfg.storeTimeout, "store-timeout", 0, "the engine's deadline of one store call (0: the engine's default)")
	onFailure := fs.String("on-failure", "allow", "failure policy: allow, deny or local")
	fs.IntVar(&cfg.instances, "instances", 1, "instances sharing the limit (local fallback share)")
	fs.BoolVar(&cfg.direct, "direct", false, "call the store without the engine")
	fs.StringVar(&cfg.prefix, "prefix", "fgbench:", "Redis key prefix")
	fs.DurationVar(&cfg.flushDelay, "flush-delay", 0, "Redis: longest wait to gather pipelined commands (0: the store's default)")
	fs.IntVar(&cfg.batch, "batch", 0, "Redis: most decisions per script call (0: the store's default; 1: no batching)")
	fs.IntVar(&cfg.inFlight, "batches-in-flight", 0, "Redis: script calls in flight per lane (0: the store's default)")
	fs.BoolVar(&cfg.denyCache, "deny-cache", true, "the engine's deny cache (Redis)")
	fs.BoolVar(&cfg.leased, "leased", false, "leased consistency (Redis; token_bucket, gcra, leaky_bucket, fixed_window)")
	fs.DurationVar(&cfg.leaseLife, "lease-lifetime", 0, "how long a lease's units are spent (0: the engine's default)")
	fs.Float64Var(&cfg.maxRate, "max-rate", 0, "cap on the decisions per second of all workers together (0: none); a worker that falls behind does not catch up")
	fs.StringVar(&cfg.timeline, "timeline", "", "write counts per interval to this file, as JSON lines")
	fs.DurationVar(&cfg.interval, "interval", 100*time.Millisecond, "the timeline's interval")
	fs.BoolVar(&cfg.json, "json", false, "print one JSON object")
	rate := fs.Int64("rate", 100, "units per --per (rate algorithms)")
	per := fs.Duration("per", time.Second, "the rate's period")
	burst := fs.Int64("burst", 100, "burst (rate algorithms; queue size of leaky_queue)")
	limit := fs.Int64("limit", 100, "units per window, in flight or per period")
	window := fs.Duration("window", time.Second, "window (window algorithms)")
	period := fs.String("period", "day", "quota period: day, week or month")
	leaseTTL := fs.Duration("lease-ttl", time.Minute, "concurrency lease lifetime")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, benchUsage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return nil, nil
		}
		return nil, cli.Usagef("bench: %v", err)
	}
	if fs.NArg() > 0 {
		return nil, cli.Usagef("bench: unexpected argument %q", fs.Arg(0))
	}
	a, err := floodgate.ParseAlgorithm(*alg)
	if err != nil {
		return nil, cli.Usagef("bench: --algorithm: %v", err)
	}
	if cfg.onFailure, err = floodgate.ParseFailurePolicy(*onFailure); err != nil || *onFailure == "" {
		return nil, cli.Usagef("bench: --on-failure: want allow, deny or local, got %q", *onFailure)
	}
	switch {
	case cfg.keys < 1 || cfg.keys > 10_000_000:
		return nil, cli.Usagef("bench: --keys must be between 1 and 10000000, got %d", cfg.keys)
	case cfg.concurrency < 1 || cfg.concurrency > 100000:
		return nil, cli.Usagef("bench: --concurrency must be between 1 and 100000, got %d", cfg.concurrency)
	case cfg.duration < 10*time.Millisecond:
		return nil, cli.Usagef("bench: --duration must be at least 10ms, got %s", cfg.duration)
	case cfg.timeout <= 0:
		return nil, cli.Usagef("bench: --timeout must be positive, got %s", cfg.timeout)
	case cfg.storeTimeout < 0:
		return nil, cli.Usagef("bench: --store-timeout must not be negative, got %s", cfg.storeTimeout)
	case cfg.flushDelay < 0 || cfg.flushDelay > time.Second:
		return nil, cli.Usagef("bench: --flush-delay must be between 0 and 1s, got %s", cfg.flushDelay)
	case cfg.batch < 0 || cfg.inFlight < 0:
		return nil, cli.Usagef("bench: --batch and --batches-in-flight must not be negative")
	case cfg.instances < 1:
		return nil, cli.Usagef("bench: --instances must be at least 1, got %d", cfg.instances)
	case cfg.interval < time.Millisecond:
		return nil, cli.Usagef("bench: --interval must be at least 1ms, got %s", cfg.interval)
	case cfg.maxRate < 0:
		return nil, cli.Usagef("bench: --max-rate must not be negative, got %v", cfg.maxRate)
	case cfg.leaseLife < 0:
		return nil, cli.Usagef("bench: --lease-lifetime must not be negative, got %s", cfg.leaseLife)
	case cfg.leased && cfg.direct:
		return nil, cli.Usagef("bench: --leased needs the engine; drop --direct")
	}
	// A flag that means nothing for the algorithm or the store is an
	// error, not ignored.
	var unused error
	fs.Visit(func(f *flag.Flag) {
		if p, ok := cli.LimitParam(f.Name); ok && !a.Traits().Params.Has(p) && unused == nil {
			unused = cli.Usagef("bench: --%s does not apply to %s", f.Name, a)
		}
		if strings.HasPrefix(f.Usage, "Redis:") && cfg.store == "memory" && unused == nil {
			unused = cli.Usagef("bench: --%s applies to a Redis store only", f.Name)
		}
	})
	if unused != nil {
		return nil, unused
	}
	cfg.limit = floodgate.Limit{Name: "bench", Algorithm: a, Rate: *rate, Per: *per, Burst: *burst,
		Max: *limit, Window: *window, LeaseTTL: *leaseTTL}
	if a.Family() == floodgate.FamilyQuota {
		if cfg.limit.Period, err = floodgate.ParsePeriod(*period); err != nil {
			return nil, cli.Usagef("bench: --period: %v", err)
		}
	}
	if err := cfg.limit.Validate(); err != nil {
		return nil, cli.Usagef("bench: %v", err)
	}
	if cfg.leased && !a.Traits().Leasable {
		return nil, cli.Usagef("bench: --leased: %s cannot be leased", a)
	}
	return cfg, nil
}

func benchAlgorithmList() string {
	var names []string
	for _, a := range floodgate.Algorithms() {
		names = append(names, a.String())
	}
	return strings.Join(names, ", ")
}

// benchResult is the JSON output of floodgate bench.
type benchResult struct {
	DecisionsPerSec float64 `json:"decisions_per_sec"`
	Allowed         int64   `json:"allowed"`
	Denied          int64   `json:"denied"`
	Degraded        int64   `json:"degraded"`
	Errors          int64   `json:"errors"`
	P50us           float64 `json:"p50_us"`
	P99us           float64 `json:"p99_us"`
	P999us          float64 `json:"p999_us"`
	MaxUs           float64 `json:"max_us"`
	RedisCalls      float64 `json:"redis_calls_per_decision"`
	RedisCPUus      float64 `json:"redis_cpu_us_per_decision"`
	SlowCalls       uint64  `json:"slow_calls"`
	HardTimeouts    uint64  `json:"hard_timeouts"`
	StoreFailures   uint64  `json:"store_failures"`
	LateDeadlines   uint64  `json:"late_deadlines"`
	BreakerOpens    uint64  `json:"breaker_opens"`
}

// benchTarget is what the workers decide through: the engine or a store.
type benchTarget struct {
	engine *limiter.Limiter
	store  limiter.Store
}

// Bench is floodgate bench: decisions for random keys from concurrent
// workers through the engine (or the store alone) for a fixed time, and
// their throughput and latency.
func Bench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseBenchFlags(args, stdout)
	if err != nil || cfg == nil {
		return err
	}
	ro := limiter.RuleOptions{OnFailure: cfg.onFailure}
	if cfg.leased {
		ro.Consistency = floodgate.Leased
	}
	rule, err := limiter.NewRuleWith(cfg.limit, ro)
	if err != nil {
		return cli.Usagef("bench: %v", err)
	}
	if err := store.Check(cfg.store); err != nil {
		return cli.Usagef("bench: --store: %v", err)
	}
	st, closer, err := store.Open(ctx, cfg.store, store.Options{Prefix: cfg.prefix, MaxFlushDelay: cfg.flushDelay,
		MaxBatch: cfg.batch, BatchesInFlight: cfg.inFlight})
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer closer.Close()
	rs, _ := st.(*redisstore.Store)
	target := benchTarget{store: st}
	if !cfg.direct {
		local, lc, err := store.Open(ctx, "memory", store.Options{})
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		defer lc.Close()
		lo := limiter.Options{Timeout: cfg.storeTimeout, Local: local, Instances: cfg.instances,
			Lease: limiter.LeaseOptions{Lifetime: cfg.leaseLife}}
		if !cfg.denyCache {
			lo.DenyCache.Entries = -1
		}
		target.engine = limiter.New(st, lo)
		if cfg.leased {
			defer target.engine.ReturnLeases(context.WithoutCancel(ctx))
		}
	}
	// Progress (the keys being made, the seconds going by) goes to
	// standard error, when someone watches it.
	var progress io.Writer
	if cli.IsTerminal(stderr) {
		progress = stderr
	}
	var before redisstore.Usage
	if rs != nil {
		// With a deadline: a call without one would move rueidis to its
		// background pipeline for good, which a lone caller never needs.
		uctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		before, _ = rs.ServerUsage(uctx)
		cancel()
	}
	res, err := bench(ctx, cfg, rule, target, progress)
	if err != nil {
		return err
	}
	if target.engine != nil {
		st := target.engine.Stats()
		res.SlowCalls, res.HardTimeouts, res.BreakerOpens = st.SlowCalls, st.HardTimeouts, st.BreakerOpens
		res.StoreFailures, res.LateDeadlines = st.StoreFailures, st.LateDeadlines
	}
	if rs != nil && res.Allowed+res.Denied+res.Degraded > 0 {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		after, err := rs.ServerUsage(uctx)
		cancel()
		if err == nil {
			d := after.Sub(before)
			n := float64(res.Allowed + res.Denied + res.Errors)
			res.RedisCalls = float64(d.ScriptCalls) / n
			res.RedisCPUus = float64(d.CPU) / 1e3 / n
		}
	}
	if cfg.json {
		return json.NewEncoder(stdout).Encode(res)
	}
	fmt.Fprintf(stdout, "store        %s\nalgorithm    %s\nkeys         %d\nconcurrency  %d\n",
		redactStore(cfg.store), cfg.limit.Algorithm, cfg.keys, cfg.concurrency)
	fmt.Fprintf(stdout, "decisions/s  %.0f\nallowed      %d\ndenied       %d\ndegraded     %d\nerrors       %d\np50          %.1f µs\np99          %.1f µs\nmax          %.1f µs\n",
		res.DecisionsPerSec, res.Allowed, res.Denied, res.Degraded, res.Errors, res.P50us, res.P99us, res.MaxUs)
	if rs != nil {
		fmt.Fprintf(stdout, "redis calls  %.3f per decision\nredis CPU    %.2f µs per decision\n", res.RedisCalls, res.RedisCPUus)
	}
	if res.Errors > 0 && res.Allowed+res.Denied == 0 {
		return &cli.ExitError{Code: 1, Err: errors.New("bench: every decision failed")}
	}
	return nil
}

// redactStore hides a password in a Redis URL.
func redactStore(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return s
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		return scheme + "://…@" + rest[at+1:]
	}
	return s
}

// benchCounts are the counts of one worker, over the run or one interval.
type benchCounts struct {
	allowed, denied, degraded, errors int64
	hist                              histogram
	max                               time.Duration
}

func (c *benchCounts) add(o *benchCounts) {
	c.allowed += o.allowed
	c.denied += o.denied
	c.degraded += o.degraded
	c.errors += o.errors
	c.hist.merge(&o.hist)
	c.max = max(c.max, o.max)
}

// worker holds one worker's counts. When a reporter (the progress line or
// the timeline) reads them, it takes mu, which the worker then takes for
// each decision too; otherwise only the worker touches them. The padding
// keeps workers apart in the cache.
type worker struct {
	locked   bool       // a reporter reads the counts
	mu       sync.Mutex // guards total and interval when locked
	total    benchCounts
	interval benchCounts
	_        [64]byte
}

// bench runs the workers until the duration passes or ctx ends.
func bench(ctx context.Context, cfg *benchConfig, rule *limiter.Rule, target benchTarget, progress io.Writer) (benchResult, error) {
	if cfg.keys >= 1_000_000 && progress != nil {
		fmt.Fprintf(progress, "bench: making %d keys before the clock starts\n", cfg.keys)
	}
	keys := make([]string, cfg.keys)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	var tl *bufio.Writer
	if cfg.timeline != "" {
		f, err := os.Create(cfg.timeline)
		if err != nil {
			return benchResult{}, fmt.Errorf("bench: %w", err)
		}
		defer f.Close()
		tl = bufio.NewWriter(f)
		defer tl.Flush()
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	ws := make([]worker, cfg.concurrency)
	for i := range ws {
		ws[i].locked = progress != nil || tl != nil
	}
	start := time.Now()
	var wg sync.WaitGroup
	for i := range ws {
		wg.Go(func() { ws[i].run(ctx, cfg, rule, target, keys, uint64(i)) })
	}
	stop := make(chan struct{})
	var reporters sync.WaitGroup
	if progress != nil {
		reporters.Go(func() { benchProgress(progress, ws, start, stop) })
	}
	if tl != nil {
		reporters.Go(func() { benchTimeline(tl, ws, cfg.interval, stop) })
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(stop)
	reporters.Wait()

	var total benchCounts
	for i := range ws {
		total.add(&ws[i].total)
	}
	res := benchResult{Allowed: total.allowed, Denied: total.denied, Degraded: total.degraded, Errors: total.errors}
	res.DecisionsPerSec = float64(res.Allowed+res.Denied+res.Errors) / elapsed.Seconds()
	res.P50us = total.hist.quantile(0.50) / 1e3
	res.P99us = total.hist.quantile(0.99) / 1e3
	res.P999us = total.hist.quantile(0.999) / 1e3
	res.MaxUs = float64(total.max) / 1e3
	return res, nil
}

// benchProgress prints a line a second on a terminal until stop closes.
func benchProgress(w io.Writer, ws []worker, start time.Time, stop <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			fmt.Fprint(w, "\r\033[K")
			return
		case <-tick.C:
			var c benchCounts
			for i := range ws {
				ws[i].mu.Lock()
				c.allowed += ws[i].total.allowed + ws[i].interval.allowed
				c.denied += ws[i].total.denied + ws[i].interval.denied
				c.errors += ws[i].total.errors + ws[i].interval.errors
				ws[i].mu.Unlock()
			}
			el := time.Since(start)
			fmt.Fprintf(w, "\r%5.1fs  %10.0f decisions/s  allowed %d  denied %d  errors %d ",
				el.Seconds(), float64(c.allowed+c.denied+c.errors)/el.Seconds(), c.allowed, c.denied, c.errors)
		}
	}
}

// benchTimeline writes the counts of each interval until stop closes.
func benchTimeline(w *bufio.Writer, ws []worker, every time.Duration, stop <-chan struct{}) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	enc := json.NewEncoder(w)
	var c benchCounts
	flush := func(at time.Time) {
		c = benchCounts{}
		for i := range ws {
			ws[i].mu.Lock()
			c.add(&ws[i].interval)
			ws[i].total.add(&ws[i].interval)
			ws[i].interval = benchCounts{}
			ws[i].mu.Unlock()
		}
		enc.Encode(map[string]any{"t_ms": at.UnixMilli(), "allowed": c.allowed, "denied": c.denied,
			"degraded": c.degraded, "errors": c.errors, "p99_us": c.hist.quantile(0.99) / 1e3,
			"max_us": float64(c.max) / 1e3})
	}
	for {
		select {
		case <-stop:
			flush(time.Now())
			return
		case at := <-tick.C:
			flush(at)
		}
	}
}

// run is one worker's loop: one decision at a time until ctx ends.
func (w *worker) run(ctx context.Context, cfg *benchConfig, rule *limiter.Rule, t benchTarget, keys []string, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	hits := []limiter.Hit{{Rule: rule, Cost: 1}}
	out := make([]floodgate.Decision, 1)
	req := limiter.Request{Hits: hits}
	var res limiter.Result
	conc := cfg.limit.Algorithm.Kind() == floodgate.KindConcurrency
	end, _ := ctx.Deadline()
	var pace time.Duration // between two decisions of this worker, with --max-rate
	if cfg.maxRate > 0 {
		pace = time.Duration(float64(cfg.concurrency) / cfg.maxRate * float64(time.Second))
	}
	next := time.Now()
	var lease uint64
	dl := callerDeadline{parent: ctx, d: cfg.timeout}
	defer dl.stop()
	defer func() {
		w.mu.Lock()
		w.total.add(&w.interval)
		w.interval = benchCounts{}
		w.mu.Unlock()
	}()
	for ctx.Err() == nil {
		if pace > 0 {
			if wait := time.Until(next); wait > 0 {
				time.Sleep(wait)
			}
			if next = next.Add(pace); next.Before(time.Now()) {
				next = time.Now() // behind: no catching up
			}
		}
		hits[0].Key = keys[rng.IntN(len(keys))]
		hits[0].Lease = 0
		if conc && t.engine == nil {
			lease = seed<<40 | (lease+1)&(1<<40-1)
			hits[0].Lease = lease
		}
		t0 := time.Now()
		dctx := dl.at(t0)
		var err error
		allowed, degraded := false, false
		if t.engine != nil {
			err = t.engine.Decide(dctx, &req, &res)
			allowed, degraded = res.Allowed, res.Degraded != limiter.NotDegraded
		} else {
			err = t.store.Decide(dctx, hits, false, out)
			allowed = out[0].Allowed
		}
		lat := time.Since(t0)
		if err != nil && (ctx.Err() != nil || !time.Now().Before(end)) {
			return // the run ended during the call: not an error of the store
		}
		if w.locked {
			w.mu.Lock()
		}
		c := &w.interval
		switch {
		case err != nil:
			c.errors++
		case allowed:
			c.allowed++
		default:
			c.denied++
		}
		if err == nil && degraded {
			c.degraded++
		}
		c.hist.add(lat)
		c.max = max(c.max, lat)
		if w.locked {
			w.mu.Unlock()
		}
		if err == nil && allowed && conc {
			rctx, rcancel := context.WithTimeout(ctx, cfg.timeout)
			if t.engine != nil {
				t.engine.Release(rctx, hits)
			} else if r, ok := t.store.(limiter.Releaser); ok {
				r.Release(rctx, hits)
			}
			rcancel()
		}
	}
}

// callerDeadline is a worker's deadline for its decisions: one context
// serves those that start within a tenth of d, so that each has between
// 0.9 and 1 times d, without a timer of its own (a timer per decision
// costs this loop a tenth of its CPU; a server pays it once per request,
// not once per limit).
type callerDeadline struct {
	parent context.Context
	d      time.Duration
	ctx    context.Context
	cancel context.CancelFunc
	renew  time.Time
}

// at returns the context of a decision that starts at t0.
func (c *callerDeadline) at(t0 time.Time) context.Context {
	if c.ctx == nil || !t0.Before(c.renew) {
		c.stop()
		c.ctx, c.cancel = context.WithDeadline(c.parent, t0.Add(c.d))
		c.renew = t0.Add(c.d / 10)
	}
	return c.ctx
}

// stop ends the current context.
func (c *callerDeadline) stop() {
	if c.cancel != nil {
		c.cancel()
	}
}
