package console_test

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/internal/console"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/internal/testcerts"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store"
	_ "github.com/floodgate/floodgate/store/memstore"
	_ "github.com/floodgate/floodgate/store/redisstore"
)

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestConsoleReachesRedisThroughTheStoresClient keeps the console's state
// in a rediss:// store whose server certificate only a CA made for the
// test signs, given to the store alone: the keys made through the admin
// API and the audit log reach that Redis through the store's client, with
// its TLS settings. A client of its own, built from the URL, would know
// only the system roots and could not connect.
func TestConsoleReachesRedisThroughTheStoresClient(t *testing.T) {
	dir := t.TempDir()
	ca, err := testcerts.NewCA(dir, "redis-test")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.Server("redis")
	if err != nil {
		t.Fatal(err)
	}
	rs, err := redistest.StartServer(redistest.Config{Dir: dir, TLSArgs: []string{
		"--tls-cert-file", pair.Cert, "--tls-key-file", pair.Key,
		"--tls-ca-cert-file", ca.File, "--tls-auth-clients", "no",
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rs.Stop)
	url := "rediss://" + rs.TLSAddr

	cfg := filepath.Join(dir, "fg.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `version: 1
server:
  store: %s
  admin:
    tokens:
      - {name: ops, sha256: %q}
plans:
  - {name: basic, rate: 50, burst: 50, quota: {limit: 1000, period: DAY}}
`, url, sha256Hex("ops-token")), 0o600); err != nil {
		t.Fatal(err)
	}
	rl, err := policy.NewReloader(policy.ReloaderOptions{Path: cfg})
	if err != nil {
		t.Fatal(err)
	}
	st, closer, err := store.Open(t.Context(), url, store.Options{TLS: &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12}})
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	c, err := console.New(console.Options{ConfigPath: cfg, Server: rl.Policy().Server(), Reloader: rl, Store: st,
		Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatalf("the console on a rediss:// store with its own CA: %v", err)
	}
	defer c.Close()
	eng := limiter.New(st, limiter.Options{Timeout: 2 * time.Second})
	if err := c.Attach(eng, eng.Stats); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	c.Routes(mux)
	api := httptest.NewServer(mux)
	defer api.Close()

	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, api.URL+"/api/v1/keys",
		bytes.NewReader([]byte(`{"name": "acme", "plan": "basic"}`)))
	req.Header.Set("Authorization", "Bearer ops-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("creating a key: %d", resp.StatusCode)
	}
	// Read back on the server's plain port: the key and the audit entry
	// are in that Redis.
	if v, err := rs.Do("HGET", "{floodgate}:keys", "acme"); err != nil || !strings.Contains(v, `"basic"`) {
		t.Errorf("the key in Redis: %q, %v", v, err)
	}
	if v, err := rs.Do("LLEN", "{floodgate}:audit"); err != nil || v != "1" {
		t.Errorf("audit entries in Redis: %q, %v; want 1", v, err)
	}
}
