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
// requests was ever counted.
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
		gw, _, _, _ := startServe(t, "--engine", engine, "--config", cfg, "--watch=false", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
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
	}
}
