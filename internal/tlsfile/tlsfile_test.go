//go:build unix

package tlsfile_test

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/floodgate/floodgate/internal/testcerts"
	"github.com/floodgate/floodgate/internal/tlsfile"
	"github.com/floodgate/floodgate/internal/waittest"
)

// TestReadsWhatItShould: a key pair and a CA bundle read from their files
// make a working TLS configuration.
func TestReadsWhatItShould(t *testing.T) {
	dir := t.TempDir()
	ca, err := testcerts.NewCA(dir, "t")
	if err != nil {
		t.Fatal(err)
	}
	p, err := ca.Server("srv")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tlsfile.KeyPair(p.Cert, p.Key)
	if err != nil {
		t.Fatalf("KeyPair: %v", err)
	}
	pool, err := tlsfile.CertPool(ca.File)
	if err != nil {
		t.Fatalf("CertPool: %v", err)
	}
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: pool}); err != nil {
		t.Fatalf("the pair does not verify against the pool: %v", err)
	}
	// A key that is not the certificate's, and a bundle with no
	// certificate, are errors naming what is wrong.
	other, err := ca.Server("other")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tlsfile.KeyPair(p.Cert, other.Key); err == nil || !strings.Contains(err.Error(), p.Cert) {
		t.Errorf("a key of another certificate: %v, want an error naming %s", err, p.Cert)
	}
	if _, err := tlsfile.CertPool(p.Key); err == nil || !strings.Contains(err.Error(), "no PEM certificate in "+p.Key) {
		t.Errorf("a bundle of no certificate: %v", err)
	}
}

// TestRefusesWhatWouldHang: a named pipe that no one writes, put where a
// certificate, a key, a CA bundle or a secret is read, is refused at once
// (os.ReadFile waited for a writer forever, and held whoever called it:
// a reload, or every TLS handshake behind a certificate's lock), and a
// device that never ends (/dev/zero, linked from the path) is refused
// without reading it into memory.
func TestRefusesWhatWouldHang(t *testing.T) {
	dir := t.TempDir()
	ca, err := testcerts.NewCA(dir, "t")
	if err != nil {
		t.Fatal(err)
	}
	good, err := ca.Server("srv")
	if err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	zero := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct{ path, kind string }{{fifo, "a named pipe"}, {zero, "a device"}} {
		reads := map[string]func() error{
			"Read":           func() error { _, err := tlsfile.Read(bad.path); return err },
			"KeyPair (cert)": func() error { _, err := tlsfile.KeyPair(bad.path, good.Key); return err },
			"KeyPair (key)":  func() error { _, err := tlsfile.KeyPair(good.Cert, bad.path); return err },
			"CertPool":       func() error { _, err := tlsfile.CertPool(bad.path); return err },
		}
		for name, read := range reads {
			err := waittest.Returns(t, name+" of "+bad.kind, read)
			if err == nil || !strings.Contains(err.Error(), "not a regular file ("+bad.kind+")") {
				t.Errorf("%s of %s: %v, want it refused as not a regular file", name, bad.kind, err)
			}
		}
	}
}
