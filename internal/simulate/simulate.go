package simulate

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/cli"
)

const simulateUsage = `usage: floodgate simulate --algorithm NAME [limit flags] (--arrivals SPEC | --arrivals-file PATH) [--json]

Replays a request pattern through one algorithm, exactly as the library
decides it, and prints every decision and a summary.

Algorithms and their flags:
  token_bucket, gcra, leaky_bucket   --rate N --per DURATION --burst N
  leaky_queue                        --rate N --per DURATION --burst Q [--delay D | --nodelay]
  fixed_window, sliding_log,
  sliding_window                     --limit N --window DURATION
  concurrency                        --limit N [--hold DURATION] [--lease-ttl DURATION]
  quota                              --limit N --period day|week|month --start RFC3339
                                     [--time-zone ZONE] [--anchor-day N] [--offset N]

Several instances (seed 002's split_limit and wrongly_denied):
  --instances N   arrival i goes to instance i mod N (or the one named by
                  AT...@INSTANCE); each instance enforces
                  split_limit(limit, N) = limit / N on its own (fixed_window,
                  sliding_log, sliding_window, quota). The summary compares
                  with one shared limit and counts the requests wrongly denied.

Arrivals:
  --arrivals 'AT[*COUNT][:COST][@INSTANCE],...'
                                      AT is a Go duration (0.5s) or plain seconds (0.5):
                                      '0s*12,0.5s*5' or '0:8,2:7,2:6'
  --arrivals-file PATH                one 'SECONDS [COST]' per line ('-' reads stdin)
Times are offsets from --start (default: the Unix epoch) and must not decrease;
windows are aligned to the Unix epoch, quota periods to the calendar.

Flags:
`

// maxInstances bounds --instances: each instance holds its own state,
// made up front, so that a typo like 1000000000 fails cleanly instead of
// exhausting memory.
const maxInstances = 100_000

// simulateConfig is what the flags of floodgate simulate describe.
type simulateConfig struct {
	limit        floodgate.Limit
	start        int64
	hold         time.Duration
	instances    int
	json         bool
	arrivalsSpec string
	arrivalsFile string
}

// Run is floodgate simulate: it replays the arrivals of args through one
// algorithm and writes every decision and a summary to stdout.
func Run(_ context.Context, args []string, stdout, stderr io.Writer) error {
	return run(args, os.Stdin, stdout)
}

// run is Run reading --arrivals-file - from stdin. It replays the
// arrivals twice and holds none of them: the first pass finds the
// summary (which the JSON writes first) and any error, so that a run that
// fails writes nothing; the second writes each decision as it is made.
func run(args []string, stdin io.Reader, stdout io.Writer) error {
	cfg, err := parseSimulateFlags(args, stdout)
	if err != nil || cfg == nil {
		return err
	}
	src := &source{name: cfg.arrivalsFile}
	defer src.close()
	if cfg.arrivalsFile == "" {
		if src.bursts, err = parseArrivals(cfg.arrivalsSpec); err != nil {
			return cli.Usagef("simulate: --arrivals: %v", err)
		}
	} else if cfg.arrivalsFile == "-" {
		src.r = stdin
	} else {
		f, err := os.Open(cfg.arrivalsFile)
		if err != nil {
			return cli.Usagef("simulate: --arrivals-file: %v", err)
		}
		src.file = f
		src.r = f
	}
	res, err := simulate(cfg, src, nil)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(stdout, 64*1024)
	rep := &report{w: w, cfg: cfg, res: res, queue: cfg.limit.Algorithm.Kind() == floodgate.KindQueue}
	if cfg.json {
		rep.jsonHead()
		_, err = simulate(cfg, src, rep.jsonRow)
		rep.jsonTail()
	} else {
		rep.tableHead()
		_, err = simulate(cfg, src, rep.tableRow)
		rep.tableTail()
	}
	if err != nil {
		return err
	}
	return w.Flush()
}

// source is where a run's arrivals come from: the bursts of --arrivals, or
// the lines of --arrivals-file, read once per pass. A file that cannot be
// read again from where it started (standard input from a pipe) is copied
// to a temporary file on the first pass, which the second reads.
type source struct {
	bursts []burst
	name   string    // --arrivals-file
	r      io.Reader // the file, or standard input
	file   *os.File  // the file opened, closed at the end
	pos    int64     // where the first pass started, when r can seek back
	spool  *os.File  // the copy of r, when it cannot
	spoolW *bufio.Writer
	passes int
	count  int // the arrivals of the first pass
}

// each hands every arrival to fn in order, with its index. An error of fn
// stops the pass and is returned as it is; an unreadable line is an error
// naming the file, as it would be without fn's: the first pass reads the
// whole file before it returns fn's error.
func (s *source) each(fn func(i int, a arrival) error) error {
	s.passes++
	if s.name == "" {
		i := 0
		for _, b := range s.bursts {
			for range b.count {
				if err := fn(i, b.arrival); err != nil {
					return err
				}
				i++
			}
		}
		return nil
	}
	r, err := s.rewind()
	if err != nil {
		return fmt.Errorf("simulate: --arrivals-file %s: %w", s.name, err)
	}
	i := 0
	var fnErr error
	err = scanArrivals(r, func(a arrival) error {
		if fnErr == nil {
			fnErr = fn(i, a)
			if fnErr != nil && s.passes > 1 {
				return fnErr
			}
		}
		i++
		return nil
	})
	switch {
	case s.passes > 1 && fnErr != nil:
		return fnErr
	case err != nil:
		return cli.Usagef("simulate: --arrivals-file %s: %v", s.name, err)
	case fnErr != nil:
		return fnErr
	case s.passes == 1:
		s.count = i
	case i != s.count:
		return fmt.Errorf("simulate: --arrivals-file %s: changed while it was read (%d arrivals, then %d)", s.name, s.count, i)
	}
	return nil
}

// rewind is the reader of the next pass over the file.
func (s *source) rewind() (io.Reader, error) {
	if s.passes == 1 {
		if sk, ok := s.r.(io.Seeker); ok {
			if pos, err := sk.Seek(0, io.SeekCurrent); err == nil {
				s.pos = pos
				return s.r, nil
			}
		}
		spool, err := os.CreateTemp("", "floodgate-simulate-*")
		if err != nil {
			return nil, err
		}
		s.spool, s.spoolW = spool, bufio.NewWriterSize(spool, 64*1024)
		return io.TeeReader(s.r, s.spoolW), nil
	}
	if s.spool == nil {
		_, err := s.r.(io.Seeker).Seek(s.pos, io.SeekStart)
		return s.r, err
	}
	if err := s.spoolW.Flush(); err != nil {
		return nil, err
	}
	_, err := s.spool.Seek(0, io.SeekStart)
	return s.spool, err
}

// close closes the file and removes the copy of standard input.
func (s *source) close() {
	if s.file != nil {
		s.file.Close()
	}
	if s.spool != nil {
		s.spool.Close()
		os.Remove(s.spool.Name())
	}
}

// durationFlag accepts a Go duration or plain seconds.
func durationFlag(fs *flag.FlagSet, p *time.Duration, name, usage string) {
	fs.Func(name, usage, func(s string) error {
		ns, err := parseOffset(strings.TrimSpace(s))
		if err != nil {
			return err
		}
		*p = time.Duration(ns)
		return nil
	})
}

// parseSimulateFlags turns the command line into a configuration. It
// returns nil, nil after printing the help.
func parseSimulateFlags(args []string, stdout io.Writer) (*simulateConfig, error) {
	cfg := &simulateConfig{}
	l := &cfg.limit
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		algName, period, zone, start string
		nodelay                      bool
	)
	l.Per = time.Second
	fs.StringVar(&algName, "algorithm", "", "the algorithm (see above)")
	fs.Int64Var(&l.Rate, "rate", 0, "units added (or drained) every --per")
	durationFlag(fs, &l.Per, "per", "the rate's period (default 1s)")
	fs.Int64Var(&l.Burst, "burst", 0, "bucket capacity; for leaky_queue the queue size")
	fs.Int64Var(&l.Delay, "delay", 0, "leaky_queue: how many queued requests pass without waiting")
	fs.BoolVar(&nodelay, "nodelay", false, "leaky_queue: every queued request passes at once")
	fs.Int64Var(&l.Max, "limit", 0, "units per window, in flight or per period")
	durationFlag(fs, &l.Window, "window", "the window of fixed_window, sliding_log, sliding_window")
	durationFlag(fs, &cfg.hold, "hold", "concurrency: each admitted request is released this long after it arrives (default: never)")
	durationFlag(fs, &l.LeaseTTL, "lease-ttl", "concurrency: a lease not released expires after this (default 1m)")
	fs.StringVar(&period, "period", "", "quota: day, week or month")
	fs.StringVar(&zone, "time-zone", "UTC", "quota: IANA time zone of the calendar")
	fs.StringVar(&start, "start", "", "the instant of offset 0 (RFC 3339); required for quota")
	fs.IntVar(&l.AnchorDay, "anchor-day", 0, "quota: the day a month starts on (1-31)")
	fs.Int64Var(&l.Offset, "offset", 0, "quota: units taken from the period containing --start")
	fs.StringVar(&cfg.arrivalsSpec, "arrivals", "", "arrivals 'AT[*COUNT][:COST],...'")
	fs.StringVar(&cfg.arrivalsFile, "arrivals-file", "", "file with one 'SECONDS [COST]' per line")
	fs.BoolVar(&cfg.json, "json", false, "print one JSON object instead of a table")
	fs.IntVar(&cfg.instances, "instances", 1, "independent instances (at most 100000), each enforcing limit/N (count algorithms)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, simulateUsage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return nil, nil
		}
		return nil, cli.Usagef("simulate: %v", err)
	}
	if fs.NArg() > 0 {
		return nil, cli.Usagef("simulate: unexpected argument %q", fs.Arg(0))
	}
	if algName == "" {
		return nil, cli.Usagef("simulate: --algorithm is required (one of %s)", algorithmList())
	}
	alg, err := floodgate.ParseAlgorithm(algName)
	if err != nil {
		return nil, cli.Usagef("simulate: --algorithm: unknown algorithm %q (want one of %s)", algName, algorithmList())
	}
	l.Algorithm = alg
	l.Name = alg.String()
	var stray []string
	fs.Visit(func(f *flag.Flag) {
		if !flagApplies(alg, f.Name) {
			stray = append(stray, "--"+f.Name)
		}
	})
	if len(stray) > 0 {
		return nil, cli.Usagef("simulate: %s does not apply to %s", strings.Join(stray, ", "), alg)
	}
	if nodelay {
		if l.Delay != 0 {
			return nil, cli.Usagef("simulate: --delay and --nodelay exclude each other")
		}
		l.Delay = floodgate.NoDelay
	}
	if (cfg.arrivalsSpec == "") == (cfg.arrivalsFile == "") {
		return nil, cli.Usagef("simulate: give exactly one of --arrivals and --arrivals-file")
	}
	if start != "" {
		t, err := time.Parse(time.RFC3339Nano, start)
		if err != nil {
			return nil, cli.Usagef("simulate: --start %q is not an RFC 3339 time (like 2026-03-29T00:00:00+01:00)", start)
		}
		if t.Before(time.Unix(0, 0)) {
			return nil, cli.Usagef("simulate: --start %q is before 1970", start)
		}
		if t.After(time.Unix(0, math.MaxInt64)) {
			return nil, cli.Usagef("simulate: --start %q is after 2262-04-11T23:47:16.854775807Z, the last instant in Unix nanoseconds", start)
		}
		cfg.start = t.UnixNano()
		l.Start = t
	}
	if cfg.instances < 1 {
		return nil, cli.Usagef("simulate: --instances must be at least 1, got %d", cfg.instances)
	}
	if cfg.instances > maxInstances {
		return nil, cli.Usagef("simulate: --instances must be at most %d, got %d", maxInstances, cfg.instances)
	}
	if cfg.instances > 1 && int64(cfg.instances) > l.Max {
		return nil, cli.Usagef("simulate: --instances %d leaves each instance a limit of 0 (limit %d)", cfg.instances, l.Max)
	}
	if cfg.hold < 0 {
		return nil, cli.Usagef("simulate: --hold must not be negative")
	}
	if alg.Family() == floodgate.FamilyQuota {
		if period == "" {
			return nil, cli.Usagef("simulate: quota needs --period day, week or month")
		}
		if l.Period, err = floodgate.ParsePeriod(period); err != nil {
			return nil, cli.Usagef("simulate: --period: %q is not day, week or month", period)
		}
		if l.Location, err = time.LoadLocation(zone); err != nil {
			return nil, cli.Usagef("simulate: --time-zone: unknown time zone %q", zone)
		}
		if start == "" {
			return nil, cli.Usagef("simulate: quota needs --start (RFC 3339), the instant arrival times count from")
		}
		l.Start = l.Start.In(l.Location)
	}
	if err := l.Validate(); err != nil {
		return nil, cli.Usagef("simulate: %v", err)
	}
	return cfg, nil
}

// flagApplies reports whether the flag name means something for alg.
func flagApplies(alg floodgate.Algorithm, name string) bool {
	t := alg.Traits()
	switch name {
	case "algorithm", "arrivals", "arrivals-file", "json", "start":
		return true
	case "instances":
		// Counting limits split over instances (seed 002's split_limit).
		return t.Family == floodgate.FamilyWindow || t.Family == floodgate.FamilyQuota
	case "hold":
		return t.Kind == floodgate.KindConcurrency
	}
	p, ok := cli.LimitParam(name)
	return ok && t.Params.Has(p)
}

func algorithmList() string {
	names := make([]string, 0, 9)
	for _, a := range floodgate.Algorithms() {
		names = append(names, a.String())
	}
	return strings.Join(names, ", ")
}

// simulation is the summary of a replay: what the report writes besides
// the decisions, which it writes as they are made.
type simulation struct {
	arrivals int
	allowed  int
	delayed  int
	// With several instances: the limit each enforces, what one shared
	// limit would have allowed, and the seed's wrongly_denied over the
	// whole replay.
	split         int64
	globalAllowed int
	wrongly       int64
}

// decided is one decision of a replay, handed to the report as it is made.
// instance is the instance that decided it (0…N-1), or -1 without
// --instances.
type decided struct {
	i        int
	a        arrival
	d        floodgate.Decision
	never    bool
	instance int
}

// simulate replays the arrivals of src through the configured limit,
// starting from a fresh key, handing each decision to emit (when not nil)
// and returning the summary. For concurrency with a hold, each admitted
// request is released hold after its arrival; releases due at or before an
// arrival happen first.
func simulate(cfg *simulateConfig, src *source, emit func(*decided)) (*simulation, error) {
	if cfg.instances > 1 {
		return simulateInstances(cfg, src, emit)
	}
	var item int64
	for _, b := range src.bursts {
		if b.instance > 0 {
			return nil, cli.Usagef("simulate: arrival %d names instance %d but --instances is not set", item+1, b.instance)
		}
		item += b.count
	}
	p, err := algo.Compile(&cfg.limit)
	if err != nil {
		return nil, cli.Usagef("simulate: %v", err)
	}
	res := &simulation{}
	type release struct {
		at    int64
		lease uint64
	}
	// In time order: arrivals are, and hold is constant. A lease expires
	// at or before a hold as long as its lease_ttl, and releasing it then
	// does nothing, so no release is kept for it: pending holds at most the
	// leases the limit does, whatever the number of arrivals.
	var pending []release
	keep := cfg.hold > 0 && cfg.hold < cfg.leaseTTL()
	var s algo.State
	var dec decided
	dec.instance = -1
	err = src.each(func(i int, a arrival) error {
		now, err := arrivalInstant(cfg, i, a)
		if err != nil {
			return err
		}
		for len(pending) > 0 && pending[0].at <= now {
			if err := p.Release(&s, pending[0].at, pending[0].lease); err != nil {
				return fmt.Errorf("simulate: release: %w", err)
			}
			pending = pending[1:]
		}
		lease := uint64(i + 1)
		d, never, err := decideArrival(&p, &s, now, i, a, lease)
		if err != nil {
			return err
		}
		res.arrivals++
		if d.Allowed {
			res.allowed++
			if d.Delay > 0 {
				res.delayed++
			}
			if keep {
				pending = append(pending, release{at: now + int64(cfg.hold), lease: lease})
			}
		}
		if emit != nil {
			dec.i, dec.a, dec.d, dec.never = i, a, d, never
			emit(&dec)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// leaseTTL is the life of a concurrency lease that is not released.
func (cfg *simulateConfig) leaseTTL() time.Duration {
	if cfg.limit.LeaseTTL == 0 {
		return algo.DefaultLeaseTTL
	}
	return cfg.limit.LeaseTTL
}

// arrivalInstant is the absolute instant of arrival i.
func arrivalInstant(cfg *simulateConfig, i int, a arrival) (int64, error) {
	now := cfg.start + a.at
	if a.at > 0 && now < cfg.start {
		return 0, cli.Usagef("simulate: arrival %d: time overflows (past 2262-04-11T23:47:16.854775807Z)", i+1)
	}
	return now, nil
}

// decideArrival asks p about one arrival; a cost that can never fit is a
// decision, not an error.
func decideArrival(p *algo.Params, s *algo.State, now int64, i int, a arrival, lease uint64) (floodgate.Decision, bool, error) {
	d, err := p.Decide(s, algo.Request{Now: now, Cost: a.cost, Lease: lease})
	switch {
	case errors.Is(err, floodgate.ErrNeverFits):
		return d, true, nil
	case err != nil:
		return d, false, fmt.Errorf("simulate: arrival %d at %ss: %w", i+1, formatSeconds(a.at), err)
	}
	return d, false, nil
}

// simulateInstances replays the arrivals over cfg.instances independent
// instances, arrival i on instance i mod N, each enforcing
// algo.SplitLimit(limit, N), and beside them one shared limit. The
// decisions handed to emit are the instances'.
func simulateInstances(cfg *simulateConfig, src *source, emit func(*decided)) (*simulation, error) {
	n := cfg.instances
	global, err := algo.Compile(&cfg.limit)
	if err != nil {
		return nil, cli.Usagef("simulate: %v", err)
	}
	split := cfg.limit
	split.Max = algo.SplitLimit(cfg.limit.Max, n)
	if split.Offset > split.Max {
		split.Offset = split.Max
	}
	local, err := algo.Compile(&split)
	if err != nil {
		return nil, cli.Usagef("simulate: %v", err)
	}
	res := &simulation{split: split.Max}
	states := make([]algo.State, n)
	counts := make([]int64, n)
	var shared algo.State
	var dec decided
	err = src.each(func(i int, a arrival) error {
		now, err := arrivalInstant(cfg, i, a)
		if err != nil {
			return err
		}
		k := i % n
		if a.instance > 0 {
			if a.instance > n {
				return cli.Usagef("simulate: arrival %d goes to instance %d of only %d", i+1, a.instance, n)
			}
			k = a.instance - 1
		}
		counts[k] += a.cost
		d, never, err := decideArrival(&local, &states[k], now, i, a, uint64(i+1))
		if err != nil {
			return err
		}
		res.arrivals++
		if d.Allowed {
			res.allowed++
		}
		g, _, err := decideArrival(&global, &shared, now, i, a, uint64(i+1))
		if err != nil {
			return err
		}
		if g.Allowed {
			res.globalAllowed++
		}
		if emit != nil {
			dec = decided{i: i, a: a, d: d, never: never, instance: k}
			emit(&dec)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	res.wrongly = wronglyDenied(cfg.limit.Max, counts)
	return res, nil
}

// formatSeconds writes ns as exact decimal seconds: 0, 0.5, 1.000000001.
func formatSeconds(ns int64) string {
	return string(appendSeconds(nil, ns))
}

func appendSeconds(b []byte, ns int64) []byte {
	if ns < 0 {
		b = append(b, '-')
		ns = -ns
	}
	b = strconv.AppendInt(b, ns/int64(time.Second), 10)
	frac := ns % int64(time.Second)
	if frac == 0 {
		return b
	}
	var digits [10]byte
	digits[0] = '.'
	for i := 9; i >= 1; i-- {
		digits[i] = byte('0' + frac%10)
		frac /= 10
	}
	n := 10
	for digits[n-1] == '0' {
		n--
	}
	return append(b, digits[:n]...)
}

// describeLimit is the table's first line.
func describeLimit(l *floodgate.Limit) string {
	if l.Algorithm.Family() != floodgate.FamilyQuota {
		return l.Algorithm.String() + ": " + l.Describe()
	}
	s := fmt.Sprintf("%s: %d per %s in %s from %s", l.Algorithm, l.Max, l.Period, l.Location, l.Start.Format(time.RFC3339))
	if l.AnchorDay > 1 {
		s += fmt.Sprintf(", months start on day %d", l.AnchorDay)
	}
	if l.Offset > 0 {
		s += fmt.Sprintf(", offset %d", l.Offset)
	}
	return s
}

// report writes a run's decisions as they are made, between a head and a
// tail; the summary comes from the run's first pass.
type report struct {
	w     *bufio.Writer
	cfg   *simulateConfig
	res   *simulation
	queue bool
	buf   []byte
}

func (r *report) tableHead() {
	w := r.w
	fmt.Fprintln(w, describeLimit(&r.cfg.limit))
	fmt.Fprintf(w, "%12s %6s %8s %10s %12s", "time", "cost", "allowed", "remaining", "retry-after")
	if r.cfg.instances > 1 {
		fmt.Fprintf(w, " %8s", "instance")
	}
	if r.queue {
		fmt.Fprintf(w, " %10s", "delay")
	}
	w.WriteByte('\n')
}

func (r *report) tableRow(x *decided) {
	a, d := x.a, x.d
	verdict := "no"
	switch {
	case x.never:
		verdict = "never"
	case d.Allowed:
		verdict = "yes"
	}
	retry := "-"
	if d.RetryAfter > 0 {
		retry = formatSeconds(int64(d.RetryAfter)) + "s"
	}
	buf := r.buf[:0]
	buf = appendPadded(buf, formatSeconds(a.at)+"s", 12)
	buf = append(buf, ' ')
	buf = appendPadded(buf, strconv.FormatInt(a.cost, 10), 6)
	buf = append(buf, ' ')
	buf = appendPadded(buf, verdict, 8)
	buf = append(buf, ' ')
	buf = appendPadded(buf, strconv.FormatInt(d.Remaining, 10), 10)
	buf = append(buf, ' ')
	buf = appendPadded(buf, retry, 12)
	if x.instance >= 0 {
		buf = append(buf, ' ')
		buf = appendPadded(buf, strconv.Itoa(x.instance+1), 8)
	}
	if r.queue {
		delay := "-"
		if d.Delay > 0 {
			delay = formatSeconds(int64(d.Delay)) + "s"
		}
		buf = append(buf, ' ')
		buf = appendPadded(buf, delay, 10)
	}
	buf = append(buf, '\n')
	r.w.Write(buf)
	r.buf = buf
}

func (r *report) tableTail() {
	w, cfg, res := r.w, r.cfg, r.res
	fmt.Fprintf(w, "allowed %d of %d", res.allowed, res.arrivals)
	if r.queue {
		fmt.Fprintf(w, " (%d delayed)", res.delayed)
	}
	w.WriteByte('\n')
	if cfg.instances > 1 {
		fmt.Fprintf(w, "%d instances at split_limit(%d, %d) = %d each; one shared limit allows %d of %d; wrongly_denied = %d\n",
			cfg.instances, cfg.limit.Max, cfg.instances, res.split, res.globalAllowed, res.arrivals, res.wrongly)
	}
}

// appendPadded right-aligns s in width columns.
func appendPadded(b []byte, s string, width int) []byte {
	for n := len(s); n < width; n++ {
		b = append(b, ' ')
	}
	return append(b, s...)
}

func (r *report) jsonHead() {
	res := r.res
	b := make([]byte, 0, 256)
	b = append(b, `{"allowed": `...)
	b = strconv.AppendInt(b, int64(res.allowed), 10)
	b = append(b, `, "denied": `...)
	b = strconv.AppendInt(b, int64(res.arrivals-res.allowed), 10)
	if r.cfg.instances > 1 {
		b = append(b, `, "instances": `...)
		b = strconv.AppendInt(b, int64(r.cfg.instances), 10)
		b = append(b, `, "split_limit": `...)
		b = strconv.AppendInt(b, res.split, 10)
		b = append(b, `, "global_allowed": `...)
		b = strconv.AppendInt(b, int64(res.globalAllowed), 10)
		b = append(b, `, "wrongly_denied": `...)
		b = strconv.AppendInt(b, res.wrongly, 10)
	}
	b = append(b, `, "decisions": [`...)
	r.w.Write(b)
	r.buf = b
}

func (r *report) jsonRow(x *decided) {
	a, d := x.a, x.d
	b := r.buf[:0]
	if x.i > 0 {
		b = append(b, ',')
	}
	b = append(b, "\n  {\"at\": "...)
	b = appendSeconds(b, a.at)
	b = append(b, `, "cost": `...)
	b = strconv.AppendInt(b, a.cost, 10)
	b = append(b, `, "allowed": `...)
	b = strconv.AppendBool(b, d.Allowed)
	b = append(b, `, "remaining": `...)
	b = strconv.AppendInt(b, d.Remaining, 10)
	b = append(b, `, "retry_after": `...)
	b = appendSeconds(b, int64(d.RetryAfter))
	b = append(b, `, "reset_after": `...)
	b = appendSeconds(b, int64(d.ResetAfter))
	if r.queue {
		b = append(b, `, "delay": `...)
		b = appendSeconds(b, int64(d.Delay))
	}
	if x.instance >= 0 {
		b = append(b, `, "instance": `...)
		b = strconv.AppendInt(b, int64(x.instance+1), 10)
	}
	if x.never {
		b = append(b, `, "never_fits": true`...)
	}
	b = append(b, '}')
	r.w.Write(b)
	r.buf = b
}

func (r *report) jsonTail() {
	if r.res.arrivals > 0 {
		r.w.WriteByte('\n')
	}
	r.w.WriteString("]}\n")
}
