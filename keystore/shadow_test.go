package keystore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/floodgate/floodgate/policy"
)

// TestFileKeyNameShadowsStoreKey: a key of the policy file takes its name
// from a key made through the admin API when a reload brings it. Both would
// count under the name's counter (key:NAME), so the store's key would spend
// the file key's limits (and the file key its own), and the admin API,
// which leaves a name of the file to the file, could no longer revoke it:
// the file's key wins, and the store's secret is refused on the request
// path until the file lets go of the name. The store refuses to make a key
// of a name the file uses.
func TestFileKeyNameShadowsStoreKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	polPath := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(polPath, []byte(testPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := policy.NewReloader(policy.ReloaderOptions{Path: polPath})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, err := New(ctx, Options{Backend: NewFileBackend(filepath.Join(dir, "keys.json")), Policy: r.Policy})
	if err != nil {
		t.Fatal(err)
	}
	r.SetKeySource(s)
	raw, _, err := s.Create(ctx, "acme", "basic", policy.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	match := func(key string) *policy.Match {
		var m policy.Match
		r.Policy().Match(&policy.Request{Method: "GET", Path: "/x", APIKey: key}, &m)
		return &m
	}
	if m := match(raw); m.Forbidden || m.KeyName != "acme" {
		t.Fatalf("the store's key before the reload: %+v", m)
	}

	// The file now has a key named acme, with a secret of its own.
	fileSecret := "file-secret-of-acme"
	sum := sha256.Sum256([]byte(fileSecret))
	beta := sha256.Sum256([]byte("file-secret-of-beta"))
	withKey := testPolicy + "keys:\n  - {name: acme, plan: basic, sha256: " + hex.EncodeToString(sum[:]) + "}\n" +
		"  - {name: beta, plan: gold, sha256: " + hex.EncodeToString(beta[:]) + "}\n"
	if err := os.WriteFile(polPath, []byte(withKey), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if m := match(fileSecret); m.Forbidden || m.KeyName != "acme" {
		t.Fatalf("the file's key: %+v", m)
	}
	check := func(when string) {
		t.Helper()
		if m := match(raw); !m.Forbidden {
			var counters []string
			for _, h := range m.Hits {
				counters = append(counters, h.Key)
			}
			t.Errorf("%s: the store's secret of acme is still accepted (plan %q, counters %q), beside the file's key acme", when, m.Plan, counters)
		}
		if k := lookup(s, r.Policy(), raw); k != nil {
			t.Errorf("%s: LookupKey found the store's acme (counter %s)", when, k.Counter())
		}
		if k := s.LookupKeyName(r.Policy(), "acme"); k != nil {
			t.Errorf("%s: LookupKeyName found the store's acme (plan %s)", when, k.Plan())
		}
	}
	check("before the store saw the reload")
	s.Refresh(ctx)
	check("after the store saw the reload")

	if _, _, err := s.Create(ctx, "beta", "basic", policy.KeyOptions{}); !errors.Is(err, ErrExists) {
		t.Errorf("a key named as the file's: %v, want ErrExists", err)
	}

	// Once the file lets go of the name, the store's key works again.
	if err := os.WriteFile(polPath, []byte(testPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	s.Refresh(ctx)
	if m := match(raw); m.Forbidden || m.KeyName != "acme" || m.Plan != "basic" {
		t.Errorf("the store's key after the file let go of its name: %+v", m)
	}
}
