package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/floodgate/floodgate/internal/app"
	"github.com/floodgate/floodgate/rls"
)

const rlsUsage = `usage: floodgate rls [--check]

Runs Envoy's rate-limit service (RLS v3 gRPC) configured exactly as
envoyproxy/ratelimit is: by its environment variables (GRPC_PORT, PORT,
DEBUG_PORT, RUNTIME_ROOT, RUNTIME_SUBDIRECTORY, REDIS_URL, REDIS_TYPE,
SHADOW_MODE, ...) and its descriptor files, so that replacing the container
image is the whole migration. Variables it does not honour are listed at
start. Floodgate's own: FLOODGATE_COMPAT=true answers every domain as
envoyproxy/ratelimit does (the compatibility mode; by default Floodgate's
semantics apply), FLOODGATE_RATELIMIT_HEADERS=true adds the RateLimit-Policy,
RateLimit and Retry-After fields, FLOODGATE_STORE_TIMEOUT sets the deadline
of a store call after which the limits' failure policies decide (default
250ms), FLOODGATE_HEAP_RESERVE_MIB sizes the heap reserve that spares the
garbage collector (default 32; 0 for none; address space, not memory),
FLOODGATE_DEBUG_HOSTS lists the host names, besides IP addresses and
localhost, the debug port and the Prometheus address answer to (others get
421), BACKEND_TYPE=memory uses the embedded store. See docs/envoy.md.

Ports, as envoyproxy/ratelimit has them: GRPC_PORT is the rate-limit
service (gRPC, with gRPC's health service); PORT serves POST /json (a
decision, as the gRPC call; a browser's request, with Origin or
Sec-Fetch-Site, is 403) and GET /healthcheck (the probe); DEBUG_PORT
serves /rlconfig, /stats, /metrics and /debug/pprof/ (no data about keys,
but profiles: keep it private); with USE_PROMETHEUS=true, PROMETHEUS_ADDR
serves PROMETHEUS_PATH (/metrics) alone.

SIGTERM and SIGINT drain, as envoyproxy/ratelimit does: /healthcheck answers
500 and gRPC's health NOT_SERVING, gRPC takes no new calls and finishes the
calls in flight (up to 10s), then the process exits with status 0. SIGHUP
reads the descriptor files at once (they are also followed as they change);
envoyproxy/ratelimit dies of it.

--check reads the settings and the descriptor files, reports problems and
exits.
`

func runRLS(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return rlsMain(ctx, args, os.LookupEnv, os.Environ(), stdout, stderr)
}

// rlsMain is "floodgate rls" with the environment given: lookup reads a
// variable, environ lists them all ("NAME=value").
func rlsMain(ctx context.Context, args []string, lookup func(string) (string, bool), environ []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, rlsUsage) }
	check := fs.Bool("check", false, "check the settings and the descriptor files, then exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usagef("rls: %v", err)
	}
	if fs.NArg() > 0 {
		return usagef("rls: unexpected argument %q (the settings are environment variables)", fs.Arg(0))
	}
	env, err := app.ReadEnvoy(lookup, environ)
	if err != nil {
		return err
	}
	log := app.NewLogger(stderr, env.LogJSON, env.LogLevel)
	if captureStdLog {
		app.StdLog(log)
	}
	for _, n := range env.Notes {
		if n.Unsupported {
			log.Warn("rls: setting not supported", "variable", n.Name, "why", n.Msg)
		} else {
			log.Info("rls: setting without effect here", "variable", n.Name, "why", n.Msg)
		}
	}
	if *check {
		return rlsCheck(env, stdout)
	}
	getenv := func(k string) string { v, _ := lookup(k); return v }
	return app.RunRLS(ctx, env.Settings, getenv, stdout, log)
}

// rlsCheck loads the descriptor files and prints what was found.
func rlsCheck(env *app.Envoy, stdout io.Writer) error {
	for _, n := range env.Notes {
		kind := "without effect"
		if n.Unsupported {
			kind = "not supported"
		}
		fmt.Fprintf(stdout, "%s: %s: %s\n", n.Name, kind, n.Msg)
	}
	set := env.Settings.RLS
	if len(set.Paths) == 0 {
		fmt.Fprintln(stdout, "RUNTIME_SUBDIRECTORY is empty: no descriptor files are read")
		return nil
	}
	cfg, err := rls.Load(set.Paths, set.Load)
	if err != nil {
		return &exitError{Code: 1, Err: err}
	}
	for _, w := range cfg.Warnings() {
		fmt.Fprintln(stdout, "warning:", w)
	}
	where := set.Paths[0]
	if app := set.Load.App; app != "" {
		where = filepath.Join(where, app) + " (and " + app + ".* beside it)"
	}
	fmt.Fprintf(stdout, "%s: %d domains: %v\n", where, len(cfg.Domains()), cfg.Domains())
	return nil
}
