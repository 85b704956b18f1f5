package main

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestH2SlowHeadersAreCut: an HTTP/2 client without TLS (prior knowledge)
// that opens its connection and then sends no request, or sends a request's
// headers in CONTINUATION frames a few bytes at a time, or only PINGs, is
// cut off by server.timeouts.read_header (and read) as an HTTP/1 client
// sending its headers slowly is (TestSlowHeadersAreCut), not kept for the
// idle timeout: otherwise a client holds a place of server.max_connections
// for the idle time without ever sending a request that is counted.
func TestH2SlowHeadersAreCut(t *testing.T) {
	t.Parallel() // it waits for timeouts, not on the CPU
	forEngines(t, testH2SlowHeadersAreCut)
}

func testH2SlowHeadersAreCut(t *testing.T, engine string) {
	up := newRecordingUpstream(t)
	cfg := writeConfig(t, fmt.Sprintf(`version: 1
server:
  timeouts: {read_header: 1s, read: 2s, idle: 60s}
routes:
  - name: all
    match: {paths: ["/**"]}
    upstream: %s
`, up.URL))
	gw, _, _, _ := startServe(t, "--engine", engine, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	addr := strings.TrimPrefix(gw, "http://")
	h2SlowClients(t, func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
	if got := up.take(); len(got) > 0 {
		t.Errorf("the upstream got %q", got)
	}

	// The same over TLS, HTTP/2 chosen by ALPN.
	dir := t.TempDir()
	ca := newOwnCA(t)
	ca.issue(t, filepath.Join(dir, "gw.crt"), filepath.Join(dir, "gw.key"), "gw.example", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	tlsCfg := filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(tlsCfg, []byte(fmt.Sprintf(`version: 1
server:
  timeouts: {read_header: 1s, read: 2s, idle: 60s}
  tls: {certs: [{cert: gw.crt, key: gw.key}]}
routes:
  - name: all
    match: {paths: ["/**"]}
    upstream: %s
`, up.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	gw, _, _, _ = startServe(t, "--engine", engine, "--config", tlsCfg, "--watch=false", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	addr = strings.TrimPrefix(gw, "https://")
	h2SlowClients(t, func() net.Conn {
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.pool, ServerName: "gw.example", NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatal(err)
		}
		if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
			t.Fatalf("ALPN chose %q", p)
		}
		return c
	})
	if got := up.take(); len(got) > 0 {
		t.Errorf("the upstream got %q", got)
	}
}

// h2SlowClients opens connections with dial and speaks HTTP/2 on each without
// ever finishing a request's headers: silent after its preface, sending only
// PINGs, and sending a request's headers in CONTINUATION frames; each must be
// cut off within 8s.
func h2SlowClients(t *testing.T, dial func() net.Conn) {
	t.Helper()
	for _, how := range []string{"silent", "pings", "continuation"} {
		c := dial()
		defer c.Close()
		if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
			t.Fatal(err)
		}
		fr := http2.NewFramer(c, c)
		if err := fr.WriteSettings(); err != nil {
			t.Fatal(err)
		}
		var block bytes.Buffer
		enc := hpack.NewEncoder(&block)
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":path", "/"}, {":authority", "gw"}} {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if how == "continuation" {
			if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndStream: true}); err != nil {
				t.Fatal(err)
			}
		}
		cut := make(chan struct{})
		go func() {
			defer close(cut)
			_, _ = io.Copy(io.Discard, c) // until the gateway closes
		}()
		start := time.Now()
		deadline := time.After(8 * time.Second)
	trickle:
		for i := 0; ; i++ {
			select {
			case <-cut:
				break trickle
			case <-deadline:
				t.Fatalf("%s: an HTTP/2 client (%T) was not cut off in 8s (read_header 1s, read 2s)", how, c)
			case <-time.After(200 * time.Millisecond):
				switch how {
				case "pings":
					_ = fr.WritePing(false, [8]byte{byte(i)})
				case "continuation":
					block.Reset()
					_ = enc.WriteField(hpack.HeaderField{Name: fmt.Sprintf("x-%d", i), Value: "y"})
					_ = fr.WriteContinuation(1, false, block.Bytes())
				}
			}
		}
		t.Logf("%s: cut after %s", how, time.Since(start).Round(100*time.Millisecond))
	}
}
