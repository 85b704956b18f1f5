// Command benchoverload measures floodgate serve's overload control against
// an upstream whose capacity is known and can change, as issue 22 asks:
// goodput, the latency of admitted requests, refusals by tier and tenant
// and the limit over time, with no limit, a fixed limit and the adaptive
// limit, in one run. scripts/bench-overload.sh builds floodgate and runs it.
//
// The upstream runs in this process on loopback: workers that each serve
// one request at a time by sleeping for the service time, behind a bounded
// FIFO queue, so that its capacity is workers ÷ service time whatever the
// CPU does (the machine may be busy), and its latency rises when more
// arrives. The load is open-loop: requests leave at fixed instants,
// whatever became of the ones before, with a tenant (X-Tenant) and a tier
// (X-Priority) each, through one floodgate serve per case and
// configuration, started from the given binary on free loopback ports.
//
//	benchoverload -floodgate ./floodgate -svg docs/img
//	benchoverload -floodgate ./floodgate -quick -configs none
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "benchoverload:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	floodgate string
	svgDir    string
	quick     bool

	workers    int
	service    time.Duration
	queue      int
	timeout    time.Duration
	inflight   int
	mix        [numTiers]float64
	tenants    int
	seed       uint64
	cases      map[string]bool
	configs    []string
	loads      []float64
	duration   time.Duration
	warmup     time.Duration
	stepLoad   float64
	step       [3]time.Duration
	heavy      float64
	calibrate  time.Duration
	overload   overloadSettings
	tol, floor float64
}

func parseOptions(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("benchoverload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.floodgate, "floodgate", "", "the floodgate binary (required)")
	fs.StringVar(&o.svgDir, "svg", "", "write the pictures (overload-step.svg, overload-3x.svg) into this directory")
	fs.BoolVar(&o.quick, "quick", false, "short cases (a check of the setup, not a measurement)")
	fs.IntVar(&o.workers, "workers", 16, "the upstream's workers")
	fs.DurationVar(&o.service, "service", 50*time.Millisecond, "the upstream's service time (a sleep)")
	fs.IntVar(&o.queue, "upstream-queue", 4096, "the upstream's queue")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Second, "the client's timeout per request")
	fs.IntVar(&o.inflight, "max-inflight", 8000, "requests in flight past which the generator sends no more (and counts them as not sent)")
	mix := fs.String("mix", "20,20,60", "the tiers' shares: critical, default, sheddable")
	fs.IntVar(&o.tenants, "tenants", 4, "tenants in the load and step cases")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the tier draws")
	cases := fs.String("cases", "load,step,tenant", "the cases: load (each of -loads), step, tenant")
	configs := fs.String("configs", "none,fixed,adaptive", "the configurations each case runs with")
	loads := fs.String("loads", "0.5,1,2,3", "the load cases' offered load, in multiples of capacity")
	fs.DurationVar(&o.duration, "duration", 15*time.Second, "each load case's and tenant case's length")
	fs.DurationVar(&o.warmup, "warmup", 3*time.Second, "the start of a load or tenant case left out of its totals")
	fs.Float64Var(&o.stepLoad, "step-load", 1.5, "the step case's offered load, in multiples of the full capacity")
	step := fs.String("step", "15s,20s,15s", "the step case: full capacity, half, full again")
	fs.Float64Var(&o.heavy, "heavy", 20, "the heavy tenant's offered load, in multiples of its share")
	fs.DurationVar(&o.calibrate, "calibrate", 5*time.Second, "the no-load measurement's length")
	fs.IntVar(&o.overload.limit, "limit", 0, "the fixed limit (default: -workers, the upstream's true capacity in flight)")
	fs.IntVar(&o.overload.min, "adaptive-min", 2, "the adaptive limit's minimum")
	fs.IntVar(&o.overload.max, "adaptive-max", 256, "the adaptive limit's maximum")
	fs.IntVar(&o.overload.initial, "adaptive-initial", 8, "the adaptive limit's initial value")
	fs.IntVar(&o.overload.queueSize, "queue-size", 64, "the gateway's overload queue")
	fs.IntVar(&o.overload.queuePerTenant, "queue-per-tenant", 16, "the gateway's overload queue per tenant")
	fs.DurationVar(&o.overload.queueWait, "queue-wait", 50*time.Millisecond, "the longest wait in the gateway's overload queue")
	fs.Float64Var(&o.tol, "tolerance", 0.2, "the band around the best limit the adaptive limit must settle in after a step")
	fs.Float64Var(&o.floor, "floor", 0.7, "the fraction of the best limit the adaptive limit must not dip below on a steady upstream")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.floodgate == "" {
		return nil, errors.New("-floodgate is required")
	}
	if o.workers < 2 || o.service <= 0 || o.timeout <= 0 || o.tenants < 1 || o.inflight < 1 {
		return nil, errors.New("-workers must be at least 2; -service, -timeout, -tenants and -max-inflight positive")
	}
	if o.overload.limit == 0 {
		o.overload.limit = o.workers
	}
	f, err := floats(*mix)
	if err != nil || len(f) != numTiers || f[0]+f[1]+f[2] <= 0 {
		return nil, fmt.Errorf("-mix: want three shares, got %q", *mix)
	}
	copy(o.mix[:], f)
	if o.loads, err = floats(*loads); err != nil {
		return nil, fmt.Errorf("-loads: %w", err)
	}
	o.cases = map[string]bool{}
	for _, c := range strings.Split(*cases, ",") {
		switch c = strings.TrimSpace(c); c {
		case "load", "step", "tenant":
			o.cases[c] = true
		case "":
		default:
			return nil, fmt.Errorf("-cases: unknown case %q", c)
		}
	}
	for _, c := range strings.Split(*configs, ",") {
		switch c = strings.TrimSpace(c); c {
		case configNone, configFixed, configAdaptive:
			o.configs = append(o.configs, c)
		default:
			return nil, fmt.Errorf("-configs: unknown configuration %q", c)
		}
	}
	parts := strings.Split(*step, ",")
	if len(parts) != 3 {
		return nil, fmt.Errorf("-step: want three durations, got %q", *step)
	}
	for i, p := range parts {
		if o.step[i], err = time.ParseDuration(strings.TrimSpace(p)); err != nil || o.step[i] <= 0 {
			return nil, fmt.Errorf("-step: %q is not a positive duration", p)
		}
	}
	if o.quick {
		o.duration, o.warmup, o.calibrate = 4*time.Second, time.Second, 2*time.Second
		o.step = [3]time.Duration{3 * time.Second, 4 * time.Second, 3 * time.Second}
	}
	return o, nil
}

func floats(s string) ([]float64, error) {
	var out []float64
	for _, p := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || v < 0 || math.IsInf(v, 0) {
			return nil, fmt.Errorf("%q is not a number", p)
		}
		out = append(out, v)
	}
	return out, nil
}

// buildCases lays out the cases for a capacity of capa requests a second.
func (o *options) buildCases(capa float64) []*caseSpec {
	var out []*caseSpec
	tenantNames := make([]string, o.tenants)
	all := make([]int, o.tenants)
	for i := range tenantNames {
		tenantNames[i] = fmt.Sprintf("t%d", i+1)
		all[i] = i
	}
	if o.cases["load"] {
		for _, k := range o.loads {
			out = append(out, &caseSpec{
				name:     strconv.FormatFloat(k, 'f', -1, 64) + "x",
				duration: o.duration,
				warmup:   o.warmup,
				tenants:  tenantNames,
				streams:  []stream{{rate: k * capa, tenants: all, mix: o.mix}},
				heavy:    -1,
			})
		}
	}
	if o.cases["step"] {
		half := o.workers / 2
		out = append(out, &caseSpec{
			name:     "step",
			duration: o.step[0] + o.step[1] + o.step[2],
			tenants:  tenantNames,
			streams:  []stream{{rate: o.stepLoad * capa, tenants: all, mix: o.mix}},
			schedule: []capStep{{0, o.workers}, {o.step[0], half}, {o.step[0] + o.step[1], o.workers}},
			heavy:    -1,
		})
	}
	if o.cases["tenant"] {
		// Four tenants share the capacity: three offer their share, in
		// the default tier; alone, and beside a fourth offering -heavy
		// times its share.
		share := capa / 4
		names := []string{"t1", "t2", "t3", "heavy"}
		others := stream{rate: 3 * share, tenants: []int{0, 1, 2}, mix: [numTiers]float64{0, 1, 0}}
		out = append(out,
			&caseSpec{name: "tenant-alone", duration: o.duration, warmup: o.warmup, tenants: names,
				streams: []stream{others}, heavy: 3},
			&caseSpec{name: "tenant-heavy", duration: o.duration, warmup: o.warmup, tenants: names,
				streams: []stream{others, {rate: o.heavy * share, tenants: []int{3}, mix: [numTiers]float64{0, 1, 0}}}, heavy: 3},
		)
	}
	return out
}

// bench is one run: the upstream, the client and the work directory.
type bench struct {
	o      *options
	up     *upstream
	gen    *generator
	scrape *http.Client
	dir    string
	log    io.Writer
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "benchoverload")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	up, err := startUpstream(o.workers, o.service, o.queue)
	if err != nil {
		return err
	}
	defer up.close()
	client := newClient()
	defer client.CloseIdleConnections()
	b := &bench{
		o:      o,
		up:     up,
		gen:    &generator{client: client, timeout: o.timeout, maxInflight: int64(o.inflight)},
		scrape: &http.Client{Timeout: 2 * time.Second},
		dir:    dir,
		log:    stderr,
	}
	res := &results{tol: o.tol, floor: o.floor, settleMax: 10 * time.Second, warmup: o.warmup}
	if res.cal, err = b.calibrate(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "benchoverload: capacity %.0f/s (%d workers, %.1f ms each), no-load p99 %.1f ms\n",
		res.cal.capacity(), o.workers, ms(res.cal.meanService), ms(res.cal.p99))
	for _, spec := range o.buildCases(res.cal.capacity()) {
		for _, cfg := range o.configs {
			fmt.Fprintf(stderr, "benchoverload: %s, %s: %.0f requests/s for %s\n", spec.name, cfg, spec.offered(), spec.duration)
			c, err := b.runCase(ctx, spec, cfg)
			if err != nil {
				return fmt.Errorf("%s, %s: %w", spec.name, cfg, err)
			}
			res.cases = append(res.cases, c)
		}
	}
	res.writeReport(stdout)
	if o.svgDir != "" {
		if err := os.MkdirAll(o.svgDir, 0o755); err != nil {
			return err
		}
		for _, p := range []struct{ name, file, title string }{
			{"step", "overload-step.svg", fmt.Sprintf("Step: %.3gx the capacity offered, the upstream's workers halved from %s to %s",
				o.stepLoad, o.step[0], o.step[0]+o.step[1])},
			{"3x", "overload-3x.svg", "3x the capacity offered"},
		} {
			f := res.caseFigure(p.name, p.title)
			if f == nil {
				continue
			}
			if err := writeFigure(filepath.Join(o.svgDir, p.file), f); err != nil {
				return err
			}
		}
	}
	return nil
}

func writeFigure(path string, f *figure) error {
	file, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := f.writeSVG(file); err != nil {
		file.Close()
		return err
	}
	return file.Close()
}

// calibrate measures the upstream's service time and the latency through
// a gateway with no overload block at a fifth of the nominal capacity.
func (b *bench) calibrate(ctx context.Context) (calibration, error) {
	cal := calibration{workers: b.o.workers, service: b.o.service}
	nominal := float64(b.o.workers) / b.o.service.Seconds()
	spec := &caseSpec{
		name: "no-load", duration: b.o.calibrate, tenants: []string{"t1"},
		streams: []stream{{rate: nominal / 5, tenants: []int{0}, mix: b.o.mix}}, heavy: -1,
	}
	c, err := b.runCase(ctx, spec, configNone)
	if err != nil {
		return cal, fmt.Errorf("no-load: %w", err)
	}
	cal.meanService = b.up.meanService()
	s := summarize(c.recs, 0, spec.duration, time.Hour, 1)
	if s.ok != s.sent || s.sent == 0 {
		return cal, fmt.Errorf("no-load: %d of %d requests answered 2xx", s.ok, s.sent)
	}
	cal.p50, cal.p99, cal.samples = s.p50, s.p99, s.sent
	return cal, nil
}

// runCase runs spec through a fresh floodgate serve with configuration
// cfg, changing the upstream's workers as its schedule says and scraping
// the overload gauges every 250 ms.
func (b *bench) runCase(ctx context.Context, spec *caseSpec, cfg string) (*caseResult, error) {
	b.up.setWorkers(b.o.workers)
	idleCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := b.up.idle(idleCtx)
	cancel()
	if err != nil {
		return nil, err
	}
	path, err := writePolicy(b.dir, spec.name+"-"+cfg, policy(cfg, b.up.URL(), b.o.overload))
	if err != nil {
		return nil, err
	}
	gw, err := startGateway(ctx, b.o.floodgate, path)
	if err != nil {
		return nil, err
	}
	defer gw.stop()

	res := &caseResult{spec: spec, config: cfg}
	start := time.Now()
	b.up.peak()
	done := make(chan struct{})
	scraped := make(chan []sample)
	go func() {
		var out []sample
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				scraped <- out
				return
			case <-tick.C:
			}
			smp := sample{at: time.Since(start), limit: nan, inflight: nan, queued: nan, upstream: b.up.peak()}
			if m, err := scrape(b.scrape, gw.admin, "floodgate_overload_"); err == nil {
				smp.limit = gauge(m, "floodgate_overload_limit")
				smp.inflight = gauge(m, "floodgate_overload_inflight")
				smp.queued = gauge(m, "floodgate_overload_queued")
			}
			out = append(out, smp)
		}
	}()
	for _, st := range spec.schedule {
		if st.at == 0 {
			b.up.setWorkers(st.workers)
			continue
		}
		t := time.AfterFunc(st.at, func() { b.up.setWorkers(st.workers) })
		defer t.Stop()
	}
	streams := b.gen.run(ctx, gw.url+"/work", spec.tenants, spec.streams, spec.duration, b.o.seed)
	close(done)
	res.lag = time.Duration(b.gen.lag.Load())
	res.samples = <-scraped
	for _, s := range streams {
		res.recs = append(res.recs, s...)
	}
	if m, err := scrape(b.scrape, gw.admin, "floodgate_overload_shed_total"); err == nil {
		res.shedBy = m
	}
	b.gen.client.CloseIdleConnections()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return res, nil
}
