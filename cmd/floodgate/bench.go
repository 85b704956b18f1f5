package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/bits"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
	"github.com/floodgate/floodgate/store/redisstore"
)

func init() {
	register("bench", "measure decisions per second against a store", runBench)
}

const benchUsage = `usage: floodgate bench [--store memory|URL] [--algorithm NAME] [--keys N]
                       [--concurrency N] [--duration D] [limit flags] [--json]

Sends charge decisions for random keys from concurrent workers to a store for
a fixed time, then prints the throughput, the allowed/denied/error counts and
the latency percentiles of one decision. It stops by itself after --duration.

Stores: memory (the embedded store) or a Redis URL: redis://host:port/db,
rediss://..., redis+cluster://h1:p1,h2:p2, redis+sentinel://h1:p1/master.

With --json it prints exactly one object:
  {"decisions_per_sec": F, "allowed": N, "denied": N, "errors": N, "p50_us": F, "p99_us": F}

Flags:
`

// benchConfig is what the flags of floodgate bench describe.
type benchConfig struct {
	store       string
	limit       floodgate.Limit
	keys        int
	concurrency int
	duration    time.Duration
	timeout     time.Duration
	prefix      string
	flushDelay  time.Duration
	json        bool
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
	fs.DurationVar(&cfg.timeout, "timeout", time.Second, "deadline of one decision")
	fs.StringVar(&cfg.prefix, "prefix", "fgbench:", "Redis key prefix")
	fs.DurationVar(&cfg.flushDelay, "flush-delay", redisstore.DefaultMaxFlushDelay, "Redis: longest wait to batch pipelined commands (0: none)")
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
		return nil, usagef("bench: %v", err)
	}
	if fs.NArg() > 0 {
		return nil, usagef("bench: unexpected argument %q", fs.Arg(0))
	}
	a, err := floodgate.ParseAlgorithm(*alg)
	if err != nil {
		return nil, usagef("bench: --algorithm: %v", err)
	}
	switch {
	case cfg.keys < 1:
		return nil, usagef("bench: --keys must be at least 1, got %d", cfg.keys)
	case cfg.concurrency < 1 || cfg.concurrency > 100000:
		return nil, usagef("bench: --concurrency must be between 1 and 100000, got %d", cfg.concurrency)
	case cfg.duration <= 0:
		return nil, usagef("bench: --duration must be positive, got %s", cfg.duration)
	case cfg.timeout <= 0:
		return nil, usagef("bench: --timeout must be positive, got %s", cfg.timeout)
	case cfg.flushDelay < 0 || cfg.flushDelay > time.Second:
		return nil, usagef("bench: --flush-delay must be between 0 and 1s, got %s", cfg.flushDelay)
	}
	cfg.limit = floodgate.Limit{Name: "bench", Algorithm: a, Rate: *rate, Per: *per, Burst: *burst,
		Max: *limit, Window: *window, LeaseTTL: *leaseTTL}
	if a.Family() == floodgate.FamilyQuota {
		if cfg.limit.Period, err = floodgate.ParsePeriod(*period); err != nil {
			return nil, usagef("bench: --period: %v", err)
		}
	}
	if err := cfg.limit.Validate(); err != nil {
		return nil, usagef("bench: %v", err)
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
	Errors          int64   `json:"errors"`
	P50us           float64 `json:"p50_us"`
	P99us           float64 `json:"p99_us"`
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseBenchFlags(args, stdout)
	if err != nil || cfg == nil {
		return err
	}
	rule, err := limiter.NewRule(cfg.limit, floodgate.FailOpen, false)
	if err != nil {
		return usagef("bench: %v", err)
	}
	var store limiter.Store
	if cfg.store == "memory" {
		ms, err := memstore.New(memstore.Options{})
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		defer ms.Close()
		store = ms
	} else {
		if _, err := redisstore.ParseURL(cfg.store); err != nil {
			return usagef("bench: --store: %v", err)
		}
		opts := redisstore.Options{URL: cfg.store, Prefix: cfg.prefix, MaxFlushDelay: cfg.flushDelay}
		if cfg.flushDelay == 0 {
			opts.MaxFlushDelay = -1 // write at once
		}
		rs, err := redisstore.New(opts)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		defer rs.Close()
		store = rs
	}
	var progress io.Writer
	if !cfg.json && isTerminal(stdout) {
		progress = stdout
	}
	res := bench(ctx, cfg, rule, store, progress)
	if cfg.json {
		return json.NewEncoder(stdout).Encode(res)
	}
	fmt.Fprintf(stdout, "store        %s\nalgorithm    %s\nkeys         %d\nconcurrency  %d\n",
		redactStore(cfg.store), cfg.limit.Algorithm, cfg.keys, cfg.concurrency)
	fmt.Fprintf(stdout, "decisions/s  %.0f\nallowed      %d\ndenied       %d\nerrors       %d\np50          %.1f µs\np99          %.1f µs\n",
		res.DecisionsPerSec, res.Allowed, res.Denied, res.Errors, res.P50us, res.P99us)
	if res.Errors > 0 && res.Allowed+res.Denied == 0 {
		return &exitError{code: 1, err: errors.New("bench: every decision failed")}
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

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// worker holds one worker's counts and latencies; only its own goroutine
// writes them, so the hot path takes no lock. The padding keeps workers'
// counters on separate cache lines.
type worker struct {
	allowed, denied, errors atomic.Int64
	hist                    histogram
	_                       [64]byte
}

// bench runs the workers until the duration passes or ctx ends.
func bench(ctx context.Context, cfg *benchConfig, rule *limiter.Rule, store limiter.Store, progress io.Writer) benchResult {
	ctx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	keys := make([]string, cfg.keys)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	ws := make([]worker, cfg.concurrency)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ws[i].run(ctx, cfg, rule, store, keys, uint64(i))
		}()
	}
	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		if progress == nil {
			return
		}
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stopProgress:
				fmt.Fprint(progress, "\r\033[K")
				return
			case <-tick.C:
				var a, d, e int64
				for i := range ws {
					a += ws[i].allowed.Load()
					d += ws[i].denied.Load()
					e += ws[i].errors.Load()
				}
				el := time.Since(start)
				fmt.Fprintf(progress, "\r%5.1fs  %10.0f decisions/s  allowed %d  denied %d  errors %d ",
					el.Seconds(), float64(a+d+e)/el.Seconds(), a, d, e)
			}
		}
	}()
	wg.Wait()
	elapsed := time.Since(start)
	close(stopProgress)
	<-progressDone

	var res benchResult
	var h histogram
	for i := range ws {
		res.Allowed += ws[i].allowed.Load()
		res.Denied += ws[i].denied.Load()
		res.Errors += ws[i].errors.Load()
		h.merge(&ws[i].hist)
	}
	res.DecisionsPerSec = float64(res.Allowed+res.Denied+res.Errors) / elapsed.Seconds()
	res.P50us = h.quantile(0.50) / 1e3
	res.P99us = h.quantile(0.99) / 1e3
	return res
}

// run is one worker's loop: one decision at a time until ctx ends.
func (w *worker) run(ctx context.Context, cfg *benchConfig, rule *limiter.Rule, store limiter.Store, keys []string, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	hits := []limiter.Hit{{Rule: rule, Cost: 1}}
	out := make([]floodgate.Decision, 1)
	conc := cfg.limit.Algorithm.Kind() == floodgate.KindConcurrency
	var lease uint64
	for ctx.Err() == nil {
		hits[0].Key = keys[rng.IntN(len(keys))]
		if conc {
			lease = seed<<40 | (lease+1)&(1<<40-1)
			hits[0].Lease = lease
		}
		dctx, cancel := context.WithTimeout(ctx, cfg.timeout)
		t0 := time.Now()
		err := store.Apply(dctx, limiter.Charge, hits, out)
		lat := time.Since(t0)
		cancel()
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return // the run ended during the call: not an error of the store
			}
			w.errors.Add(1)
		case out[0].Allowed:
			w.allowed.Add(1)
			if conc {
				rctx, rcancel := context.WithTimeout(ctx, cfg.timeout)
				store.Apply(rctx, limiter.Release, hits, out)
				rcancel()
			}
		default:
			w.denied.Add(1)
		}
		w.hist.add(lat)
	}
}

// histogram counts latencies in log-linear buckets: 16 per power of two,
// so a quantile is within about 4% of the true value.
type histogram struct {
	counts [64 * 16]uint64
	n      uint64
}

func bucketOf(ns int64) int {
	if ns < 16 {
		return int(max(ns, 0))
	}
	e := bits.Len64(uint64(ns)) - 1 // 2^e ≤ ns < 2^(e+1), e ≥ 4
	m := int(uint64(ns)>>(e-4)) & 15
	return (e-3)*16 + m
}

// bucketMid returns the middle of bucket b in ns.
func bucketMid(b int) float64 {
	if b < 16 {
		return float64(b)
	}
	e := b/16 + 3
	m := b % 16
	lo := float64(uint64(16+m) << (e - 4))
	return lo + float64(uint64(1)<<(e-4))/2
}

func (h *histogram) add(d time.Duration) {
	h.counts[bucketOf(int64(d))]++
	h.n++
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// quantile returns the q-quantile in ns (0 when empty).
func (h *histogram) quantile(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank < 1 {
		rank = 1
	}
	var acc uint64
	for b, c := range h.counts {
		acc += c
		if acc >= rank {
			return bucketMid(b)
		}
	}
	return bucketMid(len(h.counts) - 1)
}
