package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/floodgate/floodgate/limiter"
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
250ms), BACKEND_TYPE=memory uses the embedded store. See docs/envoy.md.

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
	env, notes, err := readRLSEnv(lookup, environ)
	if err != nil {
		return err
	}
	var h slog.Handler = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: env.logLevel})
	if env.logJSON {
		h = slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: env.logLevel})
	}
	log := slog.New(h)
	for _, n := range notes {
		if n.unsupported {
			log.Warn("rls: setting not supported", "variable", n.name, "why", n.msg)
		} else {
			log.Info("rls: setting without effect here", "variable", n.name, "why", n.msg)
		}
	}
	if *check {
		return rlsCheck(env, notes, stdout)
	}
	return serveRLS(ctx, env, stdout, log)
}

// rlsCheck loads the descriptor files and prints what was found.
func rlsCheck(env *rlsEnv, notes []envNote, stdout io.Writer) error {
	for _, n := range notes {
		kind := "without effect"
		if n.unsupported {
			kind = "not supported"
		}
		fmt.Fprintf(stdout, "%s: %s: %s\n", n.name, kind, n.msg)
	}
	if env.configDir == "" {
		fmt.Fprintln(stdout, "RUNTIME_SUBDIRECTORY is empty: no descriptor files are read")
		return nil
	}
	cfg, err := rls.Load([]string{env.configDir}, env.load)
	if err != nil {
		return &exitError{Code: 1, Err: err}
	}
	for _, w := range cfg.Warnings() {
		fmt.Fprintln(stdout, "warning:", w)
	}
	fmt.Fprintf(stdout, "%s: %d domains: %v\n", env.configDir, len(cfg.Domains()), cfg.Domains())
	return nil
}

// rlsServer is one running "floodgate rls".
type rlsServer struct {
	env      *rlsEnv
	log      *slog.Logger
	registry *prometheus.Registry
	stats    *rls.Stats
	svc      *rls.Service
	grpc     *rls.Server
	health   *rls.Health
	https    []*http.Server
	lns      []net.Listener
}

func serveRLS(ctx context.Context, env *rlsEnv, stdout io.Writer, log *slog.Logger) error {
	m, reg, err := newServeMetrics()
	if err != nil {
		return fmt.Errorf("rls: metrics: %w", err)
	}
	s := &rlsServer{env: env, log: log, registry: reg}
	if !env.disableStats {
		s.stats, err = rls.NewStats(reg, rls.StatsOptions{NearLimitRatio: env.nearRatio, ConstLabels: env.extraTags,
			ResponseTimeMilliseconds: env.promMillis})
		if err != nil {
			return err
		}
	}
	store, local, closeStores, err := openRLSStore(ctx, env, log)
	if err != nil {
		return err
	}
	defer closeStores()
	eng := limiter.New(store, limiter.Options{Timeout: env.storeTimeout, Local: local, Observer: m, Logger: log})

	var cfg *rls.Config
	if env.configDir != "" {
		cfg, err = rls.Load([]string{env.configDir}, env.load)
		s.stats.ObserveLoad(err)
		if err != nil {
			if !env.forceStart {
				return fmt.Errorf("rls: %w", err)
			}
			log.Error("rls: configuration not loaded; starting without one (FORCE_START_WITHOUT_INITIAL_CONFIG)", "err", err)
		} else {
			s.loaded(cfg)
		}
	} else {
		log.Warn("rls: RUNTIME_SUBDIRECTORY is empty: no descriptor files are read")
	}
	opts := env.service
	opts.Logger, opts.Stats = log, s.stats
	s.svc = rls.New(eng, cfg, opts)
	if err := s.listen(stdout); err != nil {
		s.close()
		return err
	}
	defer s.close()

	var wg sync.WaitGroup
	errc := make(chan error, 4)
	wctx, stopWatch := context.WithCancel(ctx)
	if env.configDir != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rls.Watch(wctx, s.svc, []string{env.configDir}, rls.WatchOptions{Load: env.load, Logger: log, OnReload: func(err error) {
				s.stats.ObserveLoad(err)
				if err == nil {
					s.loaded(s.svc.Config())
				}
			}})
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := s.grpc.Serve(ctx, s.lns[0]); err != nil {
			errc <- err
		}
	}()
	for i, hs := range s.https {
		go func() {
			if err := hs.Serve(s.lns[i+1]); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("rls: http: %w", err)
			}
		}()
	}
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	s.health.Set(rls.HealthStopping, false)
	stopWatch()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for _, hs := range s.https {
		_ = hs.Shutdown(sctx)
	}
	wg.Wait()
	return runErr
}

// loaded logs a configuration that loaded and follows it in the health.
func (s *rlsServer) loaded(cfg *rls.Config) {
	for _, w := range cfg.Warnings() {
		s.log.Warn("rls: configuration", "warning", w)
	}
	s.log.Info("rls: configuration loaded", "domains", cfg.Domains())
	if s.health != nil && s.env.healthyWithConfig {
		s.health.Set(rls.HealthConfig, len(cfg.Domains()) > 0)
	}
}

// listen opens the gRPC, HTTP, debug and Prometheus listeners and says
// where on stdout.
func (s *rlsServer) listen(stdout io.Writer) error {
	env := s.env
	so := rls.ServerOptions{MaxConnectionAge: env.maxConnAge, MaxConnectionAgeGrace: env.maxConnAgeGrace}
	if s.stats != nil {
		so.ExtraOptions = append(so.ExtraOptions, grpc.UnaryInterceptor(s.stats.UnaryInterceptor()))
	}
	if env.grpcTLS {
		tc, err := grpcTLS(env)
		if err != nil {
			return err
		}
		so.ExtraOptions = append(so.ExtraOptions, grpc.Creds(credentials.NewTLS(tc)))
	}
	var err error
	if s.grpc, err = rls.NewServer(s.svc, so); err != nil {
		return err
	}
	var failing []string
	if env.healthyWithConfig && (s.svc.Config() == nil || len(s.svc.Config().Domains()) == 0) {
		failing = append(failing, rls.HealthConfig)
	}
	s.health = rls.NewHealth(s.grpc.Health, "ratelimit", []string{rls.HealthStopping}, failing...)

	network, addr := "tcp", env.grpcAddr
	if env.grpcUDS != "" {
		network, addr = "unix", env.grpcUDS
	}
	if err := s.open(network, addr, "gRPC (RLS v3)", stdout); err != nil {
		return err
	}
	api := http.NewServeMux()
	api.Handle("/json", rls.JSONHandler(s.svc))
	api.Handle("/healthcheck", s.health)
	s.https = append(s.https, &http.Server{Handler: api, ReadHeaderTimeout: 10 * time.Second})
	if err := s.open("tcp", env.httpAddr, "HTTP (/json, /healthcheck)", stdout); err != nil {
		return err
	}
	metricsHandler := metricsHandler(s.registry, s.log)
	debug := rls.DebugHandler(s.svc, map[string]rls.DebugEndpoint{
		"/metrics": {Help: "Prometheus metrics", Handler: metricsHandler},
	})
	s.https = append(s.https, &http.Server{Handler: debug, ReadHeaderTimeout: 10 * time.Second})
	if err := s.open("tcp", env.debugAddr, "debug (/rlconfig, /metrics, /debug/pprof/)", stdout); err != nil {
		return err
	}
	if env.usePrometheus {
		pm := http.NewServeMux()
		pm.Handle(env.promPath, metricsHandler)
		s.https = append(s.https, &http.Server{Handler: pm, ReadHeaderTimeout: 10 * time.Second})
		if err := s.open("tcp", env.promAddr, "Prometheus ("+env.promPath+")", stdout); err != nil {
			return err
		}
	}
	return nil
}

// open listens on addr and prints it.
func (s *rlsServer) open(network, addr, what string, stdout io.Writer) error {
	if network == "unix" {
		_ = os.Remove(addr) // a socket left by an earlier run
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		return fmt.Errorf("rls: listen %s: %w", what, err)
	}
	s.lns = append(s.lns, ln)
	fmt.Fprintf(stdout, "floodgate rls: %s on %s\n", what, displayAddr(ln.Addr()))
	return nil
}

// close closes the listeners that are still open.
func (s *rlsServer) close() {
	for _, ln := range s.lns {
		ln.Close()
	}
}

// grpcTLS is the server TLS configuration of GRPC_SERVER_*: the
// certificate is read again when its files change, and with
// GRPC_CLIENT_TLS_CACERT clients must present a certificate it signed
// (with GRPC_CLIENT_TLS_SAN among its names).
func grpcTLS(env *rlsEnv) (*tls.Config, error) {
	cr := &certReloader{cert: env.tlsCert, key: env.tlsKey}
	if _, err := cr.load(); err != nil {
		return nil, fmt.Errorf("rls: GRPC_SERVER_TLS_CERT/KEY: %w", err)
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: cr.get}
	if env.clientCA != "" {
		pem, err := os.ReadFile(env.clientCA)
		if err != nil {
			return nil, fmt.Errorf("rls: GRPC_CLIENT_TLS_CACERT: %w", err)
		}
		tc.ClientCAs = x509.NewCertPool()
		if !tc.ClientCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("rls: GRPC_CLIENT_TLS_CACERT: no certificate in %s", env.clientCA)
		}
		tc.ClientAuth = tls.RequireAndVerifyClientCert
		if san := env.clientSAN; san != "" {
			tc.VerifyPeerCertificate = func(_ [][]byte, chains [][]*x509.Certificate) error {
				for _, ch := range chains {
					if len(ch) > 0 && slices.Contains(ch[0].DNSNames, san) {
						return nil
					}
				}
				return fmt.Errorf("rls: client certificate without the name %q", san)
			}
		}
	}
	return tc, nil
}

// certReloader serves a certificate from files, read again when they
// change (looked at no more than once a second).
type certReloader struct {
	cert, key string

	mu      sync.Mutex // guards the fields below
	current *tls.Certificate
	stamp   [2]time.Time
	checked time.Time
}

func (c *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.checked) < time.Second && c.current != nil {
		return c.current, nil
	}
	c.checked = time.Now()
	if cert, err := c.loadLocked(); err == nil {
		return cert, nil
	}
	return c.current, nil
}

func (c *certReloader) load() (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.loadLocked()
}

// loadLocked reads the files when their modification times changed.
func (c *certReloader) loadLocked() (*tls.Certificate, error) {
	var stamp [2]time.Time
	for i, p := range []string{c.cert, c.key} {
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		stamp[i] = st.ModTime()
	}
	if c.current != nil && stamp == c.stamp {
		return c.current, nil
	}
	pair, err := tls.LoadX509KeyPair(c.cert, c.key)
	if err != nil {
		return nil, err
	}
	c.current, c.stamp = &pair, stamp
	return c.current, nil
}
