package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/floodgate/floodgate/accesslog"
	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/gateway/edge"
	"github.com/floodgate/floodgate/internal/console"
	"github.com/floodgate/floodgate/internal/demo"
	"github.com/floodgate/floodgate/internal/h2guard"
	"github.com/floodgate/floodgate/internal/hostcheck"
	"github.com/floodgate/floodgate/internal/sdnotify"
	"github.com/floodgate/floodgate/internal/tlsfile"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/rls"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memstore"
)

// ServeOptions are what floodgate serve's flags say.
type ServeOptions struct {
	// Config is the policy file.
	Config string
	// Demo starts the demo upstream and sends every route to it.
	Demo bool
	// Listen, AdminListen and OpsListen override server.listen,
	// server.admin_listen and server.ops_listen ("off" for no admin or
	// no ops listener).
	Listen, AdminListen, OpsListen string
	// Watch reloads the file when it changes (else on SIGHUP only).
	Watch bool
	// ShutdownTimeout bounds the requests in flight on shutdown.
	ShutdownTimeout time.Duration
	// AccessLog and AccessLogFormat override server.access_log's path
	// ("-": standard output, "off": none) and format.
	AccessLog, AccessLogFormat string
	// Engine overrides server.engine: fast or net/http.
	Engine string
	// StoreFile, when set, names a file holding the store URL, which
	// replaces server.store (a Redis URL with its password, from a mounted
	// Kubernetes Secret, kept out of the policy file). It is read once, at
	// start.
	StoreFile string
	// Getenv reads the OTEL_* variables of the tracing (os.Getenv).
	Getenv func(string) string
}

// Serve runs floodgate serve, the gateway, until ctx ends: its settings
// come from the policy file (and the flags in o); it serves Envoy's
// rate-limit service and the HTTP check API beside the gateway when the
// file names them.
func Serve(ctx context.Context, o *ServeOptions, stdout io.Writer, log *slog.Logger) error {
	// SIGHUP reloads. It is taken from the start, so that one sent while
	// serve starts (by a test, or by systemctl reload right after the
	// listeners open) waits for the loop below instead of ending the
	// process, as an unhandled SIGHUP does.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	s, err := newServer(ctx, o, log)
	if err != nil {
		return err
	}
	defer s.close()
	if o.Watch {
		// Before the listeners say they serve: a file written as soon
		// as they do is followed from its first write. The watch ends
		// with Serve, also when a listener does not open.
		wctx, stopWatch := context.WithCancel(ctx)
		defer stopWatch()
		s.reloader.Start(wctx)
	}
	if err := s.listen(stdout); err != nil {
		return err
	}
	// systemd (Type=notify) learns that every listener is open.
	s.systemd = newSystemd(s.getenv, log)
	s.systemd.tell(sdnotify.Ready, sdnotify.Status("serving"))
	log.Info("serving", "listen", s.frontLn.Addr().String(), "engine", s.engineLine(), "store", s.srv.StoreKind(), "config", o.Config)
	runErr := s.run(ctx, hup)
	if err := s.shutdown(ctx); err != nil && runErr == nil {
		runErr = err
	}
	log.Info("stopped")
	return runErr
}

// server is one running floodgate serve: the root (the store and the
// engine every front end shares, the metrics, the tracing, Envoy's
// rate-limit service), the policy, the console and the listeners.
type server struct {
	*root
	log      *slog.Logger
	cfg      *ServeOptions
	srv      *config.Server // the settings the process started with
	reloader *policy.Reloader
	gateway  atomic.Pointer[gateway.Gateway]
	routesMu sync.Mutex // serialises useRoutes
	// rlsFields is the rate-limit service on server.grpc_listen once it
	// is made (nil before, or without one), whose answers' fields follow
	// server.headers; rlsMu orders its first setting and a reload's.
	rlsMu     sync.Mutex
	rlsFields *rls.Service
	demo      *demo.Server
	console   *console.Console // the admin API, the dashboard and the alarms
	// accessLog is the access log, when there is one.
	accessLog *accesslog.Logger

	stopMemLimit func() // ends the soft memory limit's updates (memlimit.go)
	serving      bool   // the listeners are served (shutdown closes them)
	closed       bool

	frontLn, adminLn, opsLn net.Listener
	conns                   *connLimit
	front, admin, ops       *http.Server
	edge                    *edge.Engine // the edge engine, when it serves the gateway listener
	frontCerts              *certSet     // the gateway listener's certificates, with server.tls
	// h2cuts counts and logs the gateway's HTTP/2 connections cut for
	// spending their budget of frames that are not requests.
	h2cuts     *h2guard.Cuts
	engineName string
	api        *checkAPI // the HTTP check API, when server.api_listen names one
	// apiConns is the check API's listener once it is open, read by
	// /metrics (floodgate_connections_shed_total{listener="api"}) from
	// the other listeners, which may serve before it opens.
	apiConns atomic.Pointer[connLimit]
	ready    atomic.Bool
	systemd  systemd // tells systemd how serve is doing, when it asks
}

// newServer loads the policy and opens the root and the console.
func newServer(ctx context.Context, o *ServeOptions, log *slog.Logger) (*server, error) {
	s := &server{cfg: o, log: log, h2cuts: &h2guard.Cuts{Log: log.With("front", "serve")}}
	var err error
	s.reloader, err = policy.NewReloader(policy.ReloaderOptions{Path: o.Config, Logger: log, OnReload: s.reloaded,
		OnReject: s.rejected})
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	s.srv = s.reloader.Policy().Server()
	if o.StoreFile != "" {
		if s.srv, err = storeFromFile(s.srv, o.StoreFile); err != nil {
			return nil, err
		}
	}
	if admin := firstNonEmpty(o.AdminListen, s.srv.AdminListen); admin != "off" && admin != "" {
		if err := s.adminMayListen(admin); err != nil {
			return nil, err
		}
	}
	exact, err := s.exactStoreClock()
	if err != nil {
		return nil, err
	}
	// The files floodgate check looks at, looked at the same way before
	// anything is opened: a file the check refuses stops the start.
	if err := checkFiles(s.reloader.Policy().File(), s.srv, o, true); err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	set := policySettings(o.Config, s.srv, exact)
	if s.root, err = newRoot(ctx, "serve", set, o.Getenv, log); err != nil {
		return nil, err
	}
	if s.console, err = console.New(console.Options{ConfigPath: o.Config, StatePath: set.Store.Options.StatePath, Server: s.srv,
		Reloader: s.reloader, Store: s.stores.main, Registerer: s.registry, Logger: log}); err != nil {
		_ = s.stores.close()
		return nil, fmt.Errorf("serve: %w", err)
	}
	err = s.startEngine(s.console.Observer(s.metrics))
	if err == nil {
		err = s.console.Attach(s.engine, s.engine.Stats)
	}
	if err == nil {
		err = register(s.registry, s.serveMetrics())
	}
	if err != nil {
		s.console.Close()
		_ = s.stores.close()
		return nil, fmt.Errorf("serve: %w", err)
	}
	s.stopMemLimit = startMemLimit(s.srv.Memory.SoftLimit, s.srv.Memory.MaxBytes, s.storeBytes, s.getenv,
		func() int64 { return containerMemoryMax(cgroupRoot, selfCgroupFile) }, log)
	return s, nil
}

// storeBytes is the memory the embedded store counts for its keys: the
// store's, or with Redis the local fallback's.
func (r *root) storeBytes() int64 {
	var n int64
	for _, st := range []limiter.Store{r.stores.main, r.stores.local} {
		if ms, ok := st.(*memstore.Store); ok {
			n += ms.Stats().Bytes
		}
	}
	return n
}

// policySettings are the process settings of the policy file's server
// section: the memory store with its state file (with exact clocks when
// the access log is on) or the Redis store, the engine's deadlines, and
// Envoy's rate-limit service when grpc_listen names one. Relative paths
// are relative to the file at cfgPath.
func policySettings(cfgPath string, srv *config.Server, exactClock bool) *Settings {
	rel := func(p string) string { return relTo(cfgPath, p) }
	eo := gateway.EngineOptions(srv) // as a Guard, explain and a replay take them
	set := &Settings{
		Store: Store{URL: srv.Store, Options: store.Options{MaxBytes: srv.Memory.MaxBytes,
			RefuseEvictable: srv.RedisEviction == config.RedisEvictionRefuse}},
		Engine: Engine{Timeout: eo.Timeout, HardTimeout: eo.HardTimeout, MaxKeyBytes: eo.MaxKeyBytes, Instances: eo.Instances},
	}
	if srv.StoreKind() == "memory" {
		set.Store.URL = "memory"
		set.Store.Options.StatePath, set.Store.Options.ExactClock = console.StateFile(cfgPath, srv), exactClock
	}
	if srv.GRPCListen != "" {
		paths := make([]string, len(srv.RLSConfig))
		for i, p := range srv.RLSConfig {
			paths[i] = rel(p)
		}
		set.RLS = &RLS{Addr: srv.GRPCListen, Paths: paths,
			TLS: TLS{Cert: rel(srv.GRPCTLSCert), Key: rel(srv.GRPCTLSKey), ClientCA: rel(srv.GRPCTLSClientCA),
				ClientSAN: srv.GRPCTLSClientSAN, Source: "server.grpc_tls_cert", CASource: "server.grpc_tls_client_ca"},
			// envoyproxy/ratelimit's statistics, under its names, so
			// that the dashboards of a migrating deployment keep working.
			Stats: &rls.StatsOptions{},
			// server.headers shapes its answers' fields as the gateway's:
			// the same switches, from the one place that reads them.
			Service: rls.Options{Fields: gateway.FieldOptions(srv.Headers)}}
	}
	return set
}

// relTo is p relative to the directory of the file at cfgPath, as the
// file's other paths are ("" stays "").
func relTo(cfgPath, p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(filepath.Dir(cfgPath), p)
}

// reloaded follows a new version of the policy file: limits, routes,
// keys, identity and field settings follow it; the process-level settings
// need a restart.
func (s *server) reloaded(p *policy.Policy) {
	if g := s.gateway.Load(); g != nil {
		g.ForgetUpstreams()
		s.useRoutes(g)
	}
	n, first := p.Server(), s.srv
	if first != nil && s.cfg.StoreFile != "" {
		cp := *n // server.store is the store file's: only the other settings can change
		cp.Store = first.Store
		n = &cp
	}
	if first != nil {
		if changed := startOnlyChanges(first, n); len(changed) > 0 {
			s.log.Warn("reloaded: these settings change only on restart and keep their values until then (the certificates' files are read again as they change, or on SIGHUP)",
				"settings", strings.Join(changed, ", "))
		}
	}
	s.rlsMu.Lock()
	if s.rlsFields != nil {
		// Its answers' fields follow server.headers as the gateway's do.
		s.rlsFields.SetFields(gateway.FieldOptions(n.Headers))
	}
	s.rlsMu.Unlock()
	if s.console != nil {
		s.console.Reloaded(p)
	}
}

// startOnlyChanges names the settings of server that serve applies only
// at its start and that n, a reloaded file's, changes from first's.
func startOnlyChanges(first, n *config.Server) []string {
	var out []string
	add := func(changed bool, name string) {
		if changed {
			out = append(out, name)
		}
	}
	add(n.Store != first.Store, "server.store")
	add(n.StateFile != first.StateFile, "server.state_file")
	add(n.Listen != first.Listen || n.AdminListen != first.AdminListen || n.OpsListen != first.OpsListen ||
		n.GRPCListen != first.GRPCListen || n.APIListen != first.APIListen, "listen addresses")
	add(n.StoreTimeout != first.StoreTimeout || n.StoreHardTimeout != first.StoreHardTimeout, "store timeouts")
	add(n.Instances != first.Instances, "server.instances")
	add(n.Upstream.Transport() != first.Upstream.Transport(), "server.upstream")
	add(n.Timeouts != first.Timeouts, "server.timeouts")
	add(n.MaxConnections != first.MaxConnections, "server.max_connections")
	add(n.Memory != first.Memory, "server.memory")
	add(n.MethodOverride != first.MethodOverride, "server.method_override")
	add(n.Engine != first.Engine, "server.engine")
	add(!reflect.DeepEqual(n.TLS, first.TLS), "server.tls")
	add(n.GRPCTLSCert != first.GRPCTLSCert || n.GRPCTLSKey != first.GRPCTLSKey ||
		n.GRPCTLSClientCA != first.GRPCTLSClientCA || n.GRPCTLSClientSAN != first.GRPCTLSClientSAN, "server.grpc_tls_*")
	add(n.APITLSCert != first.APITLSCert || n.APITLSKey != first.APITLSKey ||
		n.APITLSClientCA != first.APITLSClientCA || n.APITLSClientSAN != first.APITLSClientSAN, "server.api_tls_*")
	add(n.APIAuth != first.APIAuth, "server.api_auth")
	add(!reflect.DeepEqual(n.Admin.Hosts, first.Admin.Hosts), "server.admin.hosts")
	add(!reflect.DeepEqual(n.OpsHosts, first.OpsHosts), "server.ops_hosts")
	add(n.Admin.TLSCert != first.Admin.TLSCert || n.Admin.TLSKey != first.Admin.TLSKey ||
		n.Admin.TLSClientCA != first.Admin.TLSClientCA || n.Admin.TLSClientSAN != first.Admin.TLSClientSAN, "server.admin.tls_*")
	add(n.Admin.KeysFile != first.Admin.KeysFile, "server.admin.keys_file")
	add(n.RedisEviction != first.RedisEviction, "server.redis_eviction")
	add(!reflect.DeepEqual(n.AccessLog, first.AccessLog), "server.access_log")
	return out
}

// storeFromFile is srv with the store URL of the file at path in place of
// server.store (white space around it ignored).
func storeFromFile(srv *config.Server, path string) (*config.Server, error) {
	b, err := tlsfile.Read(path)
	if err != nil {
		return nil, fmt.Errorf("serve: --store-file: %w", err)
	}
	u := strings.TrimSpace(string(b))
	if u == "" {
		return nil, fmt.Errorf("serve: --store-file %s: the file is empty; want a store URL such as redis://host:6379/0", path)
	}
	cp := *srv
	cp.Store = u
	return &cp, nil
}

// rejected follows a rejected version of the policy file.
func (s *server) rejected(err error) {
	if s.console != nil {
		s.console.Rejected(err)
	}
}

// listen builds the gateway, opens every listener and starts serving, then
// says where on stdout.
func (s *server) listen(stdout io.Writer) error {
	var upstream *url.URL
	adminScheme := "http"
	if s.cfg.Demo {
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
	upTLS, err := gateway.UpstreamTLSConfig(&s.srv.Upstream.TLS)
	if err != nil {
		return upstreamTLSError(err)
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
			TLS:                   upTLS,
		},
		AccessLog:     alog,
		Gatekeeper:    s.console.Gatekeeper(),
		Refusals:      s.console.Refusals(),
		SocketWatches: files.watches,
		SendTimeout:   s.srv.Timeouts.Send,
	})
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	s.gateway.Store(g)
	if s.console != nil {
		s.console.SampleOverload(func(each func(route string, limit int, latency time.Duration)) {
			g.OverloadStats(func(o gateway.OverloadStat) { each(o.Route, o.Limit, o.Latency) })
		})
	}
	s.useRoutes(g)
	ln, err := net.Listen("tcp", firstNonEmpty(s.cfg.Listen, s.srv.Listen, config.DefaultListen))
	if err != nil {
		return fmt.Errorf("serve: listen: %w", err)
	}
	s.conns = newConnLimit(ln, files.connections)
	s.frontLn = s.conns
	t := s.srv.Timeouts
	s.front = &http.Server{
		// A connection must begin its first request within read_header
		// (firstrequest.go): net/http bounds no HTTP/2 connection so.
		Handler:           firstRequestBegins(s.tracing.handler(g, "gateway")),
		ReadHeaderTimeout: t.ReadHeader,
		ReadTimeout:       t.Read,
		WriteTimeout:      t.Write,
		IdleTimeout:       t.Idle,
		MaxHeaderBytes:    64 << 10,
		// OPTIONS * is answered by the gateway, as net/http's server
		// would, and access-logged like the rest.
		DisableGeneralOptionsHandler: true,
		// Its lines (a failed TLS handshake, for one) are a client's to
		// cause: held back to one a second, as the log package's are.
		ErrorLog: log.New(newStdLogWriter(s.log, time.Now), "", 0),
		// The gateway watches a waiting request's connection for its
		// client leaving (also as the edge engine's Fallback).
		ConnContext: boundFirstRequest(t.ReadHeader, gateway.ConnContext),
		ConnState:   firstRequestEnds(nil),
		// HTTP/2 with prior knowledge (h2c) is served, never mistaken for an
		// HTTP/1 request with the method PRI and forwarded.
		Protocols: new(http.Protocols),
		// An HTTP/2 client that stops reading its socket is cut as one
		// that grants no window is (gateway.Options.SendTimeout).
		HTTP2: &http.HTTP2Config{WriteByteTimeout: h2WriteBound(t)},
	}
	s.front.Protocols.SetHTTP1(true)
	s.front.Protocols.SetUnencryptedHTTP2(true)
	if err := s.serveTLS(); err != nil {
		return err
	}
	// A client's HTTP/2 frames that are not requests (PINGs, SETTINGS,
	// WINDOW_UPDATEs...) are held to a budget (internal/h2guard).
	if err := h2guard.Install(s.front, s.h2cuts); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if admin := firstNonEmpty(s.cfg.AdminListen, s.srv.AdminListen); admin != "off" && admin != "" {
		if s.adminLn, err = net.Listen("tcp", admin); err != nil {
			return fmt.Errorf("serve: admin listen: %w", err)
		}
		limited := newConnLimit(s.adminLn, files.side)
		ln, scheme, err := s.adminTLS(limited)
		if err != nil {
			return err
		}
		if scheme == "https" {
			limited.speaksTLS()
		}
		s.adminLn, adminScheme = ln, scheme
		s.admin = sideServer(s.adminHandler())
	}
	if ops := firstNonEmpty(s.cfg.OpsListen, s.srv.OpsListen); ops != "off" && ops != "" {
		if s.opsLn, err = net.Listen("tcp", ops); err != nil {
			return fmt.Errorf("serve: ops listen: %w", err)
		}
		s.opsLn = newConnLimit(s.opsLn, files.side)
		s.ops = sideServer(s.opsHandler())
	}
	if s.set.RLS != nil {
		if err := s.startRLS(stdout); err != nil {
			return err
		}
		// Made with the headers of the file at start: a reload since
		// then (the file is watched from before the listeners open)
		// gives its own.
		s.rlsMu.Lock()
		s.rlsFields = s.rls.svc
		s.rlsFields.SetFields(gateway.FieldOptions(s.reloader.Policy().Server().Headers))
		s.rlsMu.Unlock()
	}
	if s.api, err = s.startCheckAPI(stdout, files.api); err != nil {
		return err
	}
	s.serving = true
	s.serveFront(g)
	if s.admin != nil {
		go func() { s.errc <- s.admin.Serve(s.adminLn) }()
	}
	if s.ops != nil {
		go func() { s.errc <- s.ops.Serve(s.opsLn) }()
	}
	// Ready before the lines are printed: whoever reads the admin line may
	// ask /readyz at once. The admin line comes last: scripts and tests
	// wait for it.
	s.ready.Store(true)
	base := s.frontScheme() + "://" + displayAddr(s.frontLn.Addr())
	fmt.Fprintf(stdout, "floodgate: gateway on %s (store %s, engine %s)\n", base, s.srv.StoreKind(), s.engineName)
	if s.demo != nil {
		printDemo(stdout, base, s.demo.URL, s.adminLn, servesChat(s.reloader.Policy()))
	}
	if s.opsLn != nil {
		fmt.Fprintf(stdout, "floodgate: ops on http://%s (/healthz, /readyz, /metrics)\n", displayAddr(s.opsLn.Addr()))
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
	side            int // connections to the admin listener, and to the ops one
	api             int // connections to the check API
	watches         int // the net/http engine's socket watches (gateway.Options.SocketWatches)
}

func (s *server) fileBudget() fileBudget {
	limit, err := raiseFileLimit()
	if err != nil {
		s.log.Warn("could not read the open-file limit", "err", err)
	}
	s.log.Info("open-file limit", "limit", limit)
	b := fileBudget{connections: s.srv.MaxConnections, upstreamPerHost: s.srv.Upstream.MaxConnsPerHost}
	// A limit that is unknown or effectively unlimited still gets bounds.
	n := countedFiles(limit)
	if b.connections == 0 {
		b.connections = callerConns(n)
	}
	if b.upstreamPerHost == 0 {
		b.upstreamPerHost = max(n/4, 32)
	}
	// Probes, scrapes and operators need few connections; a client that
	// holds more must not take the descriptors the gateway serves with.
	b.side = sideConns(n)
	b.api = apiConns(n)
	b.watches = socketWatches(n)
	return b
}

// h2WriteBound is how long a write to an HTTP/2 connection of the gateway
// listener may make no progress before the connection is closed: the send
// bound, else the write bound (0: none). The send bound resets a stream
// whose write waits for window; but a client that grants window and then
// stops reading its socket leaves the connection's writer stuck on the
// full socket, and the reset is never written: net/http closes the stream
// only once it is, so the stream, its handler, its leases and its upstream
// exchange were held for as long as the client kept the connection (the
// idle timeout's GOAWAY is stuck behind the same write). HTTP/1 needs no
// such bound: the send bound's deadline is the connection's.
func h2WriteBound(t config.Timeouts) time.Duration {
	switch {
	case t.Send > 0:
		return t.Send
	case t.Write > 0:
		return t.Write
	}
	return 0
}

// sideServer is the HTTP server of the admin or ops listener: a request
// within 10 s of its first byte, its answer within 30 s, a kept-alive
// connection closed after a minute idle.
func sideServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 64 << 10}
}

// adminHandler serves the ops routes (opsRoutes), the admin API, the
// dashboard and POST /v1/explain, to requests that name the listener by a
// host it answers to (adminHosts).
func (s *server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	s.opsRoutes(mux)
	s.console.Routes(mux)
	s.handleExplain(mux)
	return console.AdminHosts(s.srv.Admin.Hosts, mux)
}

// opsHandler serves the ops listener: the ops routes and nothing else, so
// that probes and scrapes can reach it from anywhere without reaching any
// data about keys. It answers, as the admin listener does, only requests
// that name it by an IP address (a probe or a scrape of the pod's
// address), localhost or a name in server.ops_hosts (a service's name), on
// any address it is bound to: a page a browser opens, whose name was made
// to resolve to 127.0.0.1 or to the pod's address (DNS rebinding), cannot
// read /metrics (routes, upstreams, shed tenants) as its own origin.
func (s *server) opsHandler() http.Handler {
	mux := http.NewServeMux()
	s.opsRoutes(mux)
	return hostcheck.Handler(hostcheck.Options{Listener: "ops", Setting: "server.ops_hosts", Names: s.srv.OpsHosts}, mux)
}

// opsRoutes are GET /healthz, /readyz and /metrics.
func (s *server) opsRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", metricsHandler(s.registry, s.log))
}

// adminMayListen refuses an admin listener on addr when addr is not a
// loopback address and server.admin.tokens lists no token: the dashboard
// would then show every key's use, and /metrics every limit's, to whoever
// reaches it.
func (s *server) adminMayListen(addr string) error {
	if len(s.srv.Admin.Tokens) > 0 || isLoopback(addr) {
		return nil
	}
	return fmt.Errorf("serve: the admin listener's address %s is not a loopback address and server.admin.tokens lists no token: "+
		"it would serve the dashboard's data about keys to whoever reaches it. List admin tokens in server.admin.tokens "+
		"(floodgate key new makes one), or bind server.admin_listen (--admin-listen) to 127.0.0.1, or turn it off; "+
		"probes and scrapes belong on server.ops_listen (--ops-listen), which serves /healthz, /readyz and /metrics only", addr)
}

// isLoopback reports whether the host of addr is a loopback address or
// localhost. An empty host, an unspecified address and every other name
// are not: they may be reached from other machines.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
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
		out = append(out, "the store does not answer (circuit breaker open; on a Redis Cluster, maybe for one node's slots only): limits follow their on_failure")
	}
	if ms, ok := s.stores.main.(*memstore.Store); ok {
		if err := ms.Stats().LastSnapshotError; err != nil {
			out = append(out, "the state file cannot be written: "+err.Error())
		}
	}
	return append(out, s.poolsDown()...)
}

// run serves until ctx ends or a listener fails, reloading the policy on
// each SIGHUP from hup (those sent since serve began included) and telling
// systemd's watchdog, when it has one, that this loop still turns. The
// reloads run on a goroutine of their own, one at a time, so that one that
// takes long (a file on a hung network disk) holds up neither the watchdog
// nor the end of serve: run returns when ctx ends whatever a reload does.
func (s *server) run(ctx context.Context, hup <-chan os.Signal) error {
	watchdog, stop := s.systemd.watchdog()
	defer stop()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// One SIGHUP waiting is enough: the reload it starts reads the files
	// as they are then.
	reload := make(chan struct{}, 1)
	go func() {
		for {
			select {
			case <-rctx.Done():
				return
			case <-reload:
				s.reload()
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-watchdog:
			s.systemd.tell(sdnotify.Watchdog)
		case <-hup:
			select {
			case reload <- struct{}{}:
			default:
			}
		case err := <-s.errc:
			return fmt.Errorf("serve: %w", err)
		}
	}
}

// reload reloads the certificates and the policy, for SIGHUP.
func (s *server) reload() {
	s.systemd.tell(sdnotify.Reloading()...)
	s.reloadCertificates()
	s.rls.reloadNow() // the rate-limit service's descriptor files, if any
	if err := s.reloader.Reload(); err != nil {
		s.log.Error("reload rejected; the running policy stays", "err", err)
	} else {
		s.log.Info("reloaded", "config", s.cfg.Config, "reloads", s.reloader.Reloads())
	}
	s.systemd.tell(sdnotify.Ready, sdnotify.Status("serving"))
}

// shutdown stops gracefully: not ready any more, stop accepting, let
// requests in flight finish, then close the stores (the memory store
// writes its state).
func (s *server) shutdown(ctx context.Context) error {
	s.systemd.tell(sdnotify.Stopping, sdnotify.Status("draining"))
	s.ready.Store(false)
	s.log.Info("shutting down", "timeout", s.cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	s.shutdownFront(sctx)
	if g := s.gateway.Load(); g != nil {
		g.CloseRoutes()
	}
	s.api.shutdown()
	s.rls.shutdown(sctx)
	if s.admin != nil {
		_ = s.admin.Shutdown(sctx)
	}
	if s.ops != nil {
		_ = s.ops.Shutdown(sctx)
	}
	s.root.shutdown(sctx)
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
		for _, ln := range []net.Listener{s.frontLn, s.adminLn, s.opsLn} {
			if ln != nil {
				ln.Close()
			}
		}
		s.api.shutdown()
		s.rls.shutdown(context.Background())
	}
	if s.console != nil {
		s.console.Close()
	}
	s.closeAccessLog()
	if s.demo != nil {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.demo.Close(c)
		cancel()
	}
	if s.stopMemLimit != nil {
		s.stopMemLimit()
	}
	return s.closeStores()
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
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

// adminListenerTLS is the admin listener's TLS in the settings a of the
// policy file at cfgPath.
func adminListenerTLS(cfgPath string, a *config.Admin) TLS {
	rel := func(p string) string { return relTo(cfgPath, p) }
	return TLS{Cert: rel(a.TLSCert), Key: rel(a.TLSKey), ClientCA: rel(a.TLSClientCA), ClientSAN: a.TLSClientSAN,
		Source: "server.admin.tls_cert", CASource: "server.admin.tls_client_ca"}
}

// adminTLS serves the admin listener over TLS when the file says so, its
// certificate read again when it changes.
func (s *server) adminTLS(ln net.Listener) (net.Listener, string, error) {
	t := adminListenerTLS(s.cfg.Config, &s.srv.Admin)
	t.Log = s.log
	if !t.On() {
		return ln, "http", nil
	}
	tc, err := t.Config()
	if err != nil {
		return nil, "", fmt.Errorf("serve: admin TLS: %w", err)
	}
	return tls.NewListener(ln, tc), "https", nil
}
