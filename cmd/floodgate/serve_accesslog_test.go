package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServeAccessLogFromFile: server.access_log writes the log next to the
// policy file, in the format it names, and the metrics count it; the
// flags override the file.
func TestServeAccessLogFromFile(t *testing.T) { forEngines(t, testServeAccessLogFromFile) }

func testServeAccessLogFromFile(t *testing.T, engine string) {
	dir := t.TempDir()
	up := replayUpstream(t)
	cfg := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(cfg, []byte(`version: 1
server:
  access_log: {path: logs/access.log, format: combined, max_size: 65536, max_files: 2}
routes:
  - {name: r, match: {paths: ["/**"]}, upstream: `+up.URL+`}
limits:
  - {name: per-ip, rate: 1, per: 1h, burst: 2, key: client_ip, scope: global}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	gw, admin, stop, _ := startServe(t, "--engine", engine, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	for range 3 {
		get(t, gw+"/x")
	}
	if _, _, body := get(t, admin+"/metrics"); !strings.Contains(body, "floodgate_access_log_records_total 3") {
		t.Errorf("metrics: %s", grepLines(body, "access_log"))
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "logs", "access.log"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "127.0.0.1 - - [") || !strings.HasSuffix(lines[2], `"per-ip" "deny" "-" "-" "-" "-"`) {
		t.Errorf("log:\n%s", b)
	}
	// The flag overrides the file: JSON on standard output.
	gw, _, stop, out := startServe(t, "--engine", engine, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error",
		"--access-log", "-", "--access-log-format", "json")
	get(t, gw+"/y")
	// Answered before the request path, logged all the same: OPTIONS *
	// (which net/http's server would answer unlogged) and a target with a
	// fragment.
	for _, c := range []struct{ head, want string }{
		{"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", `"method":"OPTIONS","host":"a","path":"*","proto":"HTTP/1.1","status":200`},
		{"GET /p#f HTTP/1.1\r\nHost: a\r\n\r\n", `"method":"GET","host":"a","path":"/p#f","proto":"HTTP/1.1","status":400`},
	} {
		conn, err := net.DialTimeout("tcp", strings.TrimPrefix(gw, "http://"), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(conn, c.head); err != nil {
			t.Fatal(err)
		}
		if _, err := http.ReadResponse(bufio.NewReader(conn), nil); err != nil {
			t.Fatalf("%q: %v", c.head, err)
		}
		conn.Close()
		defer func() {
			if !strings.Contains(out.String(), c.want) {
				t.Errorf("%q: no record %s in %s", c.head, c.want, out.String())
			}
		}()
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"path":"/y"`) {
		t.Errorf("stdout: %s", out.String())
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
