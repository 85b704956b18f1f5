package app

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/fields"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/httpapi"
	"github.com/floodgate/floodgate/policy"
)

// checkAPI is the HTTP check API (server.api_listen), beside the gateway
// in one process, sharing its engine and store.
type checkAPI struct {
	stop func()
	wg   sync.WaitGroup
}

// startCheckAPI opens the check API's listener when the settings name one
// and serves it until shutdown (nil when there is none), at most conns
// connections at once: past that a new connection is answered 503 (on a
// TLS listener a TLS alert) and closed, so that a flood of connections to
// the check API cannot run the process out of the file descriptors the
// gateway, the store and the other listeners need. Errors that end
// serving are sent to s.errc.
func (s *server) startCheckAPI(stdout io.Writer, conns int) (*checkAPI, error) {
	srv := s.srv
	if srv.APIListen == "" {
		return nil, nil
	}
	t := apiTLS(s.cfg.Config, srv)
	t.Log = s.log
	var tc *tls.Config
	if t.On() {
		var err error
		if tc, err = t.Config(); err != nil {
			return nil, fmt.Errorf("serve: %w", err)
		}
	}
	raw, err := net.Listen("tcp", loopbackByDefault(srv.APIListen))
	if err != nil {
		return nil, fmt.Errorf("serve: api listen: %w", err)
	}
	limited := newConnLimit(raw, conns)
	s.apiConns.Store(limited)
	var ln net.Listener = limited
	scheme := "http"
	if tc != nil {
		limited.speaksTLS()
		ln, scheme = tls.NewListener(ln, tc), "https"
	}
	opts := httpapi.Options{Logger: s.log, Observer: s.metrics,
		// Its answers' fields follow server.headers, and each reload of
		// it, as the gateway's and the rate-limit service's do.
		Fields: func() fields.Options { return gateway.FieldOptions(s.reloader.Policy().Server().Headers) }}
	if srv.APIAuth != config.APIAuthNone {
		opts.Tokens = policyTokens(s.reloader.Policy)
	}
	h := httpapi.New(s.engine, httpapi.PolicyLimits(s.reloader.Policy), opts)
	ctx, stop := context.WithCancel(context.Background())
	a := &checkAPI{stop: stop}
	a.wg.Go(func() {
		if err := httpapi.Serve(ctx, ln, s.tracing.handler(h, "http_api"), s.cfg.ShutdownTimeout); err != nil {
			s.errc <- fmt.Errorf("check API: %w", err)
		}
	})
	fmt.Fprintf(stdout, "floodgate: check API on %s://%s (POST /v1/check, /v1/peek)\n", scheme, displayAddr(ln.Addr()))
	return a, nil
}

// apiTLS is the check API's TLS in the settings srv of the policy file at
// cfgPath.
func apiTLS(cfgPath string, srv *config.Server) TLS {
	rel := func(p string) string { return relTo(cfgPath, p) }
	return TLS{Cert: rel(srv.APITLSCert), Key: rel(srv.APITLSKey), ClientCA: rel(srv.APITLSClientCA), ClientSAN: srv.APITLSClientSAN,
		Source: "server.api_tls_cert", CASource: "server.api_tls_client_ca"}
}

// shutdown stops the check API gracefully and waits for it.
func (a *checkAPI) shutdown() {
	if a == nil {
		return
	}
	a.stop()
	a.wg.Wait()
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
