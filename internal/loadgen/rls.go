package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate/floodgate/internal/cli"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/rls"
	"github.com/floodgate/floodgate/store"
)

const rlsBenchUsage = `usage: floodgate rls-bench serve [--addr A] [--store memory|URL] [--config PATH]
                                 [--flush-delay D] [--pipeline-multiplex N] [--compat]
       floodgate rls-bench bare  [--addr A]
       floodgate rls-bench load  --target HOST:PORT [--concurrency N] [--keys N]
                                 [--duration D] [--warmup D] [--conns N] [--pid PID] [--json]

serve runs Floodgate's RLS on --addr (default 127.0.0.1:0) over the embedded
store or Redis, with --config (envoyproxy/ratelimit files) or a built-in
domain "bench" whose "user" descriptor allows 4294967295 requests a second;
--compat answers in compatibility mode (as envoyproxy/ratelimit).
bare runs a gRPC RateLimitService that answers OK without doing anything: the
floor for gRPC on this machine. Both print "listening HOST:PORT" and stop on
SIGINT/SIGTERM; serve then prints its decision counts to stderr.

load sends ShouldRateLimit (domain bench, descriptor user=<key>) from
--concurrency callers over --conns connections for --warmup and then
--duration, and prints decisions/s, p50 and p99 of the measured part; with
--pid it also reads that process's CPU time (utime+stime from
/proc/PID/stat) and prints the CPU per decision.
`

const rlsBenchConfig = `
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 4294967295, on_failure: deny}
`

// RLS is floodgate rls-bench: Floodgate's RLS (serve) or a gRPC service
// that does nothing (bare) to load, and a load generator for either
// (load).
func RLS(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, rlsBenchUsage)
		return cli.Usagef("rls-bench: want serve, bare or load")
	}
	switch args[0] {
	case "serve":
		return rlsbServe(ctx, args[1:], stdout, stderr)
	case "bare":
		return rlsbBare(ctx, args[1:], stdout)
	case "load":
		return rlsbLoad(ctx, args[1:], stdout)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, rlsBenchUsage)
		return nil
	}
	return cli.Usagef("rls-bench: unknown mode %q (want serve, bare or load)", args[0])
}

func rlsbFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("rls-bench "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

func rlsbParse(fs *flag.FlagSet, args []string, stdout io.Writer) (bool, error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, rlsBenchUsage)
			return true, nil
		}
		return false, cli.Usagef("rls-bench: %v", err)
	}
	if fs.NArg() > 0 {
		return false, cli.Usagef("rls-bench: unexpected argument %q", fs.Arg(0))
	}
	return false, nil
}

func rlsbServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := rlsbFlags("serve")
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	storeURL := fs.String("store", "memory", "memory, or a Redis URL")
	cfgPath := fs.String("config", "", "envoyproxy/ratelimit file or directory (default: built-in bench domain)")
	timeout := fs.Duration("store-timeout", 0, "deadline of one store call (0: the engine's default)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	workers := fs.Int("stream-workers", 0, "gRPC stream workers (0: the service's default, -1: none)")
	flushDelay := fs.Duration("flush-delay", 0, "Redis: how long the pipeline may gather commands before writing (0: the store's default, negative: none)")
	multiplex := fs.Int("pipeline-multiplex", 0, "Redis: spread the pipeline over 2^n connections (0: the store's default)")
	compat := fs.Bool("compat", false, "answer in compatibility mode (as envoyproxy/ratelimit)")
	if help, err := rlsbParse(fs, args, stdout); help || err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	var cfg *rls.Config
	var err error
	if *cfgPath != "" {
		cfg, err = rls.Load([]string{*cfgPath}, rls.LoadOptions{Compat: *compat})
	} else {
		cfg, err = rls.ParseWith("built-in", []byte(rlsBenchConfig), rls.LoadOptions{Compat: *compat})
	}
	if err != nil {
		return err
	}
	o := store.Options{Prefix: "rlsbench:", MaxFlushDelay: *flushDelay, PipelineMultiplex: *multiplex}
	st, closer, err := store.Open(ctx, *storeURL, o)
	if err != nil {
		return err
	}
	defer closer.Close()
	var decisions, over, degraded atomic.Int64
	count := limiter.ObserverFunc(func(req *limiter.Request, res *limiter.Result) {
		decisions.Add(1)
		if !res.Allowed {
			over.Add(1)
		}
		if res.Degraded != limiter.NotDegraded {
			degraded.Add(1)
		}
	})
	svc := rls.New(limiter.New(st, limiter.Options{Timeout: *timeout, Observer: count}), cfg, rls.Options{})
	srv, err := rls.NewServer(svc, rls.ServerOptions{GracePeriod: 2 * time.Second, StreamWorkers: *workers})
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("rls-bench: %w", err)
	}
	fmt.Fprintf(stdout, "listening %s\n", lis.Addr())
	err = srv.Serve(ctx, lis)
	fmt.Fprintf(stderr, "rls-bench serve: decisions=%d over_limit=%d degraded=%d\n", decisions.Load(), over.Load(), degraded.Load())
	return err
}

// rlsbBareServer answers OK to everything, doing nothing else.
type rlsbBareServer struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

var rlsbOK = &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}

func (rlsbBareServer) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return rlsbOK, nil
}

func rlsbBare(ctx context.Context, args []string, stdout io.Writer) error {
	fs := rlsbFlags("bare")
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	if help, err := rlsbParse(fs, args, stdout); help || err != nil {
		return err
	}
	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("rls-bench: %w", err)
	}
	g := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(g, rlsbBareServer{})
	fmt.Fprintf(stdout, "listening %s\n", lis.Addr())
	errc := make(chan error, 1)
	go func() { errc <- g.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	g.Stop()
	return nil
}

// RLSResult is what load prints with --json.
type RLSResult struct {
	Decisions    int64   `json:"decisions"`
	Errors       int64   `json:"errors"`
	OverLimit    int64   `json:"over_limit"`
	Seconds      float64 `json:"seconds"`
	PerSec       float64 `json:"decisions_per_sec"`
	P50us        float64 `json:"p50_us"`
	P99us        float64 `json:"p99_us"`
	CPUus        float64 `json:"cpu_us_per_decision,omitempty"`
	CPUSeconds   float64 `json:"cpu_seconds,omitempty"`
	ExtraCPUus   float64 `json:"extra_cpu_us_per_decision,omitempty"`
	Concurrency  int     `json:"concurrency"`
	Keys         int     `json:"keys"`
	Connections  int     `json:"connections"`
	MeasuredPIDs []int   `json:"pids,omitempty"`
}

func rlsbLoad(ctx context.Context, args []string, stdout io.Writer) error {
	fs := rlsbFlags("load")
	target := fs.String("target", "", "HOST:PORT of the service")
	conc := fs.Int("concurrency", 50, "concurrent callers")
	keys := fs.Int("keys", 1, "distinct descriptor values, cycled through")
	duration := fs.Duration("duration", 5*time.Second, "measured time")
	warmup := fs.Duration("warmup", time.Second, "unmeasured time first")
	conns := fs.Int("conns", 4, "gRPC connections shared by the callers")
	pid := fs.Int("pid", 0, "process whose CPU time to measure (the service)")
	extraPID := fs.Int("extra-pid", 0, "another process whose CPU to report (Redis)")
	asJSON := fs.Bool("json", false, "print one JSON object")
	if help, err := rlsbParse(fs, args, stdout); help || err != nil {
		return err
	}
	if *target == "" {
		return cli.Usagef("rls-bench load: --target is required")
	}
	if *conc < 1 || *keys < 1 || *conns < 1 || *duration <= 0 || *duration > 10*time.Minute || *warmup < 0 {
		return cli.Usagef("rls-bench load: --concurrency, --keys and --conns must be at least 1, --duration in (0, 10m]")
	}
	clients := make([]rlsv3.RateLimitServiceClient, *conns)
	for i := range clients {
		cc, err := grpc.NewClient(*target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return fmt.Errorf("rls-bench: %w", err)
		}
		defer cc.Close()
		clients[i] = rlsv3.NewRateLimitServiceClient(cc)
	}
	// Requests are built up front so the load client spends its time on
	// gRPC, not on building messages.
	reqs := make([]*rlsv3.RateLimitRequest, *keys)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{{
			Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u" + strconv.Itoa(i)}},
		}}}
	}
	var measuring atomic.Bool
	var stop atomic.Bool
	var next atomic.Uint64
	var errs, overs atomic.Int64
	lat := make([][]time.Duration, *conc)
	var wg sync.WaitGroup
	for w := 0; w < *conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[w%len(clients)]
			buf := make([]time.Duration, 0, 1<<16)
			for !stop.Load() {
				req := reqs[next.Add(1)%uint64(len(reqs))]
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				t0 := time.Now()
				resp, err := c.ShouldRateLimit(rctx, req)
				d := time.Since(t0)
				cancel()
				if !measuring.Load() {
					continue
				}
				if err != nil {
					errs.Add(1)
					if ctx.Err() != nil {
						break
					}
					continue
				}
				if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
					overs.Add(1)
				}
				buf = append(buf, d)
			}
			lat[w] = buf
		}()
	}
	sleep := func(d time.Duration) {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	sleep(*warmup)
	cpu0, err0 := rlsbCPU(*pid)
	xcpu0, _ := rlsbCPU(*extraPID)
	start := time.Now()
	measuring.Store(true)
	sleep(*duration)
	measuring.Store(false)
	elapsed := time.Since(start)
	cpu1, err1 := rlsbCPU(*pid)
	xcpu1, _ := rlsbCPU(*extraPID)
	stop.Store(true)
	wg.Wait()
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	res := RLSResult{
		Decisions: int64(len(all)), Errors: errs.Load(), OverLimit: overs.Load(), Seconds: elapsed.Seconds(),
		Concurrency: *conc, Keys: *keys, Connections: *conns,
	}
	res.PerSec = float64(res.Decisions) / elapsed.Seconds()
	if len(all) > 0 {
		res.P50us = float64(all[len(all)/2]) / 1e3
		res.P99us = float64(all[len(all)*99/100]) / 1e3
	}
	if *pid > 0 && err0 == nil && err1 == nil && res.Decisions > 0 {
		res.CPUSeconds = (cpu1 - cpu0).Seconds()
		res.CPUus = float64(cpu1-cpu0) / 1e3 / float64(res.Decisions)
		res.MeasuredPIDs = append(res.MeasuredPIDs, *pid)
	}
	if *extraPID > 0 && res.Decisions > 0 {
		res.ExtraCPUus = float64(xcpu1-xcpu0) / 1e3 / float64(res.Decisions)
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(&res)
	}
	fmt.Fprintf(stdout, "decisions/s %.0f  p50 %.0fµs  p99 %.0fµs  errors %d  over_limit %d",
		res.PerSec, res.P50us, res.P99us, res.Errors, res.OverLimit)
	if res.CPUus > 0 {
		fmt.Fprintf(stdout, "  service CPU %.1fµs/decision", res.CPUus)
	}
	fmt.Fprintln(stdout)
	return nil
}

// rlsbCPU reads utime+stime of a process from /proc/PID/stat (in clock
// ticks of 1/100 s, Linux's USER_HZ).
func rlsbCPU(pid int) (time.Duration, error) {
	if pid <= 0 {
		return 0, errors.New("no pid")
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// count fields after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("rls-bench: malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	// After ')': field 3 is f[0]; utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("rls-bench: short /proc/%d/stat", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("rls-bench: bad /proc/%d/stat", pid)
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}
