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

// TestH2ControlFloodIsCut: a client that opens a request and then sends
// 100,000 PINGs on its connection, reading every answer, is sent a GOAWAY
// with ENHANCE_YOUR_CALM (unless the close's reset overtakes it) and closed
// once its budget of frames that are not
// requests is spent (internal/h2guard), over h2c and TLS, on each engine.
// Before, all 100,000 were answered and the connection kept: nothing but
// requests was ever counted. The cut is counted in /metrics
// (floodgate_http2_connections_cut_total{frame="ping",front="serve"} 1) and
// logged as a warning naming the client's address and the frame kind;
// before, it left no trace.
func TestH2ControlFloodIsCut(t *testing.T) { forEngines(t, testH2ControlFloodIsCut) }

func testH2ControlFloodIsCut(t *testing.T, engine string) {
	up := newRecordingUpstream(t)
	dir := t.TempDir()
	ca := newOwnCA(t)
	ca.issue(t, filepath.Join(dir, "gw.crt"), filepath.Join(dir, "gw.key"), "gw.example", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	for _, over := range []string{"h2c", "TLS"} {
		tlsLine := ""
		if over == "TLS" {
			tlsLine = "\n  tls: {certs: [{cert: gw.crt, key: gw.key}]}"
		}
		cfg := filepath.Join(dir, over+".yaml")
		if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`version: 1
server:
  timeouts: {read_header: 5s, read: 30s, idle: 60s}%s
routes:
  - name: all
    match: {paths: ["/**"]}
    upstream: %s
`, tlsLine, up.URL)), 0o644); err != nil {
			t.Fatal(err)
		}
		gw, admin, _, _, logs := startServeLogged(t, "--engine", engine, "--config", cfg, "--watch=false", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "warn")
		addr := gw[strings.Index(gw, "//")+2:]
		var c net.Conn
		var err error
		if over == "TLS" {
			c, err = tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.pool, ServerName: "gw.example", NextProtos: []string{"h2"}})
		} else {
			c, err = net.Dial("tcp", addr)
		}
		if err != nil {
			t.Fatal(err)
		}
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
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/"}, {":authority", "gw"}} {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		// A request whose body is still to come: the connection has begun
		// its first request (server.timeouts.read_header is met).
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		type ending struct {
			pings int
			how   string
		}
		end := make(chan ending, 1)
		go func() {
			rd := http2.NewFramer(nil, c)
			n := 0
			for {
				f, err := rd.ReadFrame()
				if err != nil {
					end <- ending{n, "closed without a GOAWAY: " + err.Error()}
					return
				}
				switch f := f.(type) {
				case *http2.PingFrame:
					n++
				case *http2.GoAwayFrame:
					end <- ending{n, f.ErrCode.String()}
					_, _ = io.Copy(io.Discard, c)
					return
				}
			}
		}()
		sent := 0
		for ; sent < 100000; sent++ {
			if fr.WritePing(false, [8]byte{byte(sent)}) != nil {
				break
			}
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		// The GOAWAY may be lost: the gateway closes with PINGs unread,
		// which resets the connection.
		got := <-end
		if got.how != "ENHANCE_YOUR_CALM" && (sent == 100000 || !strings.Contains(got.how, "reset") && !strings.Contains(got.how, "EOF")) || got.pings > 2000 {
			t.Fatalf("%s: %d PINGs sent, %d answered; the connection ended with %s", over, sent, got.pings, got.how)
		}
		t.Logf("%s: %d PINGs sent, %d answered, then %s", over, sent, got.pings, got.how)
		// The count follows the GOAWAY, which the client may read first.
		const series = `floodgate_http2_connections_cut_total{frame="ping",front="serve"}`
		cut := metricValue(t, admin, series)
		for i := 0; cut == 0 && i < 100; i++ {
			time.Sleep(100 * time.Millisecond)
			cut = metricValue(t, admin, series)
		}
		if cut != 1 {
			t.Errorf("%s: %s %d, want 1", over, series, cut)
		}
		if log := logs.String(); !strings.Contains(log, "h2guard: HTTP/2 connection cut") ||
			!strings.Contains(log, "client="+c.LocalAddr().String()) || !strings.Contains(log, "frame=ping") ||
			!strings.Contains(log, "front=serve") {
			t.Errorf("%s: the cut is not logged with its client and frame kind:\n%s", over, log)
		}
	}
}

// TestRLSFrameFloodCutIsCounted: a gRPC client of floodgate rls that sends
// 100,000 SETTINGS frames on its connection, reading every answer, over
// plaintext and over TLS (GRPC_SERVER_USE_TLS), is cut (internal/h2guard),
// and the cut is counted in the Prometheus address's /metrics as
// floodgate_http2_connections_cut_total{frame="settings",front="rls"} and
// logged as a warning naming the client's address and the frame kind.
// Before, a cut left no trace, and over TLS none happened: the TLS
// credentials replaced the ones that hold connections to the budget, and
// all 100,000 SETTINGS were acknowledged, the connection kept.
func TestRLSFrameFloodCutIsCounted(t *testing.T) {
	for _, over := range []string{"plaintext", "TLS"} {
		t.Run(over, func(t *testing.T) { testRLSFrameFloodCutIsCounted(t, over == "TLS") })
	}
}

func testRLSFrameFloodCutIsCounted(t *testing.T, overTLS bool) {
	dir := t.TempDir()
	writeRuntime(t, dir, map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n"})
	env := map[string]string{"BACKEND_TYPE": "memory", "USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": "127.0.0.1:0", "LOG_LEVEL": "warn"}
	var pki *tlsPKI
	if overTLS {
		pki = newTLSPKI(t, dir)
		env["GRPC_SERVER_USE_TLS"], env["GRPC_SERVER_TLS_CERT"], env["GRPC_SERVER_TLS_KEY"] = "true", pki.serverPair.Cert, pki.serverPair.Key
	}
	p := startRLS(t, rlsEnvFor(dir, env))
	var c net.Conn
	var err error
	if overTLS {
		c, err = tls.Dial("tcp", p.grpc, pki.clientTLS())
	} else {
		c, err = net.Dial("tcp", p.grpc)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	end := make(chan struct{})
	go func() {
		defer close(end)
		_, _ = io.Copy(io.Discard, c)
	}()
	const n = 100000
	sent := 0
	for ; sent < n && fr.WriteSettings() == nil; sent++ {
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	<-end
	if sent == n {
		t.Errorf("all %d SETTINGS were taken: the connection was not cut", n)
	}
	// The count follows the GOAWAY, which the client may read first.
	const series = `floodgate_http2_connections_cut_total{frame="settings",front="rls"}`
	cut := metricValue(t, p.prom, series)
	for i := 0; cut == 0 && i < 100; i++ {
		time.Sleep(100 * time.Millisecond)
		cut = metricValue(t, p.prom, series)
	}
	if cut != 1 {
		t.Errorf("%s %d, want 1", series, cut)
	}
	if log := p.stderr.String(); !strings.Contains(log, "h2guard: HTTP/2 connection cut") ||
		!strings.Contains(log, c.LocalAddr().String()) || !strings.Contains(log, "settings") {
		t.Errorf("the cut is not logged with its client and frame kind:\n%s", log)
	}
}
