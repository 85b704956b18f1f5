package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/redistest"
)

// schoolOnRedis writes examples/school.yaml, with its JWT secret, into a
// temporary directory with server.store naming the Redis at addr (and a
// store deadline that a loaded machine keeps), and returns its path.
func schoolOnRedis(t *testing.T, addr string) string {
	t.Helper()
	return schoolOnStore(t, "redis://"+addr+"/0")
}

// schoolOnStore is schoolOnRedis with server.store naming storeURL.
func schoolOnStore(t *testing.T, storeURL string) string {
	t.Helper()
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join("..", "..", "examples", "school.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := regexp.MustCompile(`(?m)^  store: .*$`).ReplaceAll(src, []byte("  store: "+storeURL))
	cfg = regexp.MustCompile(`(?m)^  store_timeout: .*$`).ReplaceAll(cfg, []byte("  store_timeout: 2s"))
	if !strings.Contains(string(cfg), "store: "+storeURL) || !strings.Contains(string(cfg), "store_timeout: 2s") {
		t.Fatal("examples/school.yaml has no server.store or server.store_timeout to replace")
	}
	secret, err := os.ReadFile(filepath.Join("..", "..", "examples", "demo-jwt-secret.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"school.yaml": cfg, "demo-jwt-secret.txt": secret} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "school.yaml")
}

// TestConcurrentFailedLoginsRedis is TestConcurrentFailedLogins with the
// school example's counters in a real redis-server: the login limit's
// reservations live in Redis, so 300 concurrent wrong passwords from one
// address let exactly its capacity, 5, reach the login upstream, and the
// other 295 are answered 429.
func TestConcurrentFailedLoginsRedis(t *testing.T) {
	rs := redistest.Start(t)
	gw, admin, _, out, _ := startServeLogged(t, "--config", schoolOnRedis(t, rs.Addr), "--demo",
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "warn")
	if !strings.Contains(out.String(), "store redis") {
		t.Fatalf("serve does not use Redis:\n%s", out.String())
	}
	loginFlood(t, gw, admin, " on Redis")
	for _, m := range regexp.MustCompile(`(?m)^floodgate_degraded_decisions_total\{.*\} (\d+)$`).FindAllStringSubmatch(metricsText(t, admin), -1) {
		if m[1] != "0" {
			t.Errorf("decisions degraded: %s; the store should have decided them all", m[0])
		}
	}
}
