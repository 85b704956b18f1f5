package config

import (
	"crypto/tls"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/floodgate/floodgate/internal/tlsfile"
)

// Values of server.tls.client_auth and server.tls.min_version.
const (
	ClientAuthNone    = "none"
	ClientAuthRequest = "request"
	ClientAuthRequire = "require"

	TLSVersion12 = "1.2"
	TLSVersion13 = "1.3"
)

// ListenerTLS serves the gateway listener over TLS: HTTP/1.1 and HTTP/2
// (ALPN) on both engines, a certificate chosen by the name the client asks
// for (SNI), every file read again when it changes or on SIGHUP.
type ListenerTLS struct {
	// Certs are the certificates and their keys (PEM files, relative to
	// the configuration file). A client that names a host (SNI) gets the
	// certificate made for it (exact names before wildcards); one that
	// names none, or another, gets the first.
	Certs []CertPair `yaml:"certs"`
	// ClientCA is a PEM bundle of the CAs whose client certificates are
	// accepted (mutual TLS).
	ClientCA string `yaml:"client_ca"`
	// ClientAuth is none (the default without client_ca), request (a
	// certificate is verified when the client sends one) or require (the
	// default with client_ca: a client without one is refused at the
	// handshake).
	ClientAuth string `yaml:"client_auth"`
	// MinVersion is the oldest TLS version accepted: "1.2" (default) or
	// "1.3".
	MinVersion string `yaml:"min_version"`

	// ClientCAPath is ClientCA resolved against the file's directory.
	ClientCAPath string `yaml:"-"`
}

// On reports whether the listener takes TLS.
func (t *ListenerTLS) On() bool { return len(t.Certs) > 0 }

// CertPair is a certificate and its key.
type CertPair struct {
	// Cert is the PEM certificate, with its chain after it.
	Cert string `yaml:"cert"`
	// Key is its PEM private key.
	Key string `yaml:"key"`

	// CertPath and KeyPath are Cert and Key resolved against the file's
	// directory.
	CertPath string `yaml:"-"`
	KeyPath  string `yaml:"-"`
}

// UpstreamTLS is how the gateway reaches https:// upstreams. The zero
// value trusts the system's CAs, presents no certificate and sends the
// upstream URL's host as the server name.
type UpstreamTLS struct {
	// CA is a PEM bundle of the CAs trusted in place of the system's
	// (relative to the configuration file).
	CA string `yaml:"ca"`
	// Cert and Key are the client certificate presented to upstreams that
	// ask for one (PEM files).
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
	// ServerName is sent as the server name (SNI) and verified in the
	// upstream's certificate, in place of the URL's host.
	ServerName string `yaml:"server_name"`

	// CAPath, CertPath and KeyPath are the files resolved against the
	// configuration file's directory.
	CAPath   string `yaml:"-"`
	CertPath string `yaml:"-"`
	KeyPath  string `yaml:"-"`
}

// IsZero reports whether t says nothing.
func (t *UpstreamTLS) IsZero() bool {
	return t.CA == "" && t.Cert == "" && t.Key == "" && t.ServerName == ""
}

// gatewayTLS validates server.tls: each certificate readable and
// matching its key, the client CA readable, the choices known.
func (v *validator) gatewayTLS(t *ListenerTLS) {
	const path = "server.tls"
	if len(t.Certs) == 0 && v.written(path+".certs") {
		v.errorf(path+".certs", "TLS needs at least one certificate and its key")
	}
	if !t.On() && (t.ClientCA != "" || t.ClientAuth != "" || t.MinVersion != "") {
		v.errorf(path, "server.tls needs certs: the gateway's certificates and their keys")
		return
	}
	for i := range t.Certs {
		c := &t.Certs[i]
		c.CertPath, c.KeyPath = v.keyPair(fmt.Sprintf("%s.certs[%d]", path, i), c.Cert, c.Key)
	}
	if t.ClientCA != "" {
		t.ClientCAPath = v.rel(t.ClientCA)
		v.caBundle(path+".client_ca", t.ClientCAPath)
	}
	switch want := choices["server.tls.client_auth"]; {
	case t.ClientAuth == "" && t.ClientCA != "":
		t.ClientAuth = ClientAuthRequire
	case t.ClientAuth == "":
		t.ClientAuth = ClientAuthNone
	case !slices.Contains(want, t.ClientAuth):
		v.errorf(path+".client_auth", "client_auth must be %s, got %q", wordList(want), t.ClientAuth)
	case t.ClientAuth != ClientAuthNone && t.ClientCA == "":
		v.errorf(path+".client_auth", "client_auth %s needs client_ca, the CAs whose client certificates are accepted", t.ClientAuth)
	}
	switch want := choices["server.tls.min_version"]; {
	case t.MinVersion == "":
		if t.On() {
			t.MinVersion = TLSVersion12
		}
	case !slices.Contains(want, t.MinVersion):
		v.errorf(path+".min_version", "min_version must be %s, got %q", wordList(want), t.MinVersion)
	}
}

// upstreamTLS validates the TLS settings of upstreams at path.
func (v *validator) upstreamTLS(path string, t *UpstreamTLS) {
	if t.CA != "" {
		t.CAPath = v.rel(t.CA)
		v.caBundle(path+".ca", t.CAPath)
	}
	if t.Cert != "" || t.Key != "" {
		t.CertPath, t.KeyPath = v.keyPair(path, t.Cert, t.Key)
	}
	if _, err := netip.ParseAddr(t.ServerName); t.ServerName != "" && err != nil && !validHostName(t.ServerName) {
		v.errorf(path+".server_name", "%q is not a host name", t.ServerName)
	}
}

// keyPair checks the certificate and key files named at path+".cert" and
// path+".key", and returns them resolved.
func (v *validator) keyPair(path, cert, key string) (certPath, keyPath string) {
	switch {
	case cert == "":
		v.errorf(path+".cert", "a key needs its certificate: cert is missing")
		return "", ""
	case key == "":
		v.errorf(path+".key", "a certificate needs its key: key is missing")
		return "", ""
	}
	certPath, keyPath = v.rel(cert), v.rel(key)
	certPEM, err := tlsfile.Read(certPath)
	if err != nil {
		v.errorf(path+".cert", "cannot read the certificate: %v", err)
		return certPath, keyPath
	}
	if !hasPEM(certPEM, "CERTIFICATE") {
		v.errorf(path+".cert", "no PEM certificate in %s", cert)
		return certPath, keyPath
	}
	keyPEM, err := tlsfile.Read(keyPath)
	if err != nil {
		v.errorf(path+".key", "cannot read the key: %v", err)
		return certPath, keyPath
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		v.errorf(path+".key", "the key does not go with the certificate %s: %v", cert, err)
	}
	return certPath, keyPath
}

// caBundle checks that the file at field holds at least one certificate.
func (v *validator) caBundle(field, p string) {
	_, err := tlsfile.CertPool(p)
	switch {
	case errors.Is(err, tlsfile.ErrNoCertificate):
		v.errorf(field, "%v", err)
	case err != nil:
		v.errorf(field, "cannot read the CA bundle: %v", err)
	}
}

// hasPEM reports whether b holds a PEM block of type typ.
func hasPEM(b []byte, typ string) bool {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return false
		}
		if blk.Type == typ {
			return true
		}
	}
}
