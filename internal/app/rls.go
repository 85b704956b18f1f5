package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/internal/h2guard"
	"github.com/floodgate/floodgate/internal/hostcheck"
	"github.com/floodgate/floodgate/internal/sdnotify"
	"github.com/floodgate/floodgate/internal/statsd"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/rls"
)

// rlsService is Envoy's rate-limit service of a process, with the HTTP
// listeners of floodgate rls beside it.
type rlsService struct {
	set    *RLS
	log    *slog.Logger
	stats  *rls.Stats
	statsd *statsd.Client // nil without statsd
	svc    *rls.Service
	grpc   *rls.Server
	health *rls.Health
	https  []*http.Server
	lns    []net.Listener // the gRPC listener, then one per server of https
	conns  rlsConns       // the caps of the listeners
	reload chan struct{}  // asks the watch of the descriptor files for a look at once (nil: no files)
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// rlsConns caps the connections each of the service's listeners serves at
// once; past its cap a listener turns a new connection away at once
// (connLimit), so that a client opening many cannot run the process out of
// the file descriptors the store reconnects with. A zero field is taken
// from the open-file limit (rlsConnsFor).
type rlsConns struct {
	grpc int // the gRPC listener: Envoy's calls
	http int // the HTTP listener: /json and /healthcheck
	side int // the debug listener, and the Prometheus one
}

// rlsConnsFor shares files open files between the service's listeners.
// Envoy's calls, whose callers may be the thousands of Envoys of a mesh,
// get half, as the gateway's callers do (callerConns), or a quarter when
// the service runs beside the gateway (beside), whose callers have the
// half; /json and /healthcheck a sixteenth; the debug and Prometheus
// listeners what serve's admin and ops listeners get (sideConns). With a
// limit of 1,024 or more, at least three-eighths stay for the store,
// statsd and the descriptor files whatever a flood holds.
func rlsConnsFor(files int, beside bool) rlsConns {
	c := rlsConns{grpc: callerConns(files), http: max(files/16, 64), side: sideConns(files)}
	if beside {
		c.grpc = max(files/4, 64)
	}
	return c
}

// or is c with its zero fields taken from d.
func (c rlsConns) or(d rlsConns) rlsConns {
	if c.grpc == 0 {
		c.grpc = d.grpc
	}
	if c.http == 0 {
		c.http = d.http
	}
	if c.side == 0 {
		c.side = d.side
	}
	return c
}

// startRLS loads the descriptor files, opens the service's listeners,
// serves them until shutdown and says where on stdout. Errors that end
// serving are sent to r.errc. The listeners' caps come from the open-file
// limit, which it raises to the hard limit (raiseFileLimit).
func (r *root) startRLS(stdout io.Writer) error {
	return r.startRLSCapped(stdout, rlsConns{})
}

// startRLSCapped is startRLS with the caps of conns where they are not
// zero.
func (r *root) startRLSCapped(stdout io.Writer, conns rlsConns) error {
	set := r.set.RLS
	s := &rlsService{set: set, log: r.log}
	r.rls = s
	limit, err := raiseFileLimit()
	if err != nil {
		r.log.Warn("rls: could not read the open-file limit", "err", err)
	}
	s.conns = conns.or(rlsConnsFor(countedFiles(limit), r.name == "serve"))
	r.log.Info("rls: connection caps", "open_files", limit, "grpc", s.conns.grpc, "http", s.conns.http, "debug", s.conns.side)
	if set.Stats != nil {
		so := *set.Stats
		if set.Statsd != nil {
			var err error
			if s.statsd, err = statsd.New(statsd.Options{Network: set.Statsd.Network, Addr: set.Statsd.Addr, Logger: r.log}); err != nil {
				return fmt.Errorf("%s: %w", r.name, err)
			}
			so.Statsd = s.statsd
		}
		var err error
		if s.stats, err = rls.NewStats(r.registry, so); err != nil {
			s.statsd.Close()
			return fmt.Errorf("%s: rate-limit service statistics: %w", r.name, err)
		}
	}
	var cfg *rls.Config
	if set.PathsMustExist {
		for _, p := range set.Paths {
			if _, err := os.Stat(p); err != nil {
				return fmt.Errorf("%s: descriptor files: %w (RUNTIME_WATCH_ROOT=false watches this directory, which must exist at start)", r.name, err)
			}
		}
	}
	if len(set.Paths) > 0 {
		var err error
		if set.WaitForConfig {
			cfg, err = rls.LoadOrWait(set.Paths, set.Load)
		} else {
			cfg, err = rls.Load(set.Paths, set.Load)
		}
		s.stats.ObserveLoad(err)
		switch {
		case err == nil:
			s.loaded(cfg)
		case set.WaitForConfig:
			r.log.Error("rls: configuration not loaded; every request is answered with an error until one loads", "err", err)
		case !set.ForceStart:
			return fmt.Errorf("%s: %w", r.name, err)
		default:
			r.log.Error("rls: configuration not loaded; starting without one (FORCE_START_WITHOUT_INITIAL_CONFIG)", "err", err)
		}
	} else {
		r.log.Warn("rls: RUNTIME_SUBDIRECTORY is empty: no descriptor files are read")
	}
	opts := set.Service
	opts.Logger, opts.Stats = r.log, s.stats
	if set.PeerKeys != nil {
		timeout, hard := r.set.Engine.Timeout, r.set.Engine.HardTimeout
		if timeout == 0 {
			timeout = limiter.DefaultTimeout
		}
		if hard == 0 {
			hard = limiter.DefaultHardTimeout
		}
		if pc := newPeerCounter(r.stores, timeout, hard); pc != nil {
			opts.PeerCounter, opts.PeerKeys = pc, *set.PeerKeys
		}
	}
	s.svc = rls.New(r.engine, cfg, opts)

	so := rls.ServerOptions{MaxConnectionAge: set.MaxConnectionAge, MaxConnectionAgeGrace: set.MaxConnectionAgeGrace,
		ExtraOptions: r.tracing.grpcOptions(), Logger: r.log.With("front", "rls")}
	if s.stats != nil {
		so.ExtraOptions = append(so.ExtraOptions, grpc.UnaryInterceptor(s.stats.UnaryInterceptor()))
	}
	if set.TLS.On() {
		t := set.TLS
		t.Log = r.log
		tc, err := t.Config()
		if err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		// As the service's own credentials, which hold each
		// connection's frames that are not calls to the budget (a
		// grpc.Creds among ExtraOptions would replace them).
		so.Creds = credentials.NewTLS(tc)
	}
	if s.grpc, err = rls.NewServer(s.svc, so); err != nil {
		return fmt.Errorf("%s: rate-limit service: %w", r.name, err)
	}
	var failing []string
	if set.HealthyWithConfig && (cfg == nil || len(cfg.Domains()) == 0) {
		failing = append(failing, rls.HealthConfig)
	}
	s.health = rls.NewHealth(s.grpc.Health, "ratelimit", []string{rls.HealthStopping}, failing...)

	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	if len(set.Paths) > 0 {
		// The watch follows the files before the listeners open and
		// print their addresses: a file written as soon as they do is
		// followed from its first write.
		s.reload = make(chan struct{}, 1)
		started := make(chan struct{})
		s.wg.Go(func() {
			rls.Watch(ctx, s.svc, set.Paths, rls.WatchOptions{Load: set.Load, Logger: r.log, Now: s.reload,
				Started: func() { close(started) },
				OnReload: func(err error) {
					s.stats.ObserveLoad(err)
					if err == nil {
						s.loaded(s.svc.Config())
					}
				}})
		})
		<-started
	}
	if err := r.openRLSListeners(stdout); err != nil {
		return err
	}
	if s.statsd != nil {
		r.log.Info("rls: statistics sent to statsd", "addr", set.Statsd.Addr, "protocol", set.Statsd.Network, "every", set.Statsd.Interval)
		s.wg.Go(func() { s.flushStatsd(ctx, set.Statsd.Interval) })
	}
	s.wg.Go(func() {
		if err := s.grpc.Serve(ctx, s.lns[0]); err != nil {
			r.errc <- fmt.Errorf("rate-limit service: %w", err)
		}
	})
	for i, hs := range s.https {
		go func() {
			if err := hs.Serve(s.lns[i+1]); err != nil && !errors.Is(err, http.ErrServerClosed) {
				r.errc <- fmt.Errorf("rate-limit service: http: %w", err)
			}
		}()
	}
	return nil
}

// openRLSListeners opens the service's gRPC listener and the HTTP ones the
// settings name, and says where on stdout. The connections the gRPC
// listener and the /json one shed are counted in the process's /metrics
// (floodgate_connections_shed_total{listener="rls_grpc"|"rls_http"}), and
// so are its gRPC connections cut for their HTTP/2 frames that are not
// calls (floodgate_http2_connections_cut_total{front="rls"}).
// Without the gRPC or the /json listener there is no service, and the
// error is returned; the debug port and the Prometheus address only serve
// operators, so one that cannot be opened (another process holds it) is
// logged as an error and the service runs without it, as
// envoyproxy/ratelimit does.
func (r *root) openRLSListeners(stdout io.Writer) error {
	s, set := r.rls, r.set.RLS
	network := set.Network
	if network == "" {
		network = "tcp"
	}
	grpcLn, err := r.openRLS(network, set.Addr, "gRPC (RLS v3)", s.conns.grpc, stdout)
	if err != nil {
		return err
	}
	sheds := []prometheus.Collector{shedCounter("rls_grpc", func() *connLimit { return grpcLn })}
	// Its HTTP/2 connections cut for their frames that are not calls.
	sheds = append(sheds, h2CutCounters("rls", func(k h2guard.Kind) int64 { return s.grpc.ConnectionsCut()[k.String()] })...)
	if set.HTTPAddr != "" {
		api := http.NewServeMux()
		api.Handle("/json", r.tracing.handler(rls.JSONHandler(s.svc), "rls_json"))
		api.Handle("/healthcheck", s.health)
		httpLn, err := r.openRLSHTTP(api, set.HTTPAddr, "HTTP (/json, /healthcheck)", s.conns.http, stdout)
		if err != nil {
			return err
		}
		sheds = append(sheds, shedCounter("rls_http", func() *connLimit { return httpLn }))
	}
	if err := register(r.registry, sheds); err != nil {
		return fmt.Errorf("%s: metrics: %w", r.name, err)
	}
	mh := metricsHandler(r.registry, r.log)
	// The debug port and the Prometheus address answer, as serve's admin
	// and ops listeners do, only requests that name them by an IP address,
	// localhost or a name of FLOODGATE_DEBUG_HOSTS: a page a browser opens,
	// its name made to resolve to the listener (DNS rebinding), cannot read
	// the descriptors, the statistics or the command line, nor run profiles.
	named := func(listener string, h http.Handler) http.Handler {
		return hostcheck.Handler(hostcheck.Options{Listener: listener, Setting: "FLOODGATE_DEBUG_HOSTS", Names: set.DebugHosts}, h)
	}
	if set.DebugAddr != "" {
		debug := named("debug", rls.DebugHandler(s.svc, map[string]rls.DebugEndpoint{
			"/metrics": {Help: "Prometheus metrics", Handler: mh},
		}))
		if _, err := r.openRLSHTTP(debug, set.DebugAddr, "debug (/rlconfig, /metrics, /debug/pprof/)", s.conns.side, stdout); err != nil {
			r.log.Error("rls: the debug port is not served; the rate-limit service runs without it", "addr", set.DebugAddr, "err", err)
		}
	}
	if set.PromAddr != "" {
		pm := http.NewServeMux()
		pm.Handle(set.PromPath, mh)
		if _, err := r.openRLSHTTP(named("Prometheus", pm), set.PromAddr, "Prometheus ("+set.PromPath+")", s.conns.side, stdout); err != nil {
			r.log.Error("rls: the Prometheus address is not served; the rate-limit service runs without it", "addr", set.PromAddr, "err", err)
		}
	}

	return nil
}

// openRLS listens on addr for the gRPC listener, serving at most conns
// connections at once and closing those past it unanswered, says so:
// "floodgate rls: gRPC (RLS v3) on ...", or for floodgate serve "floodgate:
// Envoy rate-limit service (RLS v3, gRPC) on ...", and returns the
// listener.
func (r *root) openRLS(network, addr, what string, conns int, stdout io.Writer) (*connLimit, error) {
	ln, err := r.listenRLS(network, addr, what, conns, stdout)
	if err != nil {
		return nil, err
	}
	// gRPC's clients speak HTTP/2 from their first byte: an HTTP/1 503
	// means nothing to them (connLimit.closesAtOnce).
	ln.closesAtOnce()
	return ln, nil
}

// listenRLS listens on addr, serving at most conns connections at once
// (answered 503 past it unless told otherwise), and says so on stdout. With
// RLS.ReusePort a TCP address is opened with SO_REUSEPORT, beside the
// listeners of another process there.
func (r *root) listenRLS(network, addr, what string, conns int, stdout io.Writer) (*connLimit, error) {
	var err error
	if network == "unix" {
		err = clearStaleSocket(addr)
	}
	var raw net.Listener
	if err == nil {
		var lc net.ListenConfig
		if r.set.RLS != nil && r.set.RLS.ReusePort && network != "unix" {
			lc.Control = reusePort
		}
		raw, err = lc.Listen(context.Background(), network, addr)
	}
	if err != nil {
		if r.name == "serve" {
			return nil, fmt.Errorf("serve: grpc listen: %w", err)
		}
		return nil, fmt.Errorf("%s: listen %s: %w", r.name, what, err)
	}
	ln := newConnLimit(raw, conns)
	r.rls.lns = append(r.rls.lns, ln)
	if r.name == "serve" { // its one listener, the gRPC one
		fmt.Fprintf(stdout, "floodgate: Envoy rate-limit service (RLS v3, gRPC) on %s\n", displayAddr(ln.Addr()))
	} else {
		fmt.Fprintf(stdout, "floodgate %s: %s on %s\n", r.name, what, displayAddr(ln.Addr()))
	}
	return ln, nil
}

// clearStaleSocket makes way for a Unix socket at path: it removes a
// socket there that nothing listens on (left by a process that ended
// without removing it), and refuses a path that is anything else, or the
// socket of a process still listening on it (removing that one would leave
// the running process unreachable, healthy as it looks).
func clearStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket; not removed", path)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("%s is the socket of a process listening on it", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%s: cannot tell whether a process listens on it: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// openRLSHTTP opens one of the service's HTTP listeners, serving at most
// conns connections at once and answering those past it 503, and returns
// the listener's cap (whose count of connections shed /metrics reads).
func (r *root) openRLSHTTP(h http.Handler, addr, what string, conns int, stdout io.Writer) (*connLimit, error) {
	// A request's head and body within 10 s (a /json body of up to 1 MiB
	// arriving a byte at a time is cut there), an idle kept-alive
	// connection closed after 2 min, and a connection whose client has
	// not taken a write for rls.DefaultWriteTimeout closed (rls.BoundWrites,
	// as the gRPC listener's): a client that sends requests and never
	// reads their answers holds its place no longer. net/http's
	// WriteTimeout is not used: it would cut the debug port's profiles,
	// which take their time before their first byte.
	ln, err := r.listenRLS("tcp", addr, what, conns, stdout)
	if err != nil {
		return nil, err
	}
	// Each server is added with its listener, so that one that could not
	// listen leaves none behind (startRLS serves https[i] on lns[i+1]).
	r.rls.https = append(r.rls.https, &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10})
	r.rls.lns[len(r.rls.lns)-1] = rls.BoundWrites(ln, 0)
	return ln, nil
}

// loaded logs a configuration that loaded and follows it in the health.
func (s *rlsService) loaded(cfg *rls.Config) {
	for _, w := range cfg.Warnings() {
		s.log.Warn("rls: configuration", "warning", w)
	}
	s.log.Info("rls: configuration loaded", "domains", cfg.Domains())
	if s.health != nil && s.set.HealthyWithConfig {
		s.health.Set(rls.HealthConfig, len(cfg.Domains()) > 0)
	}
}

// flushStatsd hands the statistics to statsd every interval until ctx
// ends, then once more, and closes the connection.
func (s *rlsService) flushStatsd(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.stats.FlushStatsd()
		case <-ctx.Done():
			s.stats.FlushStatsd()
			s.statsd.Close()
			return
		}
	}
}

// reloadNow has the descriptor files read and loaded at once (SIGHUP),
// rather than at the watch's next look; a look already asked for and not
// taken yet stands for this one.
func (s *rlsService) reloadNow() {
	if s == nil || s.reload == nil {
		return
	}
	select {
	case s.reload <- struct{}{}:
	default:
	}
}

// shutdown stops the service as envoyproxy/ratelimit does: unhealthy
// first (/healthcheck answers 500 and gRPC's health NOT_SERVING), then
// gRPC stops accepting and its calls in flight finish (within its grace
// period) while /healthcheck still answers, then the HTTP listeners stop
// (their requests in flight finish within ctx).
func (s *rlsService) shutdown(ctx context.Context) {
	if s == nil {
		return
	}
	if s.health != nil {
		s.health.Set(rls.HealthStopping, false)
	}
	if s.cancel != nil {
		s.log.Info("rls: draining: no new calls, /healthcheck answers 500 until the calls in flight finish")
		s.cancel()
	}
	s.wg.Wait()
	if s.grpc != nil {
		// A server that never served (a listener that did not open) still
		// has its stream workers; stopping one that served changes nothing.
		s.grpc.GRPC.Stop()
	}
	for _, hs := range s.https {
		_ = hs.Shutdown(ctx)
	}
	for _, ln := range s.lns {
		ln.Close() // those that never served
	}
}

// RunRLS runs Envoy's rate-limit service alone, as floodgate rls does,
// until ctx ends, then drains (rlsService.shutdown) and returns nil;
// getenv reads the OTEL_* variables of the tracing.
func RunRLS(ctx context.Context, set *Settings, getenv func(string) string, stdout io.Writer, log *slog.Logger) error {
	return runRLS(ctx, set, getenv, stdout, log, rlsConns{})
}

// runRLS is RunRLS with the listeners' caps of conns where they are not
// zero.
func runRLS(ctx context.Context, set *Settings, getenv func(string) string, stdout io.Writer, log *slog.Logger, conns rlsConns) error {
	if set.RLS == nil {
		return errors.New("rls: no rate-limit service in the settings")
	}
	// SIGHUP reads the descriptor files at once. It is taken from the
	// start, so that one sent while the service starts waits for the loop
	// below instead of ending the process, as an unhandled SIGHUP does.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	r, err := newRoot(ctx, "rls", set, getenv, log)
	if err != nil {
		return err
	}
	defer r.closeStores()
	defer holdHeapReserve(set.RLS.HeapReserveMiB, getenv, log)()
	// The soft memory limit as serve's (soft_limit: auto): the store's (or
	// the local fallback's) cap and what GOGC gives the rest, within nine
	// tenths of the container's memory limit, so that connections and
	// answers piling up make the collector work before the kernel kills
	// the process; GOMEMLIMIT (off included) takes precedence.
	capBytes := set.Store.Options.MaxBytes
	if capBytes <= 0 {
		capBytes = config.DefaultMemoryMaxBytes
	}
	defer startMemLimit("auto", capBytes, r.storeBytes, getenv,
		func() int64 { return containerMemoryMax(cgroupRoot, selfCgroupFile) }, log)()
	if err := r.startEngine(nil); err != nil {
		return err
	}
	err = r.startRLSCapped(stdout, conns)
	sd := newSystemd(getenv, log)
	if err == nil {
		// systemd (Type=notify) learns that both listeners are open.
		sd.tell(sdnotify.Ready, sdnotify.Status("serving"))
		watchdog, stop := sd.watchdog()
		defer stop()
	wait:
		for {
			select {
			case <-ctx.Done():
				break wait
			case <-watchdog:
				sd.tell(sdnotify.Watchdog)
			case <-hup:
				if r.rls.reload == nil {
					log.Info("rls: SIGHUP: no descriptor files to read")
				} else {
					log.Info("rls: SIGHUP: reading the descriptor files")
					r.rls.reloadNow()
				}
			case err = <-r.errc:
				err = fmt.Errorf("rls: %w", err)
				break wait
			}
		}
	}
	sd.tell(sdnotify.Stopping, sdnotify.Status("draining"))
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	r.rls.shutdown(sctx)
	r.shutdown(sctx)
	return err
}
