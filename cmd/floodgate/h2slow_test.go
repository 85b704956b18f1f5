package main

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
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
	tlsCfg, ca := tlsGatewayFile(t, "{read_header: 1s, read: 2s, idle: 60s}", up.URL)
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

// TestH2StalledSocketIsCut: an HTTP/2 client that grants its answer all
// the flow-control window it may, then stops reading its socket, is cut
// by server.timeouts.send as one that grants no window is
// (gateway.TestStalledClientIsCut). Its stream's reset could not be
// written to the full socket, so the stream was never closed: the
// gateway's handler, its concurrency lease and its upstream exchange were
// held for as long as the client kept its connection, the idle timeout
// notwithstanding (a limit of one: everyone else refused 429).
func TestH2StalledSocketIsCut(t *testing.T) {
	t.Parallel() // it waits for timeouts, not on the CPU
	forEngines(t, testH2StalledSocketIsCut)
}

func testH2StalledSocketIsCut(t *testing.T, engine string) {
	var bigBegun, bigEnded atomic.Bool
	chunk := bytes.Repeat([]byte("x"), 32<<10)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/big" {
			_, _ = io.WriteString(w, "ok")
			return
		}
		bigBegun.Store(true)
		defer bigEnded.Store(true)
		for range 2048 { // 64 MiB
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer up.Close()
	cfg := writeConfig(t, fmt.Sprintf(`version: 1
server:
  timeouts: {send: 300ms, idle: 2s}
routes:
  - name: all
    match: {paths: ["/**"]}
    upstream: %s
limits:
  - {name: one, algorithm: concurrency, limit: 1, lease_ttl: 1h, key: global}
`, up.URL))
	gw, _, _, _ := startServe(t, "--engine", engine, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	c, err := net.Dial("tcp", strings.TrimPrefix(gw, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
	h := newH2Raw(t, c)
	if err := h.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1}); err != nil {
		t.Fatal(err)
	}
	if err := h.fr.WriteWindowUpdate(0, 1<<31-1-65535); err != nil {
		t.Fatal(err)
	}
	h.headers(t, 1, true, ":method", "GET", ":scheme", "http", ":authority", "x", ":path", "/big")
	// Nothing more is read: the gateway's writes fill the sockets' buffers
	// and wait.
	eventually(t, "the stalled client's request to reach the upstream", bigBegun.Load)
	var last int
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if last, _, _ = get(t, gw+"/small"); last == http.StatusOK {
			break
		}
	}
	if last != http.StatusOK {
		t.Fatalf("a client that stopped reading its socket kept the only concurrency slot for 30 s: the next request was answered %d", last)
	}
	eventually(t, "the stalled client's upstream exchange to end", bigEnded.Load)
}

// tlsGatewayFile writes, in a directory of its own, a policy file serving
// every path from upstream over TLS with the given server.timeouts, its
// certificate for gw.example issued by the CA it returns.
func tlsGatewayFile(t *testing.T, timeouts, upstream string) (string, *ownCA) {
	t.Helper()
	dir := t.TempDir()
	ca := newOwnCA(t)
	ca.issue(t, filepath.Join(dir, "gw.crt"), filepath.Join(dir, "gw.key"), "gw.example", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	cfg := filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`version: 1
server:
  timeouts: %s
  tls: {certs: [{cert: gw.crt, key: gw.key}]}
routes:
  - name: all
    match: {paths: ["/**"]}
    upstream: %s
`, timeouts, upstream)), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg, ca
}
