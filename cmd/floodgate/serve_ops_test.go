package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// opsConfig is a policy file with an admin token "ops-token" when tokens
// is true, and server lines added.
func opsConfig(t *testing.T, tokens bool, server string) string {
	t.Helper()
	admin := ""
	if tokens {
		admin = fmt.Sprintf("  admin:\n    tokens:\n      - {name: ops, sha256: %q}\n", sha256Hex("ops-token"))
	}
	return writeConfig(t, "version: 1\nserver:\n"+admin+server+`routes:
  - {name: all, match: {paths: ["/**"]}, upstream: none}
limits:
  - {name: per-ip, rate: 100, key: client_ip}
`)
}

// TestOpsListenerServesProbesAndMetricsOnly: the ops listener answers
// /healthz, /readyz (and ?strict) and /metrics, to the Host a probe or a
// scrape names, and nothing else: no admin API, no dashboard, no explain.
// The admin listener still serves the three, and with admin tokens its
// data (/ui/api/*, /api/v1/*, /v1/explain) answers 401 without one.
func TestOpsListenerServesProbesAndMetricsOnly(t *testing.T) {
	cfg := opsConfig(t, true, "  listen: 127.0.0.1:0\n  admin_listen: 127.0.0.1:0\n  ops_listen: 127.0.0.1:0\n  ops_hosts: [floodgate.monitoring.svc]\n")
	_, admin, _, out := startServe(t, "--config", cfg, "--log-level", "error", "--ops-listen", "") // the file's address
	ops := opsURL(t, out.String())
	for _, base := range []string{ops, admin} {
		for _, c := range []struct{ path, want string }{
			{"/healthz", "ok\n"}, {"/readyz", "ready\n"}, {"/readyz?strict", "ready\n"}, {"/metrics", "floodgate_build_info{"},
		} {
			code, _, body := get(t, base+c.path)
			if code != 200 || !strings.Contains(body, c.want) {
				t.Errorf("GET %s%s: %d %.60q, want 200 with %q", base, c.path, code, body, c.want)
			}
		}
	}
	// A probe naming the pod's address or a scrape naming a service listed
	// in server.ops_hosts (TestOpsListenerChecksHost: no other name).
	if code, _, _ := get(t, ops+"/metrics", "Host", "floodgate.monitoring.svc:9102"); code != 200 {
		t.Errorf("ops /metrics for another Host: %d", code)
	}
	for _, path := range []string{"/api/v1/keys", "/api/v1/usage", "/ui/", "/ui/api/overview", "/ui/api/quotas", "/"} {
		for _, auth := range []string{"", "Bearer ops-token"} {
			if code, _, body := get(t, ops+path, "Authorization", auth); code != 404 {
				t.Errorf("ops GET %s (%q): %d %.80q, want 404", path, auth, code, body)
			}
		}
	}
	if code := call(t, "POST", ops+"/v1/explain", "ops-token", map[string]string{"path": "/x"}, nil); code != 404 && code != 405 {
		t.Errorf("ops POST /v1/explain: %d, want 404 or 405", code)
	}
	for _, path := range []string{"/ui/api/overview", "/ui/api/quotas", "/api/v1/keys", "/api/v1/plans", "/api/v1/usage", "/api/v1/audit", "/api/v1/nothing"} {
		if code, _, body := get(t, admin+path); code != 401 {
			t.Errorf("admin GET %s without a token: %d %.80q, want 401", path, code, body)
		}
		if code, _, body := get(t, admin+path, "Authorization", "Bearer wrong"); code != 401 {
			t.Errorf("admin GET %s with a wrong token: %d %.80q, want 401", path, code, body)
		}
	}
	for _, path := range []string{"/ui/api/overview", "/api/v1/keys"} {
		if code, _, body := get(t, admin+path, "Authorization", "Bearer ops-token"); code != 200 {
			t.Errorf("admin GET %s with the token: %d %.80q, want 200", path, code, body)
		}
	}
	if code := call(t, "POST", admin+"/v1/explain", "", map[string]string{"path": "/x"}, nil); code != 401 {
		t.Errorf("admin POST /v1/explain without a token: %d, want 401", code)
	}
}

// TestOpsListenerChecksHost: the ops listener serves only requests that
// name it by an IP address (a probe or a scrape of the pod's address),
// localhost or a name in server.ops_hosts (a scrape through a service's
// name); any other Host, such as a name a page rebinds to 127.0.0.1 (DNS
// rebinding) to read /metrics as its own origin, is answered 421 with the
// reason, on every path.
func TestOpsListenerChecksHost(t *testing.T) {
	cfg := opsConfig(t, false, "  ops_hosts: [floodgate.monitoring.svc]\n")
	_, _, _, out := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--ops-listen", "127.0.0.1:0", "--log-level", "error")
	ops := opsURL(t, out.String())
	port := ops[strings.LastIndexByte(ops, ':')+1:]
	for _, c := range []struct {
		host string
		want int
	}{
		{"127.0.0.1:" + port, 200},
		{"10.1.2.3:9102", 200},
		{"[fd00::7]:9102", 200},
		{"localhost:" + port, 200},
		{"floodgate.monitoring.svc:9102", 200},
		{"Floodgate.Monitoring.Svc.", 200},
		{"rebound.example:" + port, 421},
		{"rebound.example", 421},
		{"floodgate.monitoring.svc.rebound.example", 421},
	} {
		for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
			code, _, body := get(t, ops+path, "Host", c.host)
			if code != c.want {
				t.Errorf("ops %s with Host %q: %d %.80q, want %d", path, c.host, code, body, c.want)
			}
			if c.want == 421 && !strings.Contains(body, "server.ops_hosts") {
				t.Errorf("ops %s with Host %q: the answer gives no reason: %q", path, c.host, body)
			}
		}
	}
}

// TestOpsListenerOff: "off" in the file, or --ops-listen off, opens no ops
// listener.
func TestOpsListenerOff(t *testing.T) {
	cfg := opsConfig(t, false, "  ops_listen: \"off\"\n")
	_, _, _, out := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--ops-listen", "", "--log-level", "error")
	cfg = opsConfig(t, false, "")
	_, _, _, out2 := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--ops-listen", "off", "--log-level", "error")
	for _, o := range []string{out.String(), out2.String()} {
		if strings.Contains(o, "ops on") {
			t.Errorf("an ops listener was opened:\n%s", o)
		}
	}
}

// TestAdminBeyondLoopbackNeedsTokens runs floodgate serve as a process:
// with the admin listener on an address other than loopback and no admin
// tokens it refuses to start, saying which setting to change, and serves
// nothing; on loopback, or with tokens, it starts.
func TestAdminBeyondLoopbackNeedsTokens(t *testing.T) {
	bin, err := os.Executable() // this test binary, which runs main (TestMain)
	if err != nil {
		t.Fatal(err)
	}
	noTokens := opsConfig(t, false, "")
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		for _, how := range []string{"flag", "file"} {
			cfg, args := noTokens, []string{"--admin-listen", addr}
			if how == "file" {
				cfg, args = opsConfig(t, false, fmt.Sprintf("  admin_listen: %q\n", addr)), nil
			}
			cmd := exec.Command(bin, append([]string{"serve", "--config", cfg, "--listen", "127.0.0.1:0", "--ops-listen", "127.0.0.1:0"}, args...)...)
			cmd.Env = append(os.Environ(), runMainEnv+"=1")
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			done := make(chan error, 1)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { done <- cmd.Wait() }()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("admin on %s (%s) without tokens: serve started:\n%s", addr, how, stdout.String())
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Errorf("admin on %s (%s) without tokens: %v, want exit status 1", addr, how, err)
			}
			msg := stderr.String()
			for _, want := range []string{addr, "server.admin.tokens", "server.admin_listen", "server.ops_listen"} {
				if !strings.Contains(msg, want) {
					t.Errorf("admin on %s (%s): the message does not name %q:\n%s", addr, how, want, msg)
				}
			}
			if strings.Contains(stdout.String(), " on http") {
				t.Errorf("admin on %s (%s): serve opened listeners before refusing:\n%s", addr, how, stdout.String())
			}
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0", "[::1]:0"} {
		if addr == "[::1]:0" && !canListen("tcp6", "[::1]:0") {
			continue // no IPv6 loopback on this machine
		}
		_, admin, _, _ := startServe(t, "--config", noTokens, "--listen", "127.0.0.1:0", "--admin-listen", addr, "--log-level", "error")
		if code, _, _ := get(t, admin+"/healthz"); code != 200 {
			t.Errorf("admin on %s without tokens: /healthz %d", addr, code)
		}
	}
	withTokens := opsConfig(t, true, "")
	_, admin, _, _ := startServe(t, "--config", withTokens, "--listen", "127.0.0.1:0", "--admin-listen", "0.0.0.0:0", "--log-level", "error")
	if code, _, _ := get(t, admin+"/api/v1/keys"); code != http.StatusUnauthorized {
		t.Errorf("admin on 0.0.0.0 with tokens: /api/v1/keys without a token %d, want 401", code)
	}
}

func canListen(network, addr string) bool {
	ln, err := net.Listen(network, addr)
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// TestSideListenersHoldABoundedShare: a client that holds connections to
// the ops and admin listeners open (each after a probe's answer, kept
// alive) is answered 503 past their share (at most 1,024 each), and the
// gateway goes on serving. With no cap and no idle timeout, such a client
// once ran the process out of descriptors and the gateway's accept ended
// it.
func TestSideListenersHoldABoundedShare(t *testing.T) {
	cfg := opsConfig(t, true, "  listen: 127.0.0.1:0\n  admin_listen: 127.0.0.1:0\n  ops_listen: 127.0.0.1:0\n  ops_hosts: [floodgate.monitoring.svc]\n")
	gw, admin, _, out := startServe(t, "--config", cfg, "--log-level", "error", "--ops-listen", "")
	ops := opsURL(t, out.String())
	for _, base := range []string{ops, admin} {
		addr := strings.TrimPrefix(base, "http://")
		var held []net.Conn
		shed := false
		for len(held) < 1100 && !shed {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatalf("%s: connection %d: %v", base, len(held)+1, err)
			}
			held = append(held, c)
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: " + addr + "\r\n\r\n")); err != nil {
				t.Fatalf("%s: connection %d: %v", base, len(held), err)
			}
			line := make([]byte, 12)
			if _, err := io.ReadFull(c, line); err != nil {
				t.Fatalf("%s: connection %d: %v", base, len(held), err)
			}
			switch string(line) {
			case "HTTP/1.1 200":
			case "HTTP/1.1 503":
				shed = true
			default:
				t.Fatalf("%s: connection %d answered %q", base, len(held), line)
			}
		}
		if !shed {
			t.Errorf("%s: %d connections held open, none answered 503", base, len(held))
		}
		if code, _, _ := get(t, gw+"/x"); code == 0 || code >= 500 {
			t.Errorf("the gateway while %s holds %d connections: %d", base, len(held), code)
		}
		for _, c := range held {
			c.Close()
		}
	}
}
