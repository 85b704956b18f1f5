package rls

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadAppReadsWhatEnvoyproxyRatelimitReadsWatchingTheRoot: with
// RUNTIME_WATCH_ROOT=true (its default) envoyproxy/ratelimit walks
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY, names each file by its path with '.'
// for '/', and loads those whose names start with RUNTIME_APPDIRECTORY and
// a dot: the files of config/, and config.yaml and config.d/ beside it
// (Helm charts mount a single file at ratelimit/config.yaml). Run by hand
// with RUNTIME_ROOT=R, RUNTIME_SUBDIRECTORY=ratelimit and R/ratelimit
// holding config.yaml (domain shop), config.d/other.yaml (domain other)
// and configx.yaml, the peer's /rlconfig listed shop and other;
// floodgate rls read only R/ratelimit/config, which did not exist, and
// answered every request "no rate limit configuration loaded".
func TestLoadAppReadsWhatEnvoyproxyRatelimitReadsWatchingTheRoot(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	opts := LoadOptions{AllFiles: true, Recursive: true, DotFiles: true, App: "config"}
	if _, err := Load([]string{dir}, opts); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "config")+": cannot read") {
		t.Errorf("nothing of config's: %v, want config named missing", err)
	}
	write("configx.yaml", "domain: [not read\n")      // "configx.yaml" does not start with "config."
	write("other/config.yaml", "domain: [not read\n") // "other.config.yaml" neither
	write("config.yaml", "domain: shop\ndescriptors:\n  - key: client\n    rate_limit: {unit: minute, requests_per_unit: 7}\n")
	write("config.d/other.yaml", "domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n")
	cfg, err := Load([]string{dir}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Domains(), ","); got != "other,shop" {
		t.Errorf("domains %q, want other,shop", got)
	}
	// The directory config/ is read too, sub-directories included, as
	// without App.
	write("config/a/third.yaml", "domain: third\n")
	if cfg, err = Load([]string{dir}, opts); err != nil || strings.Join(cfg.Domains(), ",") != "other,shop,third" {
		t.Errorf("with config/: %v %v", cfg.Domains(), err)
	}
	// A file named config alone is not read: its name has no dot after
	// the directory's.
	only := t.TempDir()
	if err := os.WriteFile(filepath.Join(only, "config"), []byte("domain: [not read\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load([]string{only}, opts); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("a file named config: %v, want config named, not a directory", err)
	}
}
