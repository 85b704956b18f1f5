package keystore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/policy"
)

// reloaderWith is reloader's policy with server.admin.max_keys set.
func reloaderWith(t *testing.T, maxKeys int) (*policy.Reloader, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "p.yaml")
	src := fmt.Sprintf("server:\n  admin: {max_keys: %d}\n%s", maxKeys, testPolicy)
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := policy.NewReloader(policy.ReloaderOptions{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	return r, path
}

// TestCreateRefusedPastMaxKeys: the store keeps at most
// server.admin.max_keys keys, revoked ones included (they stay stored),
// counting those other instances sharing the backend made; past it a new
// key is ErrFull, and the existing ones keep working. A reload that raises
// the bound lets the next key in. Before, nothing bounded the keys: a
// token holder in a loop (or an automation gone wrong) grew the store, its
// file or Redis hash, every instance's copy and the work of each change
// (every change rebuilds every key's limits) without end.
func TestCreateRefusedPastMaxKeys(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	r, path := reloaderWith(t, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stores [2]*Store
	for i := range stores {
		var err error
		if stores[i], err = New(ctx, Options{Backend: redisBackend(t, rs.Addr), Policy: r.Policy}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := stores[0].Create(ctx, "a", "basic", policy.KeyOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := stores[1].Create(ctx, "b", "basic", policy.KeyOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := stores[0].Update(ctx, "b", func(r *Record) error { r.Revoked = true; return nil }); err != nil {
		t.Fatal(err)
	}
	raw, _, err := stores[0].Create(ctx, "c", "basic", policy.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Three keys, one of them revoked, one made through the other store.
	for i, s := range stores {
		if _, _, err := s.Create(ctx, "d", "gold", policy.KeyOptions{}); !errors.Is(err, ErrFull) {
			t.Fatalf("store %d: a fourth key past max_keys 3: %v, want ErrFull", i, err)
		}
	}
	if k := lookup(stores[0], r.Policy(), raw); k == nil || k.Name() != "c" {
		t.Fatalf("a key made before the bound was reached no longer found: %v", k)
	}
	// A reload that raises the bound lets one more in.
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(string(src[:0])+"server:\n  admin: {max_keys: 4}\n"+testPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := stores[1].Create(ctx, "d", "gold", policy.KeyOptions{}); err != nil {
		t.Fatalf("after raising max_keys to 4: %v", err)
	}
	if _, _, err := stores[1].Create(ctx, "e", "gold", policy.KeyOptions{}); !errors.Is(err, ErrFull) {
		t.Fatalf("a fifth key past max_keys 4: %v, want ErrFull", err)
	}
}

// TestDeleteRevokedKey: a revoked key can be deleted, which frees its
// place under server.admin.max_keys, on the file and on Redis (the other
// instance sees it gone); a key that is not revoked cannot.
func TestDeleteRevokedKey(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	for _, backend := range []string{"file", "redis"} {
		t.Run(backend, func(t *testing.T) {
			r, _ := reloaderWith(t, 2)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var stores [2]*Store
			path := filepath.Join(t.TempDir(), "keys.json")
			for i := range stores {
				b := Backend(NewFileBackend(path))
				if backend == "redis" {
					b = redisBackend(t, rs.Addr)
				}
				var err error
				if stores[i], err = New(ctx, Options{Backend: b, Policy: r.Policy}); err != nil {
					t.Fatal(err)
				}
			}
			for _, name := range []string{"a", "b"} {
				if _, _, err := stores[0].Create(ctx, name, "basic", policy.KeyOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if err := stores[0].Delete(ctx, "a"); !errors.Is(err, ErrNotRevoked) {
				t.Fatalf("deleting a key that is not revoked: %v, want ErrNotRevoked", err)
			}
			if _, err := stores[0].Update(ctx, "a", func(r *Record) error { r.Revoked = true; return nil }); err != nil {
				t.Fatal(err)
			}
			if err := stores[0].Delete(ctx, "a"); err != nil {
				t.Fatalf("deleting a revoked key: %v", err)
			}
			if _, err := stores[0].Get("a"); !errors.Is(err, ErrNotFound) {
				t.Errorf("the deleted key: %v, want ErrNotFound", err)
			}
			// The other instance (behind on the backend) makes a key in
			// the freed place, and no longer has the deleted one.
			if _, _, err := stores[1].Create(ctx, "c", "basic", policy.KeyOptions{}); err != nil {
				t.Fatalf("a key in the place a deletion freed, from the other instance: %v", err)
			}
			if _, err := stores[1].Get("a"); !errors.Is(err, ErrNotFound) {
				t.Errorf("the deleted key on the other instance: %v, want ErrNotFound", err)
			}
			if err := stores[1].Delete(ctx, "a"); !errors.Is(err, ErrNotFound) {
				t.Errorf("deleting it again: %v, want ErrNotFound", err)
			}
		})
	}
}
