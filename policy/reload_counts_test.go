package policy_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/policy"
)

// writeFile replaces path atomically, as configuration tools do.
func writeFile(t testing.TB, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

const reloadV1 = `
routes:
  - {name: r, match: {paths: ["/**"]}, stage: dev, upstream: none}
stages:
  - {name: dev, rate: 5, burst: 5, per: 1h}
limits:
  - {name: per-ip, rate: 10, burst: 10, per: 1h}
`

// TestReloadKeepsCountsOfUnchangedLimits decides requests through a
// gateway that follows the Reloader, as "floodgate serve" does.
func TestReloadKeepsCountsOfUnchangedLimits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	writeFile(t, path, reloadV1)
	rl, err := policy.NewReloader(policy.ReloaderOptions{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	p1 := rl.Policy()
	r := newRigOn(t, rl, t0)
	req := &policy.Request{Method: "GET", Path: "/x", ClientIP: ip("198.51.100.7")}
	r.statuses(3, req)

	// per-ip changes, the stage does not, a limit is added.
	writeFile(t, path, strings.Replace(reloadV1, "rate: 10, burst: 10", "rate: 20, burst: 20", 1)+
		"  - {name: added, rate: 7, key: global}\n")
	if err := rl.Reload(); err != nil {
		t.Fatal(err)
	}
	p2 := rl.Policy()
	if p2 == p1 || rl.Reloads() != 1 {
		t.Fatalf("not reloaded (reloads %d)", rl.Reloads())
	}
	s1, _ := p1.Limit("stage.dev")
	s2, _ := p2.Limit("stage.dev")
	if s1.Rule != s2.Rule {
		t.Error("the unchanged stage limit got a new rule")
	}
	i1, _ := p1.Limit("per-ip")
	i2, _ := p2.Limit("per-ip")
	if i1.Rule == i2.Rule || i1.Rule.ID() == i2.Rule.ID() {
		t.Error("the changed limit kept its rule")
	}
	if got := r.remaining(req, "stage.dev"); got != 2 {
		t.Errorf("stage.dev remaining %d after reload, want 2 (count kept)", got)
	}
	if got := r.remaining(req, "per-ip"); got != 20 {
		t.Errorf("changed per-ip remaining %d, want a fresh 20", got)
	}
	// Reloading the same file again changes nothing.
	if err := rl.Reload(); err != nil || rl.Policy() != p2 || rl.Reloads() != 1 {
		t.Errorf("same file reloaded: err %v, reloads %d", err, rl.Reloads())
	}
}
