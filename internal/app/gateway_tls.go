package app

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/internal/tlsfile"
)

// The gateway listener's TLS (server.tls): several certificates, the one
// for the name a client asks for (SNI) chosen at each handshake, each read
// again when its files change (looked at no more than once a second, as
// the other listeners' are) or at once on SIGHUP. A renewed certificate
// is served to new connections; those open keep theirs. HTTP/2 is
// offered by ALPN beside HTTP/1.1 on both engines.

// certSet serves the certificate of a client's server name among several.
type certSet struct {
	pairs []*certReloader
	ca    *caReloader // the client CA bundle, nil without one

	mu    sync.Mutex // guards seen and names
	seen  []*tls.Certificate
	names map[string]int // a certificate's DNS names (lower case, "*.x" for wildcards) → its index
}

// newCertSet loads every pair of t; log hears of pairs that stop loading.
func newCertSet(t *config.ListenerTLS, log *slog.Logger) (*certSet, error) {
	s := &certSet{}
	for i, c := range t.Certs {
		r := &certReloader{cert: c.CertPath, key: c.KeyPath, log: log, source: fmt.Sprintf("server.tls.certs[%d]", i)}
		if _, err := r.load(); err != nil {
			return nil, fmt.Errorf("server.tls.certs[%d]: %w", i, err)
		}
		s.pairs = append(s.pairs, r)
	}
	return s, nil
}

// get is the listener's tls.Config.GetCertificate: the certificate whose
// names hold the client's server name exactly, else one whose wildcard
// does, else the first.
func (s *certSet) get(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	certs := make([]*tls.Certificate, len(s.pairs))
	for i, r := range s.pairs {
		certs[i], _ = r.get(hello)
	}
	if len(certs) == 1 {
		return certs[0], nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !samePointers(s.seen, certs) {
		s.index(certs)
	}
	name := strings.ToLower(strings.TrimSuffix(hello.ServerName, "."))
	if i, ok := s.names[name]; ok && name != "" {
		return certs[i], nil
	}
	if _, rest, ok := strings.Cut(name, "."); ok {
		if i, ok := s.names["*."+rest]; ok {
			return certs[i], nil
		}
	}
	return certs[0], nil
}

// index makes the names of certs; s.mu is held.
func (s *certSet) index(certs []*tls.Certificate) {
	s.seen = certs
	s.names = map[string]int{}
	for i := len(certs) - 1; i >= 0; i-- { // the first certificate wins a name two share
		leaf := certs[i].Leaf
		if leaf == nil && len(certs[i].Certificate) > 0 {
			leaf, _ = x509.ParseCertificate(certs[i].Certificate[0])
		}
		if leaf == nil {
			continue
		}
		for _, n := range leaf.DNSNames {
			s.names[strings.ToLower(n)] = i
		}
		for _, ip := range leaf.IPAddresses {
			s.names[ip.String()] = i
		}
	}
}

// reload reads every pair again at once (SIGHUP); a pair that does not
// load leaves its last good certificate in use.
func (s *certSet) reload() error {
	var first error
	for i, r := range s.pairs {
		if err := r.reload(); err != nil && first == nil {
			first = fmt.Errorf("server.tls.certs[%d]: %w", i, err)
		}
	}
	if s.ca != nil {
		if err := s.ca.reload(); err != nil && first == nil {
			first = fmt.Errorf("server.tls.client_ca: %w", err)
		}
	}
	return first
}

// caReloader serves a listener's configuration with the client CA bundle
// of a file (tls.Config.GetConfigForClient), read again when the file
// changes (looked at no more than once a second) or on reload, for new
// connections; a bundle that does not load leaves the last good one in
// use, and is logged once. Every TLS listener with a client CA has one.
type caReloader struct {
	path    string
	base    *tls.Config // a copy of the listener's, served with the bundle as ClientCAs
	log     *slog.Logger
	setting string // names the client CA in the log ("server.tls.client_ca")

	mu     sync.Mutex // guards the fields below
	served *tls.Config
	stamp  time.Time
	look   fileLook
}

func (c *caReloader) configFor(*tls.ClientHelloInfo) (*tls.Config, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.look.due() {
		c.look.result(c.loadLocked(false), c.log, "TLS client CA: the file does not load; the last good bundle stays", c.setting)
	}
	return c.served, nil
}

func (c *caReloader) reload() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.loadLocked(true)
	c.look.result(err, nil, "", "") // the caller logs it
	return err
}

// loadLocked reads the bundle when its modification time changed, or
// always with force; c.mu is held.
func (c *caReloader) loadLocked(force bool) error {
	st, err := os.Stat(c.path)
	if err != nil {
		return err
	}
	if !force && c.served != nil && st.ModTime().Equal(c.stamp) {
		return nil
	}
	pool, err := tlsfile.CertPool(c.path)
	if err != nil {
		return err
	}
	tc := c.base.Clone()
	tc.GetConfigForClient = nil
	tc.ClientCAs = pool
	c.served, c.stamp = tc, st.ModTime()
	return nil
}

// gatewaySuites are the gateway listener's TLS 1.2 cipher suites (TLS 1.3
// takes Go's, all AEAD).
var gatewaySuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

func samePointers(a, b []*tls.Certificate) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// reload reads the files again whatever their modification times say.
func (c *certReloader) reload() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.stamp
	c.stamp = [2]time.Time{}
	_, err := c.loadLocked()
	if err != nil {
		c.stamp = old
	}
	c.look.result(err, nil, "", "") // the caller logs it
	return err
}

// gatewayTLSConfig returns the TLS configuration of the gateway listener
// and its certificates.
func gatewayTLSConfig(t *config.ListenerTLS, log *slog.Logger) (*tls.Config, *certSet, error) {
	set, err := newCertSet(t, log)
	if err != nil {
		return nil, nil, err
	}
	tc := &tls.Config{
		GetCertificate: set.get,
		MinVersion:     tls.VersionTLS12,
		// TLS 1.2 with ECDHE and AEAD ciphers only (docs/engines.md); Go's
		// defaults also take AES-CBC with SHA-1.
		CipherSuites: gatewaySuites,
		// HTTP/2 first, as browsers and gRPC clients prefer it.
		NextProtos: []string{"h2", "http/1.1"},
	}
	if t.MinVersion == config.TLSVersion13 {
		tc.MinVersion = tls.VersionTLS13
	}
	if t.ClientCAPath != "" {
		pool, err := tlsfile.CertPool(t.ClientCAPath)
		if err != nil {
			return nil, nil, fmt.Errorf("server.tls.client_ca: %w", err)
		}
		tc.ClientCAs = pool
	}
	switch t.ClientAuth {
	case config.ClientAuthRequire:
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	case config.ClientAuthRequest:
		tc.ClientAuth = tls.VerifyClientCertIfGiven
	}
	if t.ClientCAPath != "" {
		// A copy: net/http writes to the listener's own when it serves.
		set.ca = &caReloader{path: t.ClientCAPath, base: tc.Clone(), log: log, setting: "server.tls.client_ca"}
		if err := set.ca.reload(); err != nil {
			return nil, nil, fmt.Errorf("server.tls.client_ca: %w", err)
		}
		tc.GetConfigForClient = set.ca.configFor
	}
	return tc, set, nil
}

// serveTLS puts TLS on the gateway listener when server.tls says so: the
// net/http server learns the configuration (for HTTP/2 by ALPN), and the
// edge engine finds *tls.Conn connections, which it hands to net/http
// when they chose HTTP/2.
func (s *server) serveTLS() error {
	if !s.srv.TLS.On() {
		return nil
	}
	tc, set, err := gatewayTLSConfig(&s.srv.TLS, s.log)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	s.frontCerts = set
	s.front.TLSConfig = tc
	s.front.Protocols.SetHTTP2(true)
	s.conns.speaksTLS()
	s.frontLn = tls.NewListener(s.frontLn, tc)
	return nil
}

// frontScheme is the gateway listener's scheme.
func (s *server) frontScheme() string {
	if s.frontCerts != nil {
		return "https"
	}
	return "http"
}

// reloadCertificates reads the gateway's certificates again (SIGHUP).
func (s *server) reloadCertificates() {
	if s.frontCerts == nil {
		return
	}
	if err := s.frontCerts.reload(); err != nil {
		s.log.Error("gateway certificates: the last good one stays", "err", err)
	}
}
