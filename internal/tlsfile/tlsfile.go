// Package tlsfile reads the certificates, keys and CA bundles that a
// configuration names, the way every other file it names is read
// (internal/yamlfile.ReadFile): opened without blocking, regular files
// only, and bounded in size. A named pipe or a device put at such a path
// (by mistake, or by whoever can write the configuration) is refused at
// once instead of hanging the start or a reload, and /dev/zero cannot take
// the process's memory.
package tlsfile

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/floodgate/floodgate/internal/yamlfile"
)

// Read reads a small file a configuration names: a secret, a key, a PEM
// bundle. See yamlfile.ReadFile for what it refuses. The errors of Read,
// KeyPair and CertPool name the file.
func Read(path string) ([]byte, error) {
	return yamlfile.ReadFile(path)
}

// KeyPair reads a PEM certificate chain and its private key, as
// tls.LoadX509KeyPair does, from files read as Read reads them.
func KeyPair(certPath, keyPath string) (tls.Certificate, error) {
	certPEM, err := Read(certPath)
	if err != nil {
		return tls.Certificate{}, err
	}
	keyPEM, err := Read(keyPath)
	if err != nil {
		return tls.Certificate{}, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s and %s: %w", certPath, keyPath, err)
	}
	return pair, nil
}

// ErrNoCertificate is what CertPool's error wraps for a file that holds
// no PEM certificate.
var ErrNoCertificate = errors.New("no PEM certificate")

// CertPool reads a bundle of PEM certificates (CAs) into a pool; a file
// that holds none is an error naming it, wrapping ErrNoCertificate.
func CertPool(path string) (*x509.CertPool, error) {
	pem, err := Read(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w in %s", ErrNoCertificate, path)
	}
	return pool, nil
}
