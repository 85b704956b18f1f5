package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/replay"
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

--compare OTHER replays the same requests through a second policy and
lists exactly the requests that flip between allowed and denied, grouped
by limit and client; with --fail-above it exits with status 1 when more
flip than allowed (for a CI job).

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
	quiet                              bool
}

// multiFlag is a flag that may be given several times.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func init() {
	register("replay", "replay access logs through a policy: who would be refused, and when", runReplay)
}

func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
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
	fs.BoolVar(&f.quiet, "quiet", false, "no progress on stderr")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usagef("replay: %v", err)
	}
	f.logs = append(f.logs, fs.Args()...)
	if f.config == "" {
		return usagef("replay: --config POLICY is required")
	}
	if len(f.logs) == 0 {
		return usagef("replay: --log FILE is required")
	}
	if f.compare == "" && (f.failAbove != "" || f.flips != "") {
		return usagef("replay: --fail-above and --flips need --compare")
	}
	denied, err := parseStatuses(f.denied)
	if err != nil {
		return usagef("replay: --denied-status: %v", err)
	}
	threshold, share, err := parseThreshold(f.failAbove)
	if err != nil {
		return usagef("replay: --fail-above: %v", err)
	}
	p, err := loadPolicy(f.config)
	if err != nil {
		return err
	}
	o := replay.Options{Policy: p, PolicyName: f.config, Logs: f.logs, Format: f.format, LogFormat: f.logFormat,
		DeniedStatuses: denied, Window: f.window, Tolerance: f.tolerance, Top: f.top}
	if f.compare != "" {
		if o.Compare, err = loadPolicy(f.compare); err != nil {
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
	if f.html != "" {
		if err := writeHTMLReport(f.html, r); err != nil {
			return err
		}
	}
	if f.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
	} else if err := r.WriteText(stdout); err != nil {
		return err
	}
	if c := r.Compare; c != nil {
		limit := threshold
		if share {
			limit = float64(r.Requests) * threshold / 100
		}
		if float64(c.Flips) > limit {
			return &exitError{code: 1, err: fmt.Errorf("replay: %d of %d requests flip with %s, more than --fail-above %s",
				c.Flips, r.Requests, f.compare, orDefault(f.failAbove, "0"))}
		}
	}
	return nil
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
