package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
)

// TestUpgradeTunnels: a request that upgrades its connection (as a
// WebSocket does) passes the limits, is tunnelled to the upstream and its
// bytes flow both ways, on each engine (the edge engine hands it to
// net/http); over the limit it is refused with 429 like any other.
func TestUpgradeTunnels(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testUpgradeTunnels)
}

func testUpgradeTunnels(t *testing.T, fr string) {
	rule := ruletest.Rule(t, floodgate.Limit{Name: "ws", Algorithm: floodgate.FixedWindow, Max: 1, Window: time.Hour})
	_, base, _ := startFront(t, fr, Options{Matcher: oneRule(rule), Engine: memEngine(t)},
		func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Upgrade") != "echo" {
				http.Error(w, "no upgrade", http.StatusBadRequest)
				return
			}
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
			_ = brw.Flush()
			line, err := brw.ReadString('\n')
			if err == nil {
				_, _ = brw.WriteString("echo: " + line)
				_ = brw.Flush()
			}
		})
	addr := strings.TrimPrefix(base, "http://")
	upgrade := func() (*bufio.Reader, net.Conn, *http.Response) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		return br, c, resp
	}
	br, c, resp := upgrade()
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("RateLimit") == "" {
		t.Fatalf("upgrade: %d, RateLimit %q", resp.StatusCode, resp.Header.Get("RateLimit"))
	}
	if _, err := io.WriteString(c, "hello\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := br.ReadString('\n'); err != nil || line != "echo: hello\n" {
		t.Fatalf("through the tunnel: %q %v", line, err)
	}
	if _, _, resp := upgrade(); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a second upgrade over the limit: %d, want 429", resp.StatusCode)
	}
}

// TestHTTP10UpgradeIsIgnored: an HTTP/1.0 request that asks to upgrade its
// connection is served as the plain request it is, on each engine (RFC
// 9110 §7.8 has a server ignore the Upgrade of an HTTP/1.0 request, and a
// WebSocket handshake is HTTP/1.1 at least, RFC 6455 §4.1): the upstream is
// not asked to upgrade, no tunnel opens past the limits, and the answer
// says no Upgrade. Before 2026-12-07 both engines forwarded the upgrade,
// answered 101 with both `Connection: close` and `Connection: Upgrade`,
// and tunnelled what the client sent next to the upstream.
func TestHTTP10UpgradeIsIgnored(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		rule := ruletest.Rule(t, floodgate.Limit{Name: "ws", Algorithm: floodgate.FixedWindow, Max: 10, Window: time.Hour})
		asked := make(chan string, 4)
		_, base, _ := startFront(t, fr, Options{Matcher: oneRule(rule), Engine: memEngine(t)},
			func(w http.ResponseWriter, r *http.Request) {
				asked <- r.Header.Get("Upgrade")
				if r.Header.Get("Upgrade") == "" {
					_, _ = io.WriteString(w, "plain")
					return
				}
				c, brw, err := http.NewResponseController(w).Hijack()
				if err != nil {
					return
				}
				defer c.Close()
				_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
				_ = brw.Flush()
				if line, err := brw.ReadString('\n'); err == nil {
					_, _ = brw.WriteString("echo: " + line)
					_ = brw.Flush()
				}
			})
		for _, conn := range []string{"Upgrade", "Upgrade, keep-alive"} {
			c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(c, "GET /ws HTTP/1.0\r\nHost: x\r\nConnection: "+conn+"\r\nUpgrade: echo\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 64))
			resp.Body.Close()
			c.Close()
			if resp.StatusCode != http.StatusOK || string(body) != "plain" || resp.Header.Get("Upgrade") != "" {
				t.Errorf("Connection: %s: answered %d %q, Upgrade %q; want the plain request's 200",
					conn, resp.StatusCode, body, resp.Header.Get("Upgrade"))
			}
			if up := <-asked; up != "" {
				t.Errorf("Connection: %s: the upstream was asked to upgrade to %q", conn, up)
			}
		}
	})
}
