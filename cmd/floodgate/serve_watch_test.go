package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestServeWatchFlag(t *testing.T) {
	cfg, err := parseServeFlags([]string{"--config", "f.yaml"}, io.Discard)
	if err != nil || !cfg.Watch {
		t.Errorf("watch by default: %v, %v", cfg, err)
	}
	cfg, err = parseServeFlags([]string{"--config", "f.yaml", "--watch=false"}, io.Discard)
	if err != nil || cfg.Watch {
		t.Errorf("--watch=false: %v, %v", cfg, err)
	}
}

// TestServeWatchesByDefault replaces the file (by a rename, as tools and
// Kubernetes do) under a running "floodgate serve" started without flags
// about watching: the new limit takes effect without a signal.
func TestServeWatchesByDefault(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gw.yaml")
	write := func(burst int) {
		t.Helper()
		tmp := cfg + ".tmp"
		src := fmt.Sprintf("routes:\n  - {name: all, match: {paths: [\"/**\"]}, upstream: %s}\n"+
			"limits:\n  - {name: hourly, rate: 1, per: 1h, burst: %d, key: global}\n", up.URL, burst)
		if err := os.WriteFile(tmp, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, cfg); err != nil {
			t.Fatal(err)
		}
	}
	write(1)
	gw, _, stop, _ := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	if code, _, _ := get(t, gw+"/"); code != 200 {
		t.Fatalf("first request %d", code)
	}
	write(50)
	awaitPolicy(t, gw, `"hourly";q=50`, 30*time.Second, "the changed file")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
