package app

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/floodgate/floodgate/internal/tlsfile"
)

// TLS is a listener's TLS: a certificate and its key (PEM files), read
// again when they change, and with ClientCA the client certificates
// required (mutual TLS): signed by a CA of that bundle, read again when it
// changes, and, with ClientSAN, carrying that DNS name. The zero value
// serves plain TCP.
type TLS struct {
	Cert, Key, ClientCA, ClientSAN string
	// Source names these settings in errors ("grpc_tls_cert",
	// "GRPC_SERVER_TLS_*").
	Source string
	// CASource names the client CA in the log ("server.grpc_tls_client_ca");
	// Source when empty.
	CASource string
	// Log, when set, is told of changed files that do not load (the last
	// good certificate stays in use), once per problem.
	Log *slog.Logger
}

// On reports whether the listener takes TLS.
func (t TLS) On() bool { return t.Cert != "" || t.Key != "" }

// Config returns the server configuration of t. Its certificate and its
// client CA bundle come from the files at every handshake, read again when
// their modification times change (looked at no more than once a second):
// a renewed certificate is served, and a CA taken out of the bundle
// refused, without a restart; files that do not load leave the last good
// ones in use.
func (t TLS) Config() (*tls.Config, error) {
	tc, err := t.config()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t.Source, err)
	}
	return tc, nil
}

func (t TLS) config() (*tls.Config, error) {
	if t.Cert == "" || t.Key == "" {
		return nil, fmt.Errorf("a certificate and its key go together (got %q and %q)", t.Cert, t.Key)
	}
	cr := &certReloader{cert: t.Cert, key: t.Key, log: t.Log, source: t.Source}
	if _, err := cr.load(); err != nil {
		return nil, err
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: cr.get}
	if t.ClientCA == "" {
		return tc, nil
	}
	tc.ClientAuth = tls.RequireAndVerifyClientCert
	if san := t.ClientSAN; san != "" {
		tc.VerifyPeerCertificate = func(_ [][]byte, chains [][]*x509.Certificate) error {
			for _, ch := range chains {
				if len(ch) > 0 && slices.Contains(ch[0].DNSNames, san) {
					return nil
				}
			}
			return fmt.Errorf("client certificate without the name %q", san)
		}
	}
	setting := t.CASource
	if setting == "" {
		setting = t.Source
	}
	ca := &caReloader{path: t.ClientCA, base: tc.Clone(), log: t.Log, setting: setting}
	if err := ca.reload(); err != nil {
		return nil, fmt.Errorf("client CA: %w", err)
	}
	tc.GetConfigForClient = ca.configFor
	return tc, nil
}

// certReloader serves a certificate from files, read again when they
// change (looked at no more than once a second). A pair that does not
// load, or that expired while the one served has not, leaves the one
// served in use, and is logged (with log) once until the files load.
type certReloader struct {
	cert, key string
	log       *slog.Logger
	source    string // names the setting in the log

	mu      sync.Mutex // guards the fields below
	current *tls.Certificate
	stamp   [2]time.Time
	look    fileLook
}

func (c *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.look.due() && c.current != nil {
		return c.current, nil
	}
	_, err := c.loadLocked()
	c.look.result(err, c.log, "TLS certificate: the files do not load; the last good certificate stays", c.source)
	return c.current, nil
}

// fileLook is the bookkeeping of files that handshakes look at again: at
// most once a second, each problem logged once until the files load.
type fileLook struct {
	checked time.Time
	failed  string // the problem last logged (or reported by a reload), "" once the files load
}

// due reports whether a look is due, and counts it as made.
func (f *fileLook) due() bool {
	if time.Since(f.checked) < time.Second {
		return false
	}
	f.checked = time.Now()
	return true
}

// result takes in a look's outcome: a problem other than the last is
// logged (with log, when set) as msg, naming setting.
func (f *fileLook) result(err error, log *slog.Logger, msg, setting string) {
	if err == nil {
		f.failed = ""
		return
	}
	if e := err.Error(); e != f.failed {
		f.failed = e
		if log != nil {
			log.Error(msg, "setting", setting, "err", err)
		}
	}
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
	pair, err := tlsfile.KeyPair(c.cert, c.key)
	if err != nil {
		return nil, err
	}
	if now := time.Now(); c.current != nil && expired(&pair, now) && !expired(c.current, now) {
		return nil, fmt.Errorf("%s: the certificate expired at %s; the one served has not",
			c.cert, pair.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	c.current, c.stamp = &pair, stamp
	return c.current, nil
}

// expired reports whether the leaf of c is past its NotAfter at now.
func expired(c *tls.Certificate, now time.Time) bool {
	return c.Leaf != nil && now.After(c.Leaf.NotAfter)
}
