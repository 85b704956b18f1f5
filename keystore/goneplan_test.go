package keystore

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/policy"
)

// TestKeyOfAGonePlanCanBeDisabledAndRotated: a reload that removes a
// plan leaves its keys stored, unserved until a later reload gives the
// plan back. A disable, a rotation without overlap and a reset of such a
// key change neither its plan nor its own limits, and must be kept, so
// that the key is still off, and its leaked secret refused, when the plan
// comes back.
func TestKeyOfAGonePlanCanBeDisabledAndRotated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, r, reload := gonePlanRig(t)
	off, _, err := s.Create(ctx, "off", "gold", policy.KeyOptions{Quota: 50})
	if err != nil {
		t.Fatal(err)
	}
	leaked, _, err := s.Create(ctx, "leaked", "gold", policy.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reloadAndRefresh := func(text string) {
		t.Helper()
		reload(text)
		s.Refresh(ctx)
	}
	reloadAndRefresh(withoutGold)

	if _, err := s.Update(ctx, "off", func(r *Record) error { r.Disabled = true; return nil }); err != nil {
		t.Errorf("disable of a key whose plan a reload removed: %v", err)
	}
	if _, _, err := s.Rotate(ctx, "leaked", 0); err != nil {
		t.Errorf("rotation without overlap of a key whose plan a reload removed: %v", err)
	}
	if _, err := s.Update(ctx, "leaked", func(r *Record) error { r.Generation++; return nil }); err != nil {
		t.Errorf("reset of a key whose plan a reload removed: %v", err)
	}

	// The plan is back.
	reloadAndRefresh(testPolicy)
	if k := lookup(s, r.Policy(), off); k != nil {
		t.Error("the key disabled while its plan was gone works again once the plan is back")
	}
	if k := lookup(s, r.Policy(), leaked); k != nil {
		t.Error("the secret rotated out while its plan was gone works again once the plan is back")
	}
}

// TestKeyOfAGonePlanServedOnceThePlanIsBack: a key whose plan a reload
// removed is served by the first request after a reload that gives the
// plan back, before the store's next refresh, as every other key is
// resolved on the spot against a policy newer than the store's view.
func TestKeyOfAGonePlanServedOnceThePlanIsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, r, reload := gonePlanRig(t)
	raw, _, err := s.Create(ctx, "partner", "gold", policy.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reload(withoutGold)
	s.Refresh(ctx)
	if k := lookup(s, r.Policy(), raw); k != nil {
		t.Fatal("a key whose plan is gone is served")
	}
	reload(testPolicy) // no refresh: the next request is the first to see it
	if k := lookup(s, r.Policy(), raw); k == nil || k.Name() != "partner" {
		t.Fatalf("first request after the plan came back: %v, want the key served", k)
	}
	if k := s.LookupKeyName(r.Policy(), "partner"); k == nil {
		t.Fatal("by name, after the plan came back: not served")
	}
}

// withoutGold is testPolicy without its plan gold.
var withoutGold = strings.ReplaceAll(testPolicy, "  - {name: gold, rate: 20, burst: 20, quota: {limit: 1000, period: DAY}}\n", "")

// gonePlanRig is a key store on a file backend serving the policy file
// testPolicy, and reload, which writes the policy file anew and reloads
// it (the store is not refreshed).
func gonePlanRig(t *testing.T) (s *Store, r *policy.Reloader, reload func(text string)) {
	t.Helper()
	dir := t.TempDir()
	polPath := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(polPath, []byte(testPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := policy.NewReloader(policy.ReloaderOptions{Path: polPath})
	if err != nil {
		t.Fatal(err)
	}
	s, err = New(context.Background(), Options{Backend: NewFileBackend(filepath.Join(dir, "keys.json")), Policy: r.Policy})
	if err != nil {
		t.Fatal(err)
	}
	reload = func(text string) {
		t.Helper()
		if err := os.WriteFile(polPath, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := r.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	return s, r, reload
}
