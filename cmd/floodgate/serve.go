package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/internal/app"
)

const serveUsage = `usage: floodgate serve --config FILE [--demo] [flags]

Runs the gateway: a reverse proxy that enforces the policy of FILE in front
of each route's upstream. The memory store is used unless the file's
server.store names Redis; --store-file FILE takes the store URL from FILE
instead (a Redis URL with its password, kept out of the policy file).

Endpoints: the gateway on server.listen (--listen); /healthz, /readyz and
/metrics alone on server.ops_listen (--ops-listen, default 127.0.0.1:9102;
"off" disables it), for probes and scrapes naming it by an IP address,
localhost or a name in server.ops_hosts (others get 421); the admin API (/api/v1/), the
dashboard (/ui/), POST /v1/explain and the same three on
server.admin_listen (--admin-listen, default 127.0.0.1:9090; "off"
disables it), which refuses an address other than loopback unless
server.admin.tokens lists tokens; when the file names them, Envoy's rate-limit service (RLS v3 gRPC) on
server.grpc_listen and the HTTP check API on server.api_listen, sharing the
gateway's store.
SIGHUP reloads the file (an invalid version is logged and ignored);
SIGINT and SIGTERM stop accepting, finish the requests in flight (up to
--shutdown-timeout), then close the store (the memory store writes its
state file).

Unless server.memory.soft_limit is off or GOMEMLIMIT is set, the Go
runtime's soft memory limit is kept at server.memory.max_bytes and a tenth
of it, plus what the rest of the process holds and the room GOGC gives
that, so that the garbage of a flood of distinct keys is collected before
the process grows past it; in a container, never past nine tenths of the
container's memory limit (its cgroup's).

--demo starts a small demo upstream (the school office) on loopback, sends
every route there, and prints requests to try.

flags:
`

// serveFlags are the flags of floodgate serve: what they tell the
// gateway, and the log's format and level.
type serveFlags struct {
	app.ServeOptions
	logFormat, logLevel string
}

func parseServeFlags(args []string, stdout io.Writer) (*serveFlags, error) {
	cfg := &serveFlags{}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.StringVar(&cfg.Config, "config", "", "the policy file (required)")
	fs.BoolVar(&cfg.Demo, "demo", false, "start the demo upstream and send every route to it")
	fs.StringVar(&cfg.Listen, "listen", "", "the gateway's address (default: server.listen of the file)")
	fs.StringVar(&cfg.AdminListen, "admin-listen", "", `the address of the admin API, the dashboard, /healthz, /readyz and /metrics, or "off" (default: server.admin_listen)`)
	fs.StringVar(&cfg.OpsListen, "ops-listen", "", `the address of /healthz, /readyz and /metrics alone, or "off" (default: server.ops_listen)`)
	fs.StringVar(&cfg.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&cfg.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.BoolVar(&cfg.Watch, "watch", true, "reload the file when it changes and has stayed unchanged for a second (polled every second); --watch=false reloads on SIGHUP only")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "how long requests in flight may take to finish on shutdown")
	fs.StringVar(&cfg.AccessLog, "access-log", "", `write an access log to this file ("-": standard output; "off": none) (default: server.access_log.path)`)
	fs.StringVar(&cfg.AccessLogFormat, "access-log-format", "", "the access log's format: json or combined (default: server.access_log.format, or json)")
	fs.StringVar(&cfg.Engine, "engine", "", `the gateway listener's HTTP engine: fast or net/http (default: server.engine of the file, fast)`)
	fs.StringVar(&cfg.StoreFile, "store-file", "", "read the store URL from this file (a mounted Secret) in place of server.store; read at start")
	if help, err := parseFlags(fs, args, stdout, serveUsage); help || err != nil {
		if help {
			return nil, flag.ErrHelp
		}
		return nil, err
	}
	switch {
	case fs.NArg() > 0:
		return nil, usagef("serve: unexpected argument %q", fs.Arg(0))
	case cfg.Config == "":
		return nil, usagef("serve: --config FILE is required")
	case cfg.logFormat != "text" && cfg.logFormat != "json":
		return nil, usagef("serve: --log-format must be text or json, got %q", cfg.logFormat)
	case cfg.ShutdownTimeout <= 0:
		return nil, usagef("serve: --shutdown-timeout must be positive")
	case cfg.Engine != "" && cfg.Engine != config.EngineFast && cfg.Engine != config.EngineNetHTTP:
		return nil, usagef("serve: --engine must be %s or %s, got %q", config.EngineFast, config.EngineNetHTTP, cfg.Engine)
	}
	return cfg, nil
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseServeFlags(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(cfg.logLevel)); err != nil {
		return usagef("serve: --log-level: %v", err)
	}
	cfg.Getenv = os.Getenv
	log := app.NewLogger(stderr, cfg.logFormat == "json", lv)
	if captureStdLog {
		app.StdLog(log)
	}
	return app.Serve(ctx, &cfg.ServeOptions, stdout, log)
}
