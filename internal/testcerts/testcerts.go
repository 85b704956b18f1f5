// Package testcerts makes the certificates tests need: a CA, and server
// and client certificates it signs, written as PEM files. It is for tests
// only.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// CA is a certificate authority made for a test.
type CA struct {
	// Pool holds the CA's certificate.
	Pool *x509.CertPool
	// File is the CA's certificate as a PEM file.
	File string

	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// Pair is a certificate and its key as PEM files.
type Pair struct{ Cert, Key string }

var serial atomic.Int64

// NewCA makes a CA whose files go in dir; name tells CAs apart.
func NewCA(dir, name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	ca := &CA{Pool: x509.NewCertPool(), dir: dir, cert: cert, key: key}
	ca.Pool.AddCert(cert)
	if ca.File, err = write(dir, name+"-ca.crt", "CERTIFICATE", der); err != nil {
		return nil, err
	}
	return ca, nil
}

// Server makes a server certificate for 127.0.0.1 and localhost, named
// name (its files are name.crt and name.key).
func (ca *CA) Server(name string) (Pair, error) {
	return ca.issue(name, x509.ExtKeyUsageServerAuth, []string{"localhost"})
}

// ServerFor makes a server certificate for 127.0.0.1 and the DNS names
// given (a "*.example" wildcard among them, if need be), named name.
func (ca *CA) ServerFor(name string, dnsNames ...string) (Pair, error) {
	return ca.issue(name, x509.ExtKeyUsageServerAuth, dnsNames)
}

// Client makes a client certificate with the DNS names given.
func (ca *CA) Client(name string, dnsNames ...string) (Pair, error) {
	return ca.issue(name, x509.ExtKeyUsageClientAuth, dnsNames)
}

func (ca *CA) issue(name string, usage x509.ExtKeyUsage, dnsNames []string) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		DNSNames: dnsNames, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return Pair{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Pair{}, err
	}
	var p Pair
	if p.Cert, err = write(ca.dir, name+".crt", "CERTIFICATE", der); err != nil {
		return Pair{}, err
	}
	if p.Key, err = write(ca.dir, name+".key", "EC PRIVATE KEY", keyDER); err != nil {
		return Pair{}, err
	}
	return p, nil
}

// write writes a PEM file by rename, so that a reader never sees half of
// it.
func write(dir, name, typ string, der []byte) (string, error) {
	p := filepath.Join(dir, name)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		return "", fmt.Errorf("testcerts: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return "", fmt.Errorf("testcerts: %w", err)
	}
	return p, nil
}
