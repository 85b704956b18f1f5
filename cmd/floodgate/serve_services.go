package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/fields"
	"github.com/floodgate/floodgate/httpapi"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/rls"
)

// decisionServices are the decision service's listeners that run beside
// the gateway in one process, sharing its engine and store: Envoy's
// rate-limit service (server.grpc_listen) and the HTTP check API
// (server.api_listen).
type decisionServices struct {
	stop func()
	wg   sync.WaitGroup
}

// startDecisionServices opens the listeners the settings name and serves
// them until Shutdown. Errors that end serving are sent to errc.
// configPath anchors relative paths.
func startDecisionServices(s *server, stdout io.Writer) (*decisionServices, error) {
	srv, configPath, eng, reloader, m := s.srv, s.cfg.config, s.engine, s.reloader, s.metrics
	grace, errc, log := s.cfg.shutdownTimeout, s.errc, s.log
	ctx, stop := context.WithCancel(context.Background())
	ds := &decisionServices{stop: stop}
	fail := func(err error) (*decisionServices, error) {
		ds.Shutdown()
		return nil, err
	}
	rel := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(filepath.Dir(configPath), p)
	}

	if srv.GRPCListen != "" {
		paths := make([]string, len(srv.RLSConfig))
		for i, p := range srv.RLSConfig {
			paths[i] = rel(p)
		}
		cfg, err := rls.Load(paths, rls.LoadOptions{})
		if err != nil {
			return fail(fmt.Errorf("serve: rls_config: %w", err))
		}
		// envoyproxy/ratelimit's statistics, under its names, so that the
		// dashboards of a migrating deployment keep working.
		stats, err := rls.NewStats(s.registry, rls.StatsOptions{})
		if err != nil {
			return fail(fmt.Errorf("serve: rate-limit service statistics: %w", err))
		}
		svc := rls.New(eng, cfg, rls.Options{Logger: log, Stats: stats,
			Fields: fields.Options{Legacy: srv.Headers.XRateLimit, NoRateLimit: !srv.Headers.RateLimit}})
		gs, err := rls.NewServer(svc, rls.ServerOptions{TLSCertFile: rel(srv.GRPCTLSCert), TLSKeyFile: rel(srv.GRPCTLSKey),
			ExtraOptions: s.tracing.grpcOptions()})
		if err != nil {
			return fail(fmt.Errorf("serve: rate-limit service: %w", err))
		}
		ln, err := net.Listen("tcp", srv.GRPCListen)
		if err != nil {
			return fail(fmt.Errorf("serve: grpc listen: %w", err))
		}
		ds.wg.Add(2)
		go func() {
			defer ds.wg.Done()
			rls.Watch(ctx, svc, paths, rls.WatchOptions{Logger: log})
		}()
		go func() {
			defer ds.wg.Done()
			if err := gs.Serve(ctx, ln); err != nil {
				errc <- fmt.Errorf("rate-limit service: %w", err)
			}
		}()
		fmt.Fprintf(stdout, "floodgate: Envoy rate-limit service (RLS v3, gRPC) on %s\n", displayAddr(ln.Addr()))
	}

	if srv.APIListen != "" {
		ln, err := net.Listen("tcp", loopbackByDefault(srv.APIListen))
		if err != nil {
			return fail(fmt.Errorf("serve: api listen: %w", err))
		}
		opts := httpapi.Options{Logger: log, Observer: m}
		if srv.APIAuth != config.APIAuthNone {
			opts.Tokens = policyTokens(reloader.Policy)
		}
		h := httpapi.New(eng, httpapi.PolicyLimits(reloader.Policy), opts)
		ds.wg.Add(1)
		go func() {
			defer ds.wg.Done()
			if err := httpapi.Serve(ctx, ln, s.tracing.handler(h, "http_api"), grace); err != nil {
				errc <- fmt.Errorf("check API: %w", err)
			}
		}()
		fmt.Fprintf(stdout, "floodgate: check API on http://%s (POST /v1/check, /v1/peek)\n", displayAddr(ln.Addr()))
	}
	return ds, nil
}

// Shutdown stops the services gracefully and waits for them.
func (ds *decisionServices) Shutdown() {
	ds.stop()
	ds.wg.Wait()
}

// loopbackByDefault binds an address without a host (":9091") to the
// loopback interface: the check API shares its counters with the gateway,
// so it is reached from other hosts only when the file names a host such as
// 0.0.0.0.
func loopbackByDefault(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host != "" {
		return addr
	}
	return net.JoinHostPort("127.0.0.1", port)
}

// policyTokens knows the check API's tokens of the policy in force, so
// that a reload adds and revokes tokens.
type policyTokens func() *policy.Policy

// Known reports whether the token's SHA-256 is one of server.api_tokens.
func (f policyTokens) Known(token string) bool {
	sum := sha256.Sum256([]byte(token))
	h := hex.EncodeToString(sum[:])
	for _, t := range f().Server().APITokens {
		if subtle.ConstantTimeCompare([]byte(strings.ToLower(t.SHA256)), []byte(h)) == 1 {
			return true
		}
	}
	return false
}
