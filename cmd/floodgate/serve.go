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
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/floodgate/floodgate/accesslog"
	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/gateway/edge"
	"github.com/floodgate/floodgate/internal/demo"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/metrics"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memstore"
	"github.com/floodgate/floodgate/store/redisstore"
	"github.com/prometheus/client_golang/prometheus"
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

Unless server.memory.soft_limit is off or GOMEMLIMIT is set, the Go
runtime's soft memory limit is kept at server.memory.max_bytes and a tenth
of it, plus what the rest of the process holds and the room GOGC gives
that, so that the garbage of a flood of distinct keys is collected before
the process grows past it.

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
	access          accessLogFlags
	engine          string // the gateway listener's engine (serve_edge.go)
}

func init() {
	register("serve", "run the gateway: a rate-limiting reverse proxy", runServe)
}

func parseServeFlags(args []string, stdout io.Writer) (*serveConfig, error) {
	cfg := &serveConfig{}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.StringVar(&cfg.config, "config", "", "the policy file (required)")
	fs.BoolVar(&cfg.demo, "demo", false, "start the demo upstream and send every route to it")
	fs.StringVar(&cfg.listen, "listen", "", "the gateway's address (default: server.listen of the file)")
	fs.StringVar(&cfg.adminListen, "admin-listen", "", `the address of /healthz, /readyz and /metrics, or "off" (default: server.admin_listen)`)
	fs.StringVar(&cfg.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&cfg.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.BoolVar(&cfg.watch, "watch", true, "reload the file when it changes and has stayed unchanged for a second (polled every second); --watch=false reloads on SIGHUP only")
	fs.DurationVar(&cfg.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long requests in flight may take to finish on shutdown")
	cfg.access.register(fs)
	cfg.registerEngine(fs)
	if help, err := parseFlags(fs, args, stdout, serveUsage); help || err != nil {
		if help {
			return nil, flag.ErrHelp
		}
		return nil, err
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
	if err := cfg.checkEngine(); err != nil {
		return nil, err
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
	cfg, err := parseServeFlags(args, stdout)
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
	s, err := newServer(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer s.close()
	if err := s.listen(stdout); err != nil {
		return err
	}
	if cfg.watch {
		go s.reloader.Run(ctx)
	}
	log.Info("serving", "listen", s.frontLn.Addr().String(), "engine", s.engineLine(), "store", s.srv.StoreKind(), "config", cfg.config)
	runErr := s.run(ctx)
	if err := s.shutdown(ctx); err != nil && runErr == nil {
		runErr = err
	}
	log.Info("stopped")
	return runErr
}

// server is one running "floodgate serve": the policy, the metrics, the
// stores and the engine that every front end shares, and the listeners.
type server struct {
	cfg      *serveConfig
	log      *slog.Logger
	srv      *config.Server // the settings the process started with
	reloader *policy.Reloader
	metrics  *metrics.Metrics
	registry *prometheus.Registry
	tracing  *tracing
	engine   *limiter.Limiter
	gateway  atomic.Pointer[gateway.Gateway]
	demo     *demo.Server
	console  *console // the admin API, the dashboard and the alarms (serve_admin.go)
	// accessLog is the access log, when there is one.
	accessLog *accesslog.Logger

	store, local limiter.Store // the store, and the local fallback store (Redis only)
	closeStores  func() error
	stopMemLimit func() // ends the soft memory limit's updates (memlimit.go)
	serving      bool   // the listeners are served (shutdown closes them)
	closed       bool

	frontLn, adminLn net.Listener
	conns            *connLimit
	front, admin     *http.Server
	edge             *edge.Engine // the edge engine, when it serves the gateway listener
	engineName       string
	services         *decisionServices
	errc             chan error
	ready            atomic.Bool
}

// newServer loads the policy and opens the metrics, the stores and the
// engine.
func newServer(ctx context.Context, cfg *serveConfig, log *slog.Logger) (*server, error) {
	s := &server{cfg: cfg, log: log, errc: make(chan error, 4)}
	var err error
	if s.tracing, err = newTracing(ctx, os.Getenv); err != nil {
		return nil, err
	}
	s.reloader, err = policy.NewReloader(policy.ReloaderOptions{Path: cfg.config, Logger: log, OnReload: s.reloaded,
		OnReject: s.rejected})
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	s.srv = s.reloader.Policy().Server()
	if s.metrics, s.registry, err = newServeMetrics(); err != nil {
		return nil, fmt.Errorf("serve: metrics: %w", err)
	}
	statePath := stateFile(cfg.config, s.srv)
	store, local, closeStores, err := serveOpenStore(s.srv, statePath, s.exactStoreClock(), log)
	if err != nil {
		return nil, err
	}
	s.store, s.local, s.closeStores = store, local, closeStores
	if s.console, err = newConsole(cfg.config, statePath, s.srv, s.reloader, s.registry, log); err != nil {
		_ = closeStores()
		return nil, err
	}
	s.engine = limiter.New(store, limiter.Options{
		Timeout:     s.srv.StoreTimeout,
		HardTimeout: s.srv.StoreHardTimeout,
		MaxKeyBytes: s.srv.Memory.MaxKeyBytes,
		Instances:   s.srv.Instances,
		Local:       local,
		Observer:    s.console.observer(s.metrics),
		Logger:      log,
	})
	if err := s.console.attach(s.engine, s.engine.Stats); err != nil {
		s.console.close()
		_ = closeStores()
		return nil, err
	}
	if err := s.registerStateMetrics(); err != nil {
		return nil, fmt.Errorf("serve: metrics: %w", err)
	}
	s.stopMemLimit = startMemLimit(s.srv.Memory.SoftLimit, s.srv.Memory.MaxBytes, s.storeBytes, os.Getenv, log)
	return s, nil
}

// storeBytes is the memory the embedded store counts for its keys: the
// store's, or with Redis the local fallback's.
func (s *server) storeBytes() int64 {
	var n int64
	for _, st := range []limiter.Store{s.store, s.local} {
		if ms, ok := st.(*memstore.Store); ok {
			n += ms.Stats().Bytes
		}
	}
	return n
}

// reloaded follows a new version of the policy file: limits, routes,
// keys, identity and field settings follow it; the process-level settings
// need a restart.
func (s *server) reloaded(p *policy.Policy) {
	if g := s.gateway.Load(); g != nil {
		g.ForgetUpstreams()
	}
	if n, first := p.Server(), s.srv; first != nil &&
		(n.Store != first.Store || n.StateFile != first.StateFile || n.Listen != first.Listen ||
			n.AdminListen != first.AdminListen || n.StoreTimeout != first.StoreTimeout || n.StoreHardTimeout != first.StoreHardTimeout ||
			n.Instances != first.Instances || n.Upstream != first.Upstream || n.Timeouts != first.Timeouts ||
			n.MaxConnections != first.MaxConnections || n.Memory != first.Memory || n.MethodOverride != first.MethodOverride ||
			n.Engine != first.Engine) {
		s.log.Warn("reloaded: store, listen addresses, store timeout, instances, timeouts, connection and memory limits, method_override and engine change only on restart")
	}
	if s.console != nil {
		s.console.reloaded(p)
	}
}

// rejected follows a rejected version of the policy file.
func (s *server) rejected(err error) {
	if s.console != nil {
		s.console.rejected(err)
	}
}

// listen builds the gateway, opens every listener and starts serving, then
// says where on stdout.
func (s *server) listen(stdout io.Writer) error {
	var upstream *url.URL
	adminScheme := "http"
	if s.cfg.demo {
		var err error
		if s.demo, err = demo.Start("127.0.0.1:0"); err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		upstream, _ = url.Parse(s.demo.URL)
	}
	matcher, err := gateway.NewPolicyMatcher(s.reloader, gateway.PolicyMatcherOptions{
		Upstream: upstream, OnInvalidToken: s.metrics.InvalidToken, Logger: s.log})
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	files := s.fileBudget()
	alog, err := s.openAccessLog(stdout)
	if err != nil {
		return err
	}
	g, err := gateway.New(gateway.Options{
		Matcher:        matcher,
		Engine:         s.engine,
		Fields:         gateway.FieldOptions(s.srv.Headers),
		Observer:       s.metrics,
		Logger:         s.log,
		MethodOverride: gateway.MethodOverrideOf(s.srv.MethodOverride),
		Upstream: gateway.TransportOptions{
			DialTimeout:           s.srv.Upstream.DialTimeout,
			ResponseHeaderTimeout: s.srv.Upstream.Timeout,
			IdleConnTimeout:       s.srv.Upstream.IdleTimeout,
			MaxConnsPerHost:       files.upstreamPerHost,
			DrainTimeout:          s.srv.Upstream.DrainTimeout,
			DrainBytes:            s.srv.Upstream.DrainBytes,
		},
		AccessLog: alog,
	})
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	s.gateway.Store(g)
	ln, err := net.Listen("tcp", firstNonEmpty(s.cfg.listen, s.srv.Listen, config.DefaultListen))
	if err != nil {
		return fmt.Errorf("serve: listen: %w", err)
	}
	s.conns = newConnLimit(ln, files.connections)
	s.frontLn = s.conns
	t := s.srv.Timeouts
	s.front = &http.Server{
		Handler:           s.tracing.handler(g, "gateway"),
		ReadHeaderTimeout: t.ReadHeader,
		ReadTimeout:       t.Read,
		WriteTimeout:      t.Write,
		IdleTimeout:       t.Idle,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		// HTTP/2 with prior knowledge (h2c) is served, never mistaken for an
		// HTTP/1 request with the method PRI and forwarded.
		Protocols: new(http.Protocols),
	}
	s.front.Protocols.SetHTTP1(true)
	s.front.Protocols.SetUnencryptedHTTP2(true)
	if admin := firstNonEmpty(s.cfg.adminListen, s.srv.AdminListen); admin != "off" && admin != "" {
		if s.adminLn, err = net.Listen("tcp", admin); err != nil {
			return fmt.Errorf("serve: admin listen: %w", err)
		}
		ln, scheme, err := s.console.listener(s.adminLn)
		if err != nil {
			return err
		}
		s.adminLn, adminScheme = ln, scheme
		s.admin = &http.Server{Handler: s.adminHandler(), ReadHeaderTimeout: 5 * time.Second}
	}
	s.services, err = startDecisionServices(s, stdout)
	if err != nil {
		return err
	}
	s.serving = true
	s.serveFront(g)
	if s.admin != nil {
		go func() { s.errc <- s.admin.Serve(s.adminLn) }()
	}
	// Ready before the lines are printed: whoever reads the admin line may
	// ask /readyz at once. The admin line comes last: scripts and tests
	// wait for it.
	s.ready.Store(true)
	base := "http://" + displayAddr(s.frontLn.Addr())
	fmt.Fprintf(stdout, "floodgate: gateway on %s (store %s, engine %s)\n", base, s.srv.StoreKind(), s.engineName)
	if s.demo != nil {
		printDemo(stdout, base, s.demo.URL, s.adminLn, servesChat(s.reloader.Policy()))
	}
	if s.adminLn != nil {
		fmt.Fprintf(stdout, "floodgate: admin on %s://%s (/healthz, /readyz, /metrics, /api/v1/, /ui/)\n", adminScheme, displayAddr(s.adminLn.Addr()))
	}
	return nil
}

// fileBudget shares the open files between client connections and
// upstream connections, leaving room for the admin listener, the store and
// the rest: a flood of connections is answered 503 before it can run the
// process out of file descriptors.
type fileBudget struct {
	connections     int // client connections served at once
	upstreamPerHost int // connections to one upstream host
}

func (s *server) fileBudget() fileBudget {
	limit, err := raiseFileLimit()
	if err != nil {
		s.log.Warn("could not read the open-file limit", "err", err)
	}
	s.log.Info("open-file limit", "limit", limit)
	b := fileBudget{connections: s.srv.MaxConnections, upstreamPerHost: s.srv.Upstream.MaxConnsPerHost}
	// A limit that is unknown or effectively unlimited still gets bounds.
	n := int(min(limit, 1<<20))
	if n <= 0 {
		n = 1 << 20
	}
	if b.connections == 0 {
		b.connections = max(n/2, 64)
	}
	if b.upstreamPerHost == 0 {
		b.upstreamPerHost = max(n/4, 32)
	}
	return b
}

// adminHandler serves /healthz, /readyz, /metrics and POST /v1/explain,
// to requests that name the listener by a host it answers to (adminHosts).
func (s *server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", metricsHandler(s.registry, s.log))
	s.console.routes(mux)
	s.handleExplain(mux)
	return adminHosts(s.srv.Admin.Hosts, mux)
}

// readyz answers whether the process serves: 503 before it is ready and
// while it shuts down; otherwise 200, with "ready" or, while decisions are
// made by the failure policies (the store's circuit breaker is open) or
// the state file cannot be written, "degraded" and the reasons. Traffic
// still gets answers while degraded, as each limit's on_failure says, so a
// load balancer should keep sending it; "?strict" answers 503 instead, for
// the deployments that would rather route around a degraded instance.
func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !s.ready.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "not ready\n")
		return
	}
	reasons := s.degraded()
	if len(reasons) == 0 {
		_, _ = io.WriteString(w, "ready\n")
		return
	}
	if r.URL.Query().Has("strict") {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = io.WriteString(w, "degraded: "+strings.Join(reasons, "; ")+"\n")
}

// degraded lists why the process is not fully healthy.
func (s *server) degraded() []string {
	var out []string
	if st := s.engine.Stats(); st.BreakerOpen {
		out = append(out, "the store does not answer (circuit breaker open): limits follow their on_failure")
	}
	if ms, ok := s.store.(*memstore.Store); ok {
		if err := ms.Stats().LastSnapshotError; err != nil {
			out = append(out, "the state file cannot be written: "+err.Error())
		}
	}
	return out
}

// run serves until ctx ends or a listener fails, reloading the policy on
// SIGHUP.
func (s *server) run(ctx context.Context) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
			if err := s.reloader.Reload(); err != nil {
				s.log.Error("reload rejected; the running policy stays", "err", err)
			} else {
				s.log.Info("reloaded", "config", s.cfg.config, "reloads", s.reloader.Reloads())
			}
		case err := <-s.errc:
			return fmt.Errorf("serve: %w", err)
		}
	}
}

// shutdown stops gracefully: not ready any more, stop accepting, let
// requests in flight finish, then close the stores (the memory store
// writes its state).
func (s *server) shutdown(ctx context.Context) error {
	s.ready.Store(false)
	s.log.Info("shutting down", "timeout", s.cfg.shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.shutdownTimeout)
	defer cancel()
	s.shutdownFront(sctx)
	s.services.Shutdown()
	if s.admin != nil {
		_ = s.admin.Shutdown(sctx)
	}
	// Units held by leased limits go back to the store for the other
	// instances.
	if err := s.engine.ReturnLeases(sctx); err != nil {
		s.log.Warn("returning leased units", "err", err)
	}
	if err := s.tracing.shutdown(sctx); err != nil {
		s.log.Warn("flushing the traces", "err", err)
	}
	return s.close()
}

// close releases what is still open: listeners that never served, the demo
// upstream and the stores. It is safe to call twice.
func (s *server) close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	if !s.serving {
		for _, ln := range []net.Listener{s.frontLn, s.adminLn} {
			if ln != nil {
				ln.Close()
			}
		}
		if s.services != nil {
			s.services.Shutdown()
		}
	}
	s.console.close()
	s.closeAccessLog()
	if s.demo != nil {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.demo.Close(c)
		cancel()
	}
	if s.stopMemLimit != nil {
		s.stopMemLimit()
	}
	if err := s.closeStores(); err != nil {
		s.log.Error("closing the store", "err", err)
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// serveOpenStore opens the store the settings name: the memory store (with
// its state file) or Redis, with a memory store for the limits that fall
// back to a local share when Redis fails.
func serveOpenStore(srv *config.Server, statePath string, exactClock bool, log *slog.Logger) (store, local limiter.Store, closeAll func() error, err error) {
	if srv.StoreKind() == "memory" {
		o := memstore.Options{StatePath: statePath, MaxBytes: srv.Memory.MaxBytes, Logger: log}
		if exactClock {
			// The system clocks read at every decision: the wall clock for
			// quotas, the monotonic one for everything else, as the
			// cached default does.
			start := time.Now()
			o.Now = func() int64 { return time.Now().UnixNano() }
			o.Elapsed = func() time.Duration { return time.Since(start) }
		}
		ms, err := memstore.New(o)
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
	rs, err := redisstore.New(redisstore.Options{URL: srv.Store, Logger: log,
		RefuseEvictable: srv.RedisEviction == config.RedisEvictionRefuse})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("serve: %w", err)
	}
	ls, err := memstore.New(memstore.Options{MaxBytes: srv.Memory.MaxBytes, Logger: log})
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

// servesChat reports whether a route of p takes OpenAI-style chat
// completions (examples/llm.yaml).
func servesChat(p *policy.Policy) bool {
	var m policy.Match
	p.Match(&policy.Request{Method: http.MethodPost, Path: "/v1/chat/completions", Header: http.Header{}}, &m)
	return m.Route != nil
}

// printDemo tells a newcomer where to send requests: to the school office,
// or with chat true to the demo's language model.
func printDemo(w io.Writer, base, upstream string, admin net.Listener, chat bool) {
	var b strings.Builder
	if chat {
		printChatDemo(&b, base, upstream, admin)
		io.WriteString(w, b.String())
		return
	}
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

// printChatDemo is printDemo for examples/llm.yaml.
func printChatDemo(b *strings.Builder, base, upstream string, admin net.Listener) {
	fmt.Fprintf(b, "floodgate: demo upstream (a small OpenAI-style model that reports its usage) on %s; every route goes there\n\n", upstream)
	fmt.Fprintf(b, "Try (per key 60 requests and 90,000 tokens a minute, per organisation 2,000,000 tokens a day):\n")
	q := "'{\"model\":\"demo\",\"max_tokens\":%d,%s\"messages\":[{\"role\":\"user\",\"content\":\"when is sports day\"}]}'"
	body := func(max int, stream bool) string {
		s := ""
		if stream {
			s = "\"stream\":true,"
		}
		return fmt.Sprintf(q, max, s)
	}
	fmt.Fprintf(b, "  # 1,000 tokens reserved, 38 used: the RateLimit fields show requests and tokens, 962 come back\n")
	fmt.Fprintf(b, "  curl -i -H 'Authorization: Bearer key-acme-dev' -d %s %s/v1/chat/completions\n", body(1000, false), base)
	fmt.Fprintf(b, "  # streamed: charged from the last event, which carries the usage\n")
	fmt.Fprintf(b, "  curl -N -H 'Authorization: Bearer key-acme-dev' -d %s %s/v1/chat/completions\n", body(20, true), base)
	fmt.Fprintf(b, "  # a stream that may take a whole minute's tokens holds them while in flight: the second request gets 429\n")
	fmt.Fprintf(b, "  curl -sN -o /dev/null -H 'Authorization: Bearer key-globex' -d %s %s/v1/chat/completions & sleep 0.2\n", body(90000, true), base)
	fmt.Fprintf(b, "  curl -s -o /dev/null -w '%%{http_code}\\n' -H 'Authorization: Bearer key-globex' -d %s %s/v1/chat/completions; wait\n", body(2000, false), base)
	fmt.Fprintf(b, "  curl -i -H 'Authorization: Bearer key-nobody' -d %s %s/v1/chat/completions   # unknown key: 403\n", body(10, false), base)
	if admin != nil {
		fmt.Fprintf(b, "  curl -s http://%s/metrics | grep '^floodgate_'\n", displayAddr(admin.Addr()))
	}
	b.WriteString("\n")
}
