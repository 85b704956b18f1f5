package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestH2CUpgradeNotTunnelled: an HTTP/1.1 request asking to upgrade its
// connection to h2c is limited as one request; were it tunnelled to an
// upstream that speaks h2c, every request the client then sent through the
// tunnel would reach the upstream past the gateway's limits. The gateway
// serves it as the plain request it is (as net/http's server does), so the
// upstream never sees the upgrade, and a client over its limit gets 429.
func TestH2CUpgradeNotTunnelled(t *testing.T) { forEngines(t, testH2CUpgradeNotTunnelled) }

func testH2CUpgradeNotTunnelled(t *testing.T, engine string) {
	var reached, upgrades atomic.Int32
	h2s := &http2.Server{}
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		_, _ = io.WriteString(w, "ok "+r.URL.Path)
	})
	// An upstream that takes an h2c upgrade as some servers do: whatever the
	// Connection field lists, then serves HTTP/2 on the connection.
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "h2c") {
			inner(w, r)
			return
		}
		upgrades.Add(1)
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n")
		_ = brw.Flush()
		h2s.ServeConn(&bufConn{Conn: c, r: brw.Reader}, &http2.ServeConnOpts{Handler: inner,
			UpgradeRequest: r})
	}))
	defer up.Close()
	cfg := writeConfig(t, fmt.Sprintf(`version: 1
routes:
  - name: all
    match: {paths: ["/**"]}
    upstream: %s
limits:
  - {name: per-ip, algorithm: fixed_window, limit: 1, window: 1h, key: client_ip}
`, up.URL))
	gw, _, _, _ := startServe(t, "--engine", engine, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	c, err := net.Dial("tcp", strings.TrimPrefix(gw, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(c, "GET /one HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// The tunnel is open: the client speaks HTTP/2 to the upstream,
		// ten requests on streams 3, 5, ...
		h := newH2Raw(t, &bufConn{Conn: c, r: br})
		var ids []uint32
		for i := range 10 {
			id := uint32(3 + 2*i)
			ids = append(ids, id)
			h.headers(t, id, true, ":method", "GET", ":scheme", "http", ":authority", "x", ":path", fmt.Sprintf("/through/%d", i))
		}
		t.Logf("through the tunnel: %v", h.statuses(t, append(ids, 1)...))
	} else {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if n := upgrades.Load(); n != 0 {
		t.Errorf("the upstream was asked to upgrade to h2c %d time(s)", n)
	}
	if n := reached.Load(); n > 1 {
		t.Errorf("a limit of 1: the upstream served %d requests", n)
	}
}

// bufConn reads what a bufio.Reader holds of a connection first.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// h2Raw is a raw HTTP/2 client on a connection that speaks HTTP/2.
type h2Raw struct {
	c  net.Conn
	fr *http2.Framer
	hb bytes.Buffer
	he *hpack.Encoder
}

func newH2Raw(t *testing.T, c net.Conn) *h2Raw {
	t.Helper()
	h := &h2Raw{c: c, fr: http2.NewFramer(c, c)}
	h.he = hpack.NewEncoder(&h.hb)
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := h.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *h2Raw) headers(t *testing.T, id uint32, end bool, fields ...string) {
	t.Helper()
	h.hb.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		_ = h.he.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.hb.Bytes(), EndStream: end, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
}

// statuses reads frames until every stream of ids has its answer's head,
// or the connection ends; it returns the statuses by stream.
func (h *h2Raw) statuses(t *testing.T, ids ...uint32) map[uint32]string {
	t.Helper()
	out := map[uint32]string{}
	for len(out) < len(ids) {
		f, err := h.fr.ReadFrame()
		if err != nil {
			t.Logf("read: %v", err)
			return out
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			out[f.StreamID] = f.PseudoValue("status")
		case *http2.RSTStreamFrame:
			out[f.StreamID] = "rst:" + f.ErrCode.String()
		case *http2.GoAwayFrame:
			t.Logf("GOAWAY %v", f.ErrCode)
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = h.fr.WriteSettingsAck()
			}
		}
	}
	return out
}
