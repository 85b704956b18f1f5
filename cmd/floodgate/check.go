package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/alarm"
	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/internal/app"
	"github.com/floodgate/floodgate/policy"
)

const checkUsage = `usage: floodgate check --config FILE [--files]

Validates the file, the descriptor files its server.rls_config names, and
the files it names that floodgate serve reads and would refuse to start
with (certificates, keys, webhook secrets), reporting every problem as
file:line:col: field: message (exit status 1), or prints its limits in
evaluation order. With --files, run where serve runs, it also checks the
places serve keeps files on this machine, as serve does at its start: an
access log or a state file in a directory that is missing or not
writable, a keys file that does not load.

flags:
`

func runCheck(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	path := fs.String("config", "", "the policy file to check (required)")
	places := fs.Bool("files", false, "also check where serve keeps files on this machine (access log, state file, keys file)")
	if help, err := parseFlags(fs, args, stdout, checkUsage); help || err != nil {
		return err
	}
	if *path == "" && fs.NArg() == 1 {
		*path = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return usagef("check: unexpected arguments %q", fs.Args())
	}
	if *path == "" {
		return usagef("check: --config is required (run 'floodgate check -h')")
	}
	f, err := config.Load(*path)
	if err != nil {
		return &exitError{Code: 1, Err: err}
	}
	p, err := policy.Compile(f, nil)
	if err != nil {
		return &exitError{Code: 1, Err: fmt.Errorf("%s: %w", *path, err)}
	}
	if err := checkWebhooks(*path, f); err != nil {
		return &exitError{Code: 1, Err: err}
	}
	// The descriptor files serve reads for its rate-limit service: a
	// problem there stops serve, so it fails the check.
	if err := app.CheckRLSConfig(*path, f); err != nil {
		return &exitError{Code: 1, Err: err}
	}
	// The files serve reads only when it runs (certificates, webhook
	// secrets) and, with --files, where it keeps files (the access log,
	// the state file): one that would stop serve, or that serve would
	// start without, fails the check as it would fail serve's start.
	if err := app.CheckFiles(*path, f, *places); err != nil {
		return &exitError{Code: 1, Err: err}
	}
	return printPolicy(stdout, *path, p)
}

// checkWebhooks refuses the alarm webhooks that serve would turn off:
// link-local and cloud metadata targets that their plan does not allow.
func checkWebhooks(path string, f *config.File) error {
	var errs []error
	for i, pl := range f.Plans {
		if pl.Alarms == nil || pl.Alarms.Webhook == "" {
			continue
		}
		if err := alarm.CheckWebhook(pl.Alarms.Webhook, pl.Alarms.AllowLinkLocal); err != nil {
			errs = append(errs, fmt.Errorf("%s: plans[%d].alarms.webhook: %w", path, i, err))
		}
	}
	return errors.Join(errs...)
}

// printPolicy writes the limits of p as a table, in evaluation order.
func printPolicy(w io.Writer, path string, p *policy.Policy) error {
	f := p.File()
	fmt.Fprintf(w, "%s: valid: %d routes, %d stages, %d plans, %d keys, %d limits\n\n",
		path, len(f.Routes), len(f.Stages), len(f.Plans), len(f.Keys), len(p.Limits()))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tNAME\tSCOPE\tMATCH\tKEY\tALGORITHM\tNUMBERS\tON FAILURE\tSHADOW\tCOUNT ON")
	for i, l := range p.Limits() {
		countOn := "all"
		if len(l.CountOn) > 0 {
			s := make([]string, len(l.CountOn))
			for j, c := range l.CountOn {
				s[j] = strconv.Itoa(c)
			}
			countOn = strings.Join(s, ",")
		}
		shadow := "no"
		if l.Shadow {
			shadow = "yes"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", i+1, l.Name, l.Scope, l.MatchText,
			l.KeyText(), l.Rule.Algorithm(), numbers(l.Rule.Limit(), l.Cost), l.Rule.OnFailure(), shadow, countOn)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	printCosts(w, p)
	if len(p.Routes()) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ROUTE\tMATCH\tSTAGE\tAPI KEY\tUPSTREAM")
		for i, r := range p.Routes() {
			cr := &f.Routes[i]
			key := "optional"
			if r.APIKeyRequired {
				key = "required"
			}
			stage := r.Stage
			if stage == "" {
				stage = "-"
			}
			up := cr.Upstream
			if len(cr.Upstreams) > 0 {
				up = strings.Join(cr.Upstreams, ",") + " (" + cr.Balance + ")"
			}
			if up == "" {
				up = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Name, cr.Match.String(), stage, key, up)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for i := range f.Routes {
			if o := f.Routes[i].Overload; o != nil {
				fmt.Fprintf(w, "overload of %s: %s\n", f.Routes[i].Name, o)
			}
		}
		for i := range f.Plans {
			if t := f.Plans[i].Tier; t != "" {
				fmt.Fprintf(w, "plan %s: its keys' requests are of tier %s under overload control\n", f.Plans[i].Name, t)
			}
		}
	}
	return nil
}

// numbers renders a limit's parameters in words, with the cost.
func numbers(l floodgate.Limit, cost int64) string {
	s := l.Describe()
	if cost > 1 {
		s += fmt.Sprintf(", cost %d", cost)
	}
	return s
}

// printCosts says, for each limit whose cost the request or the response
// tells, where it is read.
func printCosts(w io.Writer, p *policy.Policy) {
	source := func(c *policy.CostSource) string {
		if c.Header != "" {
			return "header " + c.Header
		}
		return "body " + strings.Join(c.Body, ".")
	}
	first := true
	for _, l := range p.Limits() {
		c := l.Costs
		if c == nil || (c.Estimate == nil && c.Actual == nil) {
			continue
		}
		if first {
			fmt.Fprintln(w, "\nCosts read from requests and responses:")
			first = false
		}
		est := strconv.FormatInt(l.Cost, 10)
		if c.Estimate != nil {
			est = fmt.Sprintf("%s (default %d)", source(c.Estimate), c.Default)
		}
		if c.Actual == nil {
			fmt.Fprintf(w, "  %s: cost from %s\n", l.Name, est)
			continue
		}
		fmt.Fprintf(w, "  %s: reserves %s, settles with %s (held up to %s)\n", l.Name, est, source(c.Actual), c.TTL)
	}
}
