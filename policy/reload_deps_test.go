package policy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunAppliesAVersionWhenTheKeyFileItNamesArrives updates the policy
// file to name a JWT key file that is not there yet, as Kubernetes does
// when a ConfigMap's new version is mounted before the Secret's: that
// version is rejected. When the key file then arrives, with the policy
// file unchanged, Run must apply the version without a SIGHUP.
func TestRunAppliesAVersionWhenTheKeyFileItNamesArrives(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "floodgate.yaml")
	writeFile(t, path, reloadV1)
	rl, err := NewReloader(ReloaderOptions{Path: path, Interval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); rl.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 30s (reloads %d, rejected %d)", what, rl.Reloads(), rl.Rejected())
			}
		}
	}
	writeFile(t, path, "server:\n  user:\n    jwt: {alg: HS256, key_file: secrets/key.txt}\n"+reloadV1)
	waitFor("the version without its key file rejected", func() bool { return rl.Rejected() >= 1 })
	if rl.Policy().File().Server.User.JWT != nil {
		t.Fatal("a version without its key file applied")
	}
	if err := os.Mkdir(filepath.Join(dir, "secrets"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "secrets", "key.txt"), strings.Repeat("k", 32))
	waitFor("the version applied once its key file arrived", func() bool { return rl.Reloads() == 1 })
	if rl.Policy().File().Server.User.JWT == nil {
		t.Fatal("the applied version has no token settings")
	}
	// The key file is followed from then on: a rotated key is a new version.
	writeFile(t, filepath.Join(dir, "secrets", "key.txt"), strings.Repeat("r", 32))
	waitFor("the rotated key applied", func() bool { return rl.Reloads() == 2 })
}
