package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/internal/demo"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memstore"
	"github.com/floodgate/floodgate/store/redisstore"
)

const serveUsage = `usage: floodgate serve --config FILE [--demo] [flags]

Runs the gateway: a reverse proxy that enforces the policy of FILE in front
of each route's upstream. The memory store is used unless the file's
server.store names Redis.

Endpoints: the gateway on server.listen (--listen); /healthz, /readyz and
/metrics on server.admin_listen (--admin-listen; "off" disables them);
when the file names them, Envoy's rate-limit service (RLS v3 gRPC) on
server.grpc_listen and the HTTP check API on server.api_listen, sharing the
gateway's store.
SIGHUP reloads the file (an invalid version is logged and ignored);
SIGINT and SIGTERM stop accepting, finish the requests in flight (up to
--shutdown-timeout), then close the store (the memory store writes its
state file).

--demo starts a small demo upstream (the school office) on loopback, sends
every route there, and prints requests to try.

flags:
`

// serveConfig holds the flags of floodgate serve.
type serveConfig struct {
	config          string
	demo            bool
	listen          string
	adminListen     string
	logFormat       string
	logLevel        string
	watch           bool
	shutdownTimeout time.Duration
}

func init() {
	register("serve", "run the gateway: a rate-limiting reverse proxy", runServe)
}

func parseServeFlags(args []string, stderr io.Writer) (*serveConfig, error) {
	cfg := &serveConfig{}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, serveUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.config, "config", "", "the policy file (required)")
	fs.BoolVar(&cfg.demo, "demo", false, "start the demo upstream and send every route to it")
	fs.StringVar(&cfg.listen, "listen", "", "the gateway's address (default: server.listen of the file)")
	fs.StringVar(&cfg.adminListen, "admin-listen", "", `the address of /healthz, /readyz and /metrics, or "off" (default: server.admin_listen)`)
	fs.StringVar(&cfg.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&cfg.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.BoolVar(&cfg.watch, "watch", true, "reload the file when it changes and has stayed unchanged for a second (polled every second); --watch=false reloads on SIGHUP only")
	fs.DurationVar(&cfg.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long requests in flight may take to finish on shutdown")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, usagef("serve: %v", err)
	}
	if fs.NArg() > 0 {
		return nil, usagef("serve: unexpected argument %q", fs.Arg(0))
	}
	if cfg.config == "" {
		return nil, usagef("serve: --config FILE is required")
	}
	if cfg.logFormat != "text" && cfg.logFormat != "json" {
		return nil, usagef("serve: --log-format must be text or json, got %q", cfg.logFormat)
	}
	if cfg.shutdownTimeout <= 0 {
		return nil, usagef("serve: --shutdown-timeout must be positive")
	}
	return cfg, nil
}

func serveLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("serve: --log-level: %v", err)
	}
	o := &slog.HandlerOptions{Level: lv}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, o)), nil
	}
	return slog.New(slog.NewTextHandler(w, o)), nil
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseServeFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	log, err := serveLogger(stderr, cfg.logFormat, cfg.logLevel)
	if err != nil {
		return err
	}
	return serve(ctx, cfg, stdout, log)
}

// serve runs the gateway until ctx ends.
func serve(ctx context.Context, cfg *serveConfig, stdout io.Writer, log *slog.Logger) error {
	var gw atomic.Pointer[gateway.Gateway]
	var started atomic.Pointer[config.Server] // the settings the process runs with
	reloader, err := policy.NewReloader(policy.ReloaderOptions{
		Path:   cfg.config,
		Logger: log,
		OnReload: func(p *policy.Policy) {
			if g := gw.Load(); g != nil {
				g.ForgetUpstreams()
			}
			// Limits, routes, keys, identity and header settings follow
			// the file; the process-level settings need a restart.
			if s, first := p.Server(), started.Load(); first != nil &&
				(s.Store != first.Store || s.StateFile != first.StateFile || s.Listen != first.Listen ||
					s.AdminListen != first.AdminListen || s.StoreTimeout != first.StoreTimeout ||
					s.Instances != first.Instances || s.Upstream != first.Upstream) {
				log.Warn("reloaded: store, listen addresses, store timeout, instances and upstream timeouts change only on restart")
			}
		},
	})
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	srv := reloader.Policy().Server()
	started.Store(srv)
	listen := firstNonEmpty(cfg.listen, srv.Listen, config.DefaultListen)
	admin := firstNonEmpty(cfg.adminListen, srv.AdminListen)

	metrics, metricsHandler, err := newServeMetrics()
	if err != nil {
		return fmt.Errorf("serve: metrics: %w", err)
	}

	// A relative state file is relative to the policy file, like its
	// other paths.
	statePath := srv.StateFile
	if statePath != "" && !filepath.IsAbs(statePath) {
		statePath = filepath.Join(filepath.Dir(cfg.config), statePath)
	}
	store, local, closeStores, err := serveOpenStore(srv, statePath, log)
	if err != nil {
		return err
	}
	storesClosed := false
	defer func() {
		if !storesClosed {
			_ = closeStores()
		}
	}()
	lim := limiter.New(store, limiter.Options{
		Timeout:   srv.StoreTimeout,
		Instances: srv.Instances,
		Local:     local,
		Observer:  metrics.limiterObserver(),
		Logger:    log,
	})

	var demoSrv *demo.Server
	var upstream *url.URL
	if cfg.demo {
		demoSrv, err = demo.Start("127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		defer func() {
			c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = demoSrv.Close(c)
		}()
		upstream, _ = url.Parse(demoSrv.URL)
	}

	matcher, err := gateway.NewPolicyMatcher(reloader, gateway.PolicyMatcherOptions{Upstream: upstream})
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	hdr, noFields := gateway.HeaderSwitches(srv.Headers)
	g, err := gateway.New(gateway.Options{
		Matcher:           matcher,
		Engine:            gateway.LimiterEngine(lim),
		Headers:           hdr,
		NoRateLimitFields: noFields,
		Observer:          metrics.gatewayObserver(),
		Logger:            log,
		Transport: gateway.NewTransport(gateway.TransportOptions{
			DialTimeout:           srv.Upstream.DialTimeout,
			ResponseHeaderTimeout: srv.Upstream.Timeout,
			IdleConnTimeout:       srv.Upstream.IdleTimeout,
		}),
	})
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	gw.Store(g)

	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("serve: listen: %w", err)
	}
	front := &http.Server{
		Handler:           g,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	var ready atomic.Bool
	var adminSrv *http.Server
	var adminLn net.Listener
	if admin != "off" && admin != "" {
		adminLn, err = net.Listen("tcp", admin)
		if err != nil {
			ln.Close()
			return fmt.Errorf("serve: admin listen: %w", err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = io.WriteString(w, "ok\n")
		})
		mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			if !ready.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = io.WriteString(w, "not ready\n")
				return
			}
			_, _ = io.WriteString(w, "ready\n")
		})
		mux.Handle("GET /metrics", metricsHandler)
		adminSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	}

	errc := make(chan error, 4) // one send at most from each server
	services, err := startDecisionServices(srv, cfg.config, lim, reloader, cfg.shutdownTimeout, errc, stdout, log)
	if err != nil {
		ln.Close()
		if adminLn != nil {
			adminLn.Close()
		}
		return err
	}
	go func() { errc <- front.Serve(ln) }()
	if adminSrv != nil {
		go func() { errc <- adminSrv.Serve(adminLn) }()
	}
	if cfg.watch {
		go reloader.Run(ctx)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	// The admin line comes last: scripts and tests wait for it.
	base := "http://" + displayAddr(ln.Addr())
	fmt.Fprintf(stdout, "floodgate: gateway on %s (store %s)\n", base, srv.StoreKind())
	if demoSrv != nil {
		printDemo(stdout, base, demoSrv.URL, adminLn)
	}
	if adminLn != nil {
		fmt.Fprintf(stdout, "floodgate: admin on http://%s (/healthz, /readyz, /metrics)\n", displayAddr(adminLn.Addr()))
	}
	log.Info("serving", "listen", ln.Addr().String(), "store", srv.StoreKind(), "config", cfg.config)
	ready.Store(true)

	var runErr error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-hup:
			if err := reloader.Reload(); err != nil {
				log.Error("reload rejected; the running policy stays", "err", err)
			} else {
				log.Info("reloaded", "config", cfg.config, "reloads", reloader.Reloads())
			}
		case err := <-errc:
			runErr = fmt.Errorf("serve: %w", err)
			break loop
		}
	}

	// Shut down: not ready any more, stop accepting, let requests in flight
	// finish, then close the stores (the memory store writes its state).
	ready.Store(false)
	log.Info("shutting down", "timeout", cfg.shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.shutdownTimeout)
	defer cancel()
	if err := front.Shutdown(sctx); err != nil {
		log.Warn("requests still in flight at the shutdown timeout", "err", err)
		_ = front.Close()
	}
	services.Shutdown()
	if adminSrv != nil {
		_ = adminSrv.Shutdown(sctx)
	}
	storesClosed = true
	if err := closeStores(); err != nil {
		log.Error("closing the store", "err", err)
		if runErr == nil {
			runErr = fmt.Errorf("serve: %w", err)
		}
	}
	log.Info("stopped")
	return runErr
}

// serveOpenStore opens the store the settings name: the memory store (with
// its state file) or Redis, with a memory store for the limits that fall
// back to a local share when Redis fails.
func serveOpenStore(srv *config.Server, statePath string, log *slog.Logger) (store, local limiter.Store, closeAll func() error, err error) {
	if srv.StoreKind() == "memory" {
		ms, err := memstore.New(memstore.Options{StatePath: statePath, Logger: log})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("serve: %w", err)
		}
		if st := ms.Stats(); st.LoadError != nil {
			log.Warn("state file not loaded", "path", statePath, "err", st.LoadError)
		} else if st.Loaded > 0 {
			log.Info("state file loaded", "path", statePath, "keys", st.Loaded)
		}
		return ms, nil, ms.Close, nil
	}
	rs, err := redisstore.New(redisstore.Options{URL: srv.Store, Logger: log})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("serve: %w", err)
	}
	ls, err := memstore.New(memstore.Options{Logger: log})
	if err != nil {
		rs.Close()
		return nil, nil, nil, fmt.Errorf("serve: %w", err)
	}
	return rs, ls, func() error {
		rs.Close()
		return ls.Close()
	}, nil
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// displayAddr turns a listener's address into one a client can use: an
// unspecified host becomes 127.0.0.1.
func displayAddr(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// printDemo tells a newcomer where to send requests.
func printDemo(w io.Writer, base, upstream string, admin net.Listener) {
	var b strings.Builder
	fmt.Fprintf(&b, "floodgate: demo upstream (the school office) on %s; every route goes there\n\n", upstream)
	fmt.Fprintf(&b, "Try (lesson 07):\n")
	fmt.Fprintf(&b, "  # stage dev, 5/s with a burst of 5: eight at once give 200 x5 then 429 x3\n")
	fmt.Fprintf(&b, "  for i in 1 2 3 4 5 6 7 8; do curl -s -o /dev/null -w '%%{http_code} ' %s/students/9; done; echo\n", base)
	fmt.Fprintf(&b, "  curl -i %s/students/9                                          # RateLimit-Policy and RateLimit fields\n", base)
	fmt.Fprintf(&b, "  curl -i -H 'x-api-key: key-partner-1' %s/partner/students/9   # usage plan partner-basic: 2/s, 1000 a day\n", base)
	fmt.Fprintf(&b, "  curl -i -H 'x-api-key: key-trial' %s/partner/students/9       # usage plan trial: 3 a day, then Limit Exceeded\n", base)
	fmt.Fprintf(&b, "  curl -i -H 'x-api-key: key-nobody' %s/partner/students/9      # unknown key: 403 Forbidden\n", base)
	fmt.Fprintf(&b, "  curl -i -X POST -d '{\"user\":\"ana\",\"password\":\"wrong\"}' %s/login   # 401; 5 failed logins a minute, then 429\n", base)
	if admin != nil {
		fmt.Fprintf(&b, "  curl -s http://%s/metrics | grep '^floodgate_'\n", displayAddr(admin.Addr()))
	}
	b.WriteString("\n")
	io.WriteString(w, b.String())
}
