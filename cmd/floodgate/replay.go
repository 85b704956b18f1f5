package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/internal/app"
	"github.com/floodgate/floodgate/internal/console"
	"github.com/floodgate/floodgate/keystore"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/replay"
	"github.com/floodgate/floodgate/store"
)

const replayUsage = `usage: floodgate replay --config POLICY --log FILE [--log FILE ...] [flags]

Replays access logs through a policy on the embedded store, at the times
the log gives (nothing is slept), and reports what the policy would have
done: per limit, the requests seen, allowed and denied and when denials
start and stop; the clients and API keys refused most; denials per minute.
When the log records decisions (Floodgate's own, or the 429/503 answers
of NGINX or Envoy), it also says how many the replay decides the same way
and why the others differ.

Logs: Floodgate's access log (JSON or combined), NGINX combined or main
(or any log_format given with --log-format), Envoy's default format (or
another with --log-format), and CSV with a header line naming its columns
(time, ip, method, path, status, duration_ms, key, user, decision ...).
Gzipped logs are read as they are. Several logs (instances, rotated files)
are merged by time.

API keys made through the admin API are read where floodgate serve keeps
them for the policy (its key file beside the state or policy file, or its
Redis store), or from --keys.

--compare OTHER replays the same requests through a second policy and
lists exactly the requests that flip between allowed and refused (by a
limit, or by the gateway's own answer before any limit), grouped by
limit and client; with --fail-above it exits with status 1 when more
flip than allowed (for a CI job). It also exits with status 1 when it
replayed no request, or could not read more lines than it replayed: a
comparison of nothing passes no change.

flags:
`

// replayFlags are the flags of floodgate replay.
type replayFlags struct {
	config, compare, format, logFormat string
	logs                               multiFlag
	denied                             string
	window, tolerance                  time.Duration
	top                                int
	json                               bool
	html, flips                        string
	failAbove                          string
	keys                               string
	quiet                              bool
}

// multiFlag is a flag that may be given several times.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseReplayFlags(args, stderr)
	if f == nil || err != nil {
		return err
	}
	denied, err := parseStatuses(f.denied)
	if err != nil {
		return usagef("replay: --denied-status: %v", err)
	}
	threshold, share, err := parseThreshold(f.failAbove)
	if err != nil {
		return usagef("replay: --fail-above: %v", err)
	}
	rl, err := policy.NewReloader(policy.ReloaderOptions{Path: f.config})
	if err != nil {
		return err
	}
	keys, closeKeys, err := replayKeys(ctx, f.keys, f.config, rl.Policy().Server())
	if err != nil {
		return err
	}
	defer closeKeys()
	p, err := withKeys(ctx, rl, keys)
	if err != nil {
		return err
	}
	o := replay.Options{Policy: p, PolicyName: f.config, Logs: f.logs, Format: f.format, LogFormat: f.logFormat,
		DeniedStatuses: denied, Window: f.window, Tolerance: f.tolerance, Top: f.top,
		MemoryLimit: func(mode string, capBytes int64, held func() int64) func() {
			return app.StartMemLimit(mode, capBytes, held, slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
		}}
	if f.compare != "" {
		crl, err := policy.NewReloader(policy.ReloaderOptions{Path: f.compare})
		if err != nil {
			return err
		}
		if o.Compare, err = withKeys(ctx, crl, keys); err != nil {
			return err
		}
		o.CompareName = f.compare
	}
	if !f.quiet {
		o.Progress = progressPrinter(stderr)
	}
	var flips *bufio.Writer
	if f.flips != "" {
		file, err := os.Create(f.flips)
		if err != nil {
			return fmt.Errorf("replay: %w", err)
		}
		defer file.Close()
		flips = bufio.NewWriter(file)
		enc := json.NewEncoder(flips)
		o.OnFlip = func(fl *replay.Flip) { _ = enc.Encode(fl) }
	}
	r, err := replay.Run(ctx, o)
	if err != nil {
		return err
	}
	if flips != nil {
		if err := flips.Flush(); err != nil {
			return fmt.Errorf("replay: %s: %w", f.flips, err)
		}
	}
	if err := writeReplayReport(r, f, stdout); err != nil {
		return err
	}
	if c := r.Compare; c != nil {
		if err := readEnough(r); err != nil {
			return &exitError{Code: 1, Err: err}
		}
		limit := threshold
		if share {
			limit = float64(r.Requests) * threshold / 100
		}
		if float64(c.Flips) > limit {
			return &exitError{Code: 1, Err: fmt.Errorf("replay: %d of %d requests flip with %s, more than --fail-above %s",
				c.Flips, r.Requests, f.compare, orDefault(f.failAbove, "0"))}
		}
	}
	return nil
}

// parseReplayFlags reads the flags of floodgate replay; nil, nil after -h.
func parseReplayFlags(args []string, stderr io.Writer) (*replayFlags, error) {
	var f replayFlags
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, replayUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&f.config, "config", "", "the policy file (required)")
	fs.Var(&f.logs, "log", "an access log (repeat for several; plain or gzipped)")
	fs.StringVar(&f.compare, "compare", "", "a second policy file: report the requests it decides differently")
	fs.StringVar(&f.failAbove, "fail-above", "", `with --compare: exit with status 1 when more requests flip than this: a count, or a share such as "0.1%" (default: any flip)`)
	fs.StringVar(&f.format, "format", replay.FormatAuto, "the logs' format: auto, json, nginx, envoy or csv")
	fs.StringVar(&f.logFormat, "log-format", "", "the NGINX log_format or Envoy format string of the logs, when not a predefined one")
	fs.StringVar(&f.denied, "denied-status", "429,503", "statuses that mean refused by a limit, in logs that do not record the decision")
	fs.DurationVar(&f.window, "window", replay.DefaultWindow, "how far out of order a log's lines may be (the longest request)")
	fs.DurationVar(&f.tolerance, "tolerance", replay.DefaultTolerance, "how far a logged time may be from the live decision's instant")
	fs.IntVar(&f.top, "top", replay.DefaultTop, "how many clients and API keys to list")
	fs.BoolVar(&f.json, "json", false, "write the report as JSON")
	fs.StringVar(&f.html, "html", "", "also write a self-contained HTML report to this file")
	fs.StringVar(&f.flips, "flips", "", "with --compare: write every flipped request to this file, one JSON object a line")
	fs.StringVar(&f.keys, "keys", "", `the API keys made through the admin API: the console's key file, a redis:// URL, or "none" (default: where floodgate serve keeps them for the policy)`)
	fs.BoolVar(&f.quiet, "quiet", false, "no progress on stderr")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, nil
		}
		return nil, usagef("replay: %v", err)
	}
	f.logs = append(f.logs, fs.Args()...)
	switch {
	case f.config == "":
		return nil, usagef("replay: --config POLICY is required")
	case len(f.logs) == 0:
		return nil, usagef("replay: --log FILE is required")
	case f.compare == "" && (f.failAbove != "" || f.flips != ""):
		return nil, usagef("replay: --fail-above and --flips need --compare")
	}
	return &f, nil
}

// writeReplayReport writes the report as text or JSON on stdout, and as
// HTML where --html says.
func writeReplayReport(r *replay.Report, f *replayFlags, stdout io.Writer) error {
	if f.html != "" {
		if err := writeHTMLReport(f.html, r); err != nil {
			return err
		}
	}
	if !f.json {
		return r.WriteText(stdout)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// readEnough fails a comparison that read no request, or fewer requests
// than lines it could not read: its flips say nothing of the traffic.
func readEnough(r *replay.Report) error {
	var lines, unreadable int64
	sample := ""
	for _, l := range r.Logs {
		lines += l.Lines
		unreadable += l.Skipped
		if sample == "" && len(l.Samples) > 0 {
			sample = "; the first: " + l.Samples[0]
		}
	}
	switch {
	case r.Requests == 0:
		return fmt.Errorf("replay: no request replayed (%d lines, %d unreadable%s): a comparison of nothing passes no change", lines, unreadable, sample)
	case unreadable > r.Requests:
		return fmt.Errorf("replay: %d lines could not be read, more than the %d requests replayed%s: check --format and --log-format", unreadable, r.Requests, sample)
	}
	return nil
}

// replayKeys opens where the API keys made through the admin API are: spec
// ("none", a redis:// URL or a key file), or where floodgate serve keeps
// them for the policy (its key file on the memory store, its Redis
// otherwise), through the client of the Redis store the URL names. close
// releases it.
func replayKeys(ctx context.Context, spec, cfgPath string, srv *config.Server) (keystore.Backend, func(), error) {
	nothing := func() {}
	url := ""
	switch {
	case spec == "none":
		return nil, nothing, nil
	case strings.HasPrefix(spec, "redis") && strings.Contains(spec, "://"):
		url = spec
	case spec != "":
		return keystore.NewFileBackend(spec), nothing, nil
	case srv.StoreKind() == "memory":
		return keystore.NewFileBackend(console.KeysFile(cfgPath, console.StateFile(cfgPath, srv), srv)), nothing, nil
	default:
		url = srv.Store
	}
	const hint = "replay: the API keys in Redis (give --keys FILE, or --keys none to replay without them)"
	st, closer, err := store.Open(ctx, url, store.Options{})
	if err != nil {
		return nil, nothing, fmt.Errorf("%s: %w", hint, err)
	}
	rc, ok := st.(console.RedisStore)
	if !ok {
		closer.Close()
		return nil, nothing, fmt.Errorf("%s: %s is not a Redis store", hint, url)
	}
	return keystore.NewRedisBackend(rc.Client()), func() { closer.Close() }, nil
}

// withKeys returns rl's policy, which finds the API keys of keys (none
// when nil) by name and by secret, as the live policy does.
func withKeys(ctx context.Context, rl *policy.Reloader, keys keystore.Backend) (*policy.Policy, error) {
	if keys != nil {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		ks, err := keystore.New(ctx, keystore.Options{Backend: keys, Policy: rl.Policy})
		if err != nil {
			return nil, fmt.Errorf("replay: the API keys (give --keys FILE, or --keys none to replay without them): %w", err)
		}
		rl.SetKeySource(ks)
	}
	return rl.Policy(), nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// loadPolicy loads and compiles a policy file.
func loadPolicy(path string) (*policy.Policy, error) {
	f, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	p, err := policy.Compile(f, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// parseStatuses reads a comma-separated list of statuses.
func parseStatuses(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 100 || n > 599 {
			return nil, fmt.Errorf("%q is not an HTTP status", f)
		}
		out = append(out, n)
	}
	if out == nil {
		out = []int{}
	}
	return out, nil
}

// parseThreshold reads a count ("100") or a share ("0.5%").
func parseThreshold(s string) (v float64, share bool, err error) {
	if s == "" {
		return 0, false, nil
	}
	num, share := strings.CutSuffix(s, "%")
	v, err = strconv.ParseFloat(num, 64)
	if err != nil || v < 0 {
		return 0, false, fmt.Errorf("%q is neither a count nor a share such as 0.1%%", s)
	}
	return v, share, nil
}

// progressPrinter reports a replay's progress on w: in place on a
// terminal, a line every five seconds otherwise.
func progressPrinter(w io.Writer) func(replay.Progress) {
	tty := false
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	var last time.Duration
	return func(p replay.Progress) {
		done := p.Read >= p.Size
		if !tty && !done && p.Elapsed-last < 5*time.Second {
			return
		}
		last = p.Elapsed
		pct := 100.0
		if p.Size > 0 {
			pct = 100 * float64(p.Read) / float64(p.Size)
		}
		line := fmt.Sprintf("replay: %3.0f%% of %.1f MB, %d requests, %s", pct, float64(p.Size)/(1<<20), p.Requests,
			p.Elapsed.Round(100*time.Millisecond))
		switch {
		case tty && done:
			fmt.Fprintf(w, "\r%s\n", line)
		case tty:
			fmt.Fprintf(w, "\r%s", line)
		case p.Elapsed >= time.Second:
			fmt.Fprintln(w, line)
		}
	}
}
