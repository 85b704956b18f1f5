package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPathParamsDoNotMoveARequestOutOfItsRoute: a path parameter makes a
// segment ("/;x", "/.;x") that one reader of a path removes before it
// resolves the dot segments (Tomcat, and the gateway's route matcher) and
// another keeps as a segment of its own (NGINX, net/http, fasthttp). A ".."
// after it then takes away a different segment on each side:
// "/admin/;x/../secret" was limited as "/secret" by the net/http engine and
// the middleware and served by NGINX as "/admin/secret", and
// "/public/;x/../admin/secret" limited as "/public/admin/secret" by the edge
// engine and served by a Tomcat-style upstream as "/admin/secret": the
// admin route's limit bypassed. Such a path is refused with 400 on every
// front and never forwarded; a parameter with no ".." after it is served.
func TestPathParamsDoNotMoveARequestOutOfItsRoute(t *testing.T) {
	t.Parallel()
	ng := startTestNginx(t)
	tomcat := httptest.NewServer(http.HandlerFunc(tomcatStyle))
	t.Cleanup(tomcat.Close)
	for _, up := range []struct{ name, base string }{{"nginx", ng}, {"tomcat-style", tomcat.URL}} {
		t.Run(up.name, func(t *testing.T) {
			t.Parallel()
			forFronts(t, allFronts, func(t *testing.T, fr string) { testPathParamsRoute(t, fr, up.base) })
		})
	}
}

// tomcatStyle answers as Tomcat reads a path: the parameters of its
// segments removed first, then decoded, then its empty and dot segments
// resolved. It answers "admin PATH" under /admin/, "public PATH" elsewhere.
func tomcatStyle(w http.ResponseWriter, r *http.Request) {
	var b strings.Builder
	raw := r.URL.EscapedPath()
	for i := 0; i < len(raw); {
		if raw[i] != ';' {
			b.WriteByte(raw[i])
			i++
			continue
		}
		for i < len(raw) && raw[i] != '/' {
			i++
		}
	}
	p, err := url.PathUnescape(b.String())
	if err != nil {
		http.Error(w, "bad path", http.StatusBadRequest)
		return
	}
	p = path.Clean("/" + p)
	if strings.HasPrefix(p, "/admin/") {
		fmt.Fprintf(w, "admin %s\n", p)
		return
	}
	fmt.Fprintf(w, "public %s\n", p)
}

func testPathParamsRoute(t *testing.T, fr, up string) {
	p := compilePolicy(t, "params.yaml", `version: 1
routes:
  - {name: admin, match: {paths: ["/admin/**"]}, upstream: "http://127.0.0.1:1"}
  - {name: rest, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:1"}
limits:
  - {name: admin, rate: 1, per: 1h, burst: 1, match: {routes: [admin]}}
`)
	u, _ := url.Parse(up)
	pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{Upstream: u})
	if err != nil {
		t.Fatal(err)
	}
	var next http.HandlerFunc
	if fr == frontMiddleware {
		// The middleware's application: the upstream, behind a plain proxy.
		next = httputil.NewSingleHostReverseProxy(u).ServeHTTP
	}
	g, err := New(Options{Matcher: pm, Engine: memEngine(t)})
	if err != nil {
		t.Fatal(err)
	}
	base := serveFront(t, fr, g, next)
	if status, body := rawAnswer(t, base, "GET /admin/secret HTTP/1.1\r\nHost: a.example\r\n\r\n"); status != 200 || body != "admin /admin/secret\n" {
		t.Fatalf("the admin route's one request: %d %q", status, body)
	}
	if status, _ := rawAnswer(t, base, "GET /admin/secret HTTP/1.1\r\nHost: a.example\r\n\r\n"); status != 429 {
		t.Fatalf("the admin route's second request: %d, want 429", status)
	}
	for _, target := range []string{
		"/admin/;x/../secret",
		"/admin/;/../secret",
		"/admin/.;x/../secret",
		"/admin/.;/../secret",
		"/admin/%3Bx/../secret",
		"/admin/.%3B/%2e%2e/secret",
		"/public/;x/../admin/secret",
		"/public/.;x/../admin/secret",
		"/public/%3bx/%2E%2E/admin/secret",
		"http://a.example/public/;x/../admin/secret",
	} {
		status, body := rawAnswer(t, base, "GET "+target+" HTTP/1.1\r\nHost: a.example\r\n\r\n")
		if strings.HasPrefix(body, "admin ") {
			t.Errorf("%s: %d, served by the upstream as %q past the admin route's limit", target, status, strings.TrimSpace(body))
		} else if status != http.StatusBadRequest {
			t.Errorf("%s: %d %q, want 400", target, status, body)
		}
	}
	// A parameter with no ".." after it moves nothing: served.
	for _, target := range []string{"/app/;jsessionid=1", "/app/x;v=1/../y"} {
		if status, body := rawAnswer(t, base, "GET "+target+" HTTP/1.1\r\nHost: a.example\r\n\r\n"); status != 200 || !strings.HasPrefix(body, "public ") {
			t.Errorf("%s: %d %q, want 200 from the upstream", target, status, body)
		}
	}
}

// rawAnswer sends head on a connection of its own to the front at base and
// returns the answer's status and body.
func rawAnswer(t *testing.T, base, head string) (int, string) {
	t.Helper()
	resp, body := rawResponse(t, base, head)
	return resp.StatusCode, body
}

// rawGet sends GET target over HTTP/1.1 with the Host field host on a
// connection of its own to the front at base and returns the answer, its
// body read.
func rawGet(t *testing.T, base, target, host string) *http.Response {
	t.Helper()
	resp, _ := rawResponse(t, base, "GET "+target+" HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
	return resp
}

// rawResponse sends head on a connection of its own to the front at base
// and returns the answer, its body read, and the body.
func rawResponse(t *testing.T, base, head string) (*http.Response, string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%q: %v", head, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// startTestNginx runs NGINX on a loopback port, answering "admin URI" under
// /admin/ and "public URI" elsewhere, URI being the path as NGINX resolved
// it; it is stopped by its PID when the test ends. Without NGINX the test
// is skipped, and fails in CI (CI set), where scripts/test.sh installs it.
func startTestNginx(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("nginx")
	if err != nil {
		bin = "/usr/sbin/nginx"
		if _, err := os.Stat(bin); err != nil {
			if os.Getenv("CI") == "" {
				t.Skip("NGINX is not installed (apt-get install nginx-light, or run scripts/test.sh)")
			}
			t.Fatal("NGINX is not installed (scripts/test.sh installs it)")
		}
	}
	prefix := t.TempDir()
	for _, d := range []string{"logs", "body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		if err := os.MkdirAll(filepath.Join(prefix, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;"
	}
	for attempt := 1; attempt <= 5; attempt++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		conf := fmt.Sprintf(`%s
worker_processes 1;
pid %[2]s/nginx.pid;
error_log %[2]s/logs/error.log warn;
events { worker_connections 64; }
http {
    client_body_temp_path %[2]s/body;
    proxy_temp_path %[2]s/proxy;
    fastcgi_temp_path %[2]s/fastcgi;
    uwsgi_temp_path %[2]s/uwsgi;
    scgi_temp_path %[2]s/scgi;
    access_log off;
    default_type text/plain;
    server {
        listen 127.0.0.1:%[3]d;
        location /admin/ { return 200 "admin $uri\n"; }
        location / { return 200 "public $uri\n"; }
    }
}
`, user, prefix, port)
		confPath := filepath.Join(prefix, "nginx.conf")
		if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "-p", prefix, "-c", confPath, "-g", "daemon off;")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		stop := func() {
			_ = cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		}
		base := fmt.Sprintf("http://127.0.0.1:%d", port)
		client := &http.Client{Timeout: time.Second}
		for i := 0; i < 200; i++ {
			select {
			case <-done:
				i = 200
				continue
			default:
			}
			if resp, err := client.Get(base + "/"); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(b) == "public /\n" {
					t.Cleanup(stop)
					return base
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		stop()
	}
	t.Fatal("nginx did not start")
	return ""
}
