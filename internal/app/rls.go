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
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

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
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startRLS loads the descriptor files, opens the service's listeners,
// serves them until shutdown and says where on stdout. Errors that end
// serving are sent to r.errc.
func (r *root) startRLS(stdout io.Writer) error {
	set := r.set.RLS
	s := &rlsService{set: set, log: r.log}
	r.rls = s
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
		timeout := r.set.Engine.Timeout
		if timeout <= 0 {
			timeout = limiter.DefaultTimeout
		}
		if pc := newPeerCounter(r.stores, timeout); pc != nil {
			opts.PeerCounter, opts.PeerKeys = pc, *set.PeerKeys
		}
	}
	s.svc = rls.New(r.engine, cfg, opts)

	so := rls.ServerOptions{MaxConnectionAge: set.MaxConnectionAge, MaxConnectionAgeGrace: set.MaxConnectionAgeGrace,
		ExtraOptions: r.tracing.grpcOptions()}
	if s.stats != nil {
		so.ExtraOptions = append(so.ExtraOptions, grpc.UnaryInterceptor(s.stats.UnaryInterceptor()))
	}
	if set.TLS.On() {
		tc, err := set.TLS.Config()
		if err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		so.ExtraOptions = append(so.ExtraOptions, grpc.Creds(credentials.NewTLS(tc)))
	}
	var err error
	if s.grpc, err = rls.NewServer(s.svc, so); err != nil {
		return fmt.Errorf("%s: rate-limit service: %w", r.name, err)
	}
	var failing []string
	if set.HealthyWithConfig && (cfg == nil || len(cfg.Domains()) == 0) {
		failing = append(failing, rls.HealthConfig)
	}
	s.health = rls.NewHealth(s.grpc.Health, "ratelimit", []string{rls.HealthStopping}, failing...)

	if err := r.openRLSListeners(stdout); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	if s.statsd != nil {
		r.log.Info("rls: statistics sent to statsd", "addr", set.Statsd.Addr, "protocol", set.Statsd.Network, "every", set.Statsd.Interval)
		s.wg.Go(func() { s.flushStatsd(ctx, set.Statsd.Interval) })
	}
	if len(set.Paths) > 0 {
		s.wg.Go(func() {
			rls.Watch(ctx, s.svc, set.Paths, rls.WatchOptions{Load: set.Load, Logger: r.log, OnReload: func(err error) {
				s.stats.ObserveLoad(err)
				if err == nil {
					s.loaded(s.svc.Config())
				}
			}})
		})
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
// settings name, and says where on stdout.
func (r *root) openRLSListeners(stdout io.Writer) error {
	s, set := r.rls, r.set.RLS
	network := set.Network
	if network == "" {
		network = "tcp"
	}
	if err := r.openRLS(network, set.Addr, "gRPC (RLS v3)", stdout); err != nil {
		return err
	}
	if set.HTTPAddr != "" {
		api := http.NewServeMux()
		api.Handle("/json", r.tracing.handler(rls.JSONHandler(s.svc), "rls_json"))
		api.Handle("/healthcheck", s.health)
		if err := r.openRLSHTTP(api, set.HTTPAddr, "HTTP (/json, /healthcheck)", stdout); err != nil {
			return err
		}
	}
	mh := metricsHandler(r.registry, r.log)
	if set.DebugAddr != "" {
		debug := rls.DebugHandler(s.svc, map[string]rls.DebugEndpoint{
			"/metrics": {Help: "Prometheus metrics", Handler: mh},
		})
		if err := r.openRLSHTTP(debug, set.DebugAddr, "debug (/rlconfig, /metrics, /debug/pprof/)", stdout); err != nil {
			return err
		}
	}
	if set.PromAddr != "" {
		pm := http.NewServeMux()
		pm.Handle(set.PromPath, mh)
		if err := r.openRLSHTTP(pm, set.PromAddr, "Prometheus ("+set.PromPath+")", stdout); err != nil {
			return err
		}
	}

	return nil
}

// openRLS listens on addr and says so: "floodgate rls: gRPC (RLS v3) on
// ...", or for floodgate serve "floodgate: Envoy rate-limit service (RLS
// v3, gRPC) on ...".
func (r *root) openRLS(network, addr, what string, stdout io.Writer) error {
	if network == "unix" {
		_ = os.Remove(addr) // a socket left by an earlier run
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		if r.name == "serve" {
			return fmt.Errorf("serve: grpc listen: %w", err)
		}
		return fmt.Errorf("%s: listen %s: %w", r.name, what, err)
	}
	r.rls.lns = append(r.rls.lns, ln)
	if r.name == "serve" {
		fmt.Fprintf(stdout, "floodgate: Envoy rate-limit service (RLS v3, gRPC) on %s\n", displayAddr(ln.Addr()))
	} else {
		fmt.Fprintf(stdout, "floodgate %s: %s on %s\n", r.name, what, displayAddr(ln.Addr()))
	}
	return nil
}

// openRLSHTTP opens one of the service's HTTP listeners.
func (r *root) openRLSHTTP(h http.Handler, addr, what string, stdout io.Writer) error {
	// A request's head and body within 10 s (a /json body of up to 1 MiB
	// arriving a byte at a time is cut there), an idle kept-alive
	// connection closed after 2 min; no write timeout: the debug port
	// serves profiles that take their time.
	r.rls.https = append(r.rls.https, &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10})
	return r.openRLS("tcp", addr, what, stdout)
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
	if set.RLS == nil {
		return errors.New("rls: no rate-limit service in the settings")
	}
	r, err := newRoot(ctx, "rls", set, getenv, log)
	if err != nil {
		return err
	}
	defer r.closeStores()
	defer holdHeapReserve(set.RLS.HeapReserveMiB, getenv, log)()
	if err := r.startEngine(nil); err != nil {
		return err
	}
	err = r.startRLS(stdout)
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
