package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/floodgate/floodgate/access"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store"
)

const explainUsage = `usage: floodgate explain --config POLICY --path PATH [flags]

Explains how the gateway would answer one request, without charging
anything: every limit of the policy in evaluation order, whether it applies
and why (route, method, host, path, stage, the API key and its plan, key
parts present or missing, shadow), the key it counts the request under, its
state as a peek sees it (remaining, reset, retry-after), the binding limit
and the answer the client would get.

The state is the embedded store's, empty at start, unless --store names the
Redis store the gateways share. A running floodgate serve explains from its
own state at POST /v1/explain on the admin listener.

flags:
`

// headerFlags are repeated "Name: value" flags, one line each: a name
// given twice is a field of two lines, as the gateway would receive it.
type headerFlags [][2]string

func (h *headerFlags) String() string { return fmt.Sprint([][2]string(*h)) }

func (h *headerFlags) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	if !ok || strings.TrimSpace(name) == "" {
		return fmt.Errorf("want Name: value, got %q", v)
	}
	*h = append(*h, [2]string{strings.TrimSpace(name), strings.TrimSpace(value)})
	return nil
}

func runExplain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var er gateway.ExplainRequest
	var hdr headerFlags
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, explainUsage)
		fs.PrintDefaults()
	}
	cfgPath := fs.String("config", "", "the policy file (required)")
	storeURL := fs.String("store", "", "peek at this Redis store (redis://...) instead of an empty embedded one")
	asJSON := fs.Bool("json", false, "write the explanation as JSON (as POST /v1/explain answers)")
	key := fs.String("key", "", "the API key (sent in the policy's API key header)")
	fs.StringVar(&er.Method, "method", "GET", "the request's method")
	fs.StringVar(&er.Path, "path", "", "the request's path (required)")
	fs.StringVar(&er.Host, "host", "", "the request's Host")
	fs.StringVar(&er.IP, "ip", "127.0.0.1", "the address the request comes from")
	fs.StringVar(&er.KeyName, "key-name", "", `the API key by its name, as the access log shows it (or "?" and a hash prefix)`)
	fs.Var(&hdr, "header", `a request header, "Name: value" (repeat for several)`)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usagef("explain: %v", err)
	}
	if fs.NArg() > 0 {
		return usagef("explain: unexpected argument %q", fs.Arg(0))
	}
	if *cfgPath == "" || er.Path == "" {
		return usagef("explain: --config and --path are required")
	}
	p, err := loadPolicy(*cfgPath)
	if err != nil {
		return err
	}
	if *key != "" {
		hdr = append(hdr, [2]string{p.Server().APIKeyHeader, *key})
	}
	url := "memory"
	if *storeURL != "" {
		url = *storeURL
	}
	st, closer, err := store.Open(ctx, url, store.Options{SnapshotInterval: -1})
	if err != nil {
		return fmt.Errorf("explain: %w", err)
	}
	defer closer.Close()
	pm, err := gateway.NewPolicyMatcher(gateway.Fixed(p), gateway.PolicyMatcherOptions{})
	if err != nil {
		return fmt.Errorf("explain: %w", err)
	}
	// The engine the file's gateways decide with: a counter key past
	// server.memory.max_key_bytes is peeked at under the SHA-256 they
	// charge it under.
	g, err := gateway.New(gateway.Options{Matcher: pm, Engine: limiter.New(st, gateway.EngineOptions(p.Server())),
		Fields: gateway.FieldOptions(p.Server().Headers), MethodOverride: gateway.MethodOverrideOf(p.Server().MethodOverride),
		Gatekeeper: fileLists{access.Compile(access.FileEntries(&p.Server().Access))}})
	if err != nil {
		return fmt.Errorf("explain: %w", err)
	}
	r, o, err := er.HTTPRequest(ctx)
	if err != nil {
		return usagef("explain: %v", err)
	}
	for _, f := range hdr {
		if err := gateway.AddExplainedField(r.Header, f[0], f[1]); err != nil {
			return usagef("explain: %v", err)
		}
	}
	e, err := g.Explain(ctx, r, o)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(e)
	}
	return writeExplanation(stdout, e)
}

// fileLists screens an explained request with the policy file's access
// lists, as floodgate serve's gatekeeper does: an address on the deny list
// is answered 403, and one on the allow list is exempt from the limits its
// entry names. Entries added through the admin API are a running server's
// (POST /v1/explain), as are its bans.
type fileLists struct{ l *access.List }

func (f fileLists) Screen(m *gateway.Match) (int, time.Duration) {
	return gateway.ScreenByList(f.l, m, true), 0
}

func (fileLists) Outcome(context.Context, time.Duration, *gateway.Match, bool, int) {}

// writeExplanation writes an explanation for a terminal.
func writeExplanation(w io.Writer, e *gateway.Explanation) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", e.Method, e.Path)
	if e.Host != "" {
		fmt.Fprintf(&b, " (host %s)", e.Host)
	}
	fmt.Fprintf(&b, " from %s", orDash(e.ClientIP))
	if e.ClientKey != e.ClientIP {
		fmt.Fprintf(&b, " (counted as %s)", e.ClientKey)
	}
	fmt.Fprintf(&b, "\nroute %s, stage %s, API key %s", orDash(e.Route), orDash(e.Stage), orDash(e.Key))
	if e.Plan != "" {
		fmt.Fprintf(&b, " (plan %s)", e.Plan)
	}
	fmt.Fprintf(&b, ", user %s", orDash(e.User))
	if e.UserError != "" {
		fmt.Fprintf(&b, " (token: %s)", e.UserError)
	}
	b.WriteString("\n")
	if e.Forbidden != "" {
		fmt.Fprintf(&b, "refused before any limit: %s\n", e.Forbidden)
	}
	if e.Degraded != "" {
		fmt.Fprintf(&b, "the store did not answer (%s): the limits' failure policies decided\n", e.Degraded)
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tLIMIT\tSCOPE\tAPPLIES\tCOUNTER KEY\tSTATE NOW\tWHY")
	for i, l := range e.Limits {
		name := l.Name
		if l.Binding {
			name += " (binding)"
		}
		applies := "no"
		if l.Matched {
			applies = "yes"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", i+1, name, l.Scope, applies, orDash(l.CounterKey), stateText(l.State), l.Reason)
	}
	tw.Flush()
	b.WriteString("\n")
	a := e.Answer
	switch {
	case a.Forwarded && a.Delay > 0:
		fmt.Fprintf(&b, "answer: held %s in the queue, then forwarded to the upstream\n", time.Duration(a.Delay))
	case a.Forwarded:
		b.WriteString("answer: forwarded to the upstream\n")
	default:
		fmt.Fprintf(&b, "answer: %d %s\n", a.Status, strings.TrimSpace(a.Body))
	}
	for _, h := range a.Headers {
		fmt.Fprintf(&b, "  %s: %s\n", h.Name, h.Value)
	}
	if o := e.Overload; o != nil {
		kind := "limit"
		if o.Adaptive {
			kind = "adaptive limit"
		}
		fmt.Fprintf(&b, "overload: %s %d, %d in flight, %d queued; tier %s (admitted below %d in flight), tenant %s: ",
			kind, o.Limit, o.Inflight, o.Queued, o.Tier, o.Ceiling, orDash(o.Tenant))
		switch {
		case o.Admit:
			b.WriteString("a place is free now\n")
		case o.MaxWait > 0:
			fmt.Fprintf(&b, "it would wait up to %s for a place\n", time.Duration(o.MaxWait))
		default:
			b.WriteString("it would be shed (503)\n")
		}
	}
	b.WriteString("(nothing was charged)\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// stateText describes a limit's state as a peek sees it.
func stateText(s *gateway.LimitState) string {
	if s == nil {
		return "-"
	}
	if !s.Allowed {
		// What is left may be less than the request costs, not nothing.
		return fmt.Sprintf("would deny: %d of %d left, retry after %s", s.Remaining, s.Limit, roundShort(time.Duration(s.RetryAfter)))
	}
	t := fmt.Sprintf("would allow: %d of %d left after it", s.Remaining, s.Limit)
	if s.ResetAfter > 0 {
		t += ", full in " + roundShort(time.Duration(s.ResetAfter))
	}
	if s.Delay > 0 {
		t += ", held " + roundShort(time.Duration(s.Delay))
	}
	return t
}

func roundShort(d time.Duration) string {
	switch {
	case d >= time.Hour:
		return d.Round(time.Minute).String()
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Microsecond).String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
