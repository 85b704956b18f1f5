package keystore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/policy"
)

// TestConcurrentChangesKeptFile: changes made at once through a store on
// a key file, or two sharing it (each with its reload loop running), are
// all kept: a revoked key stays revoked, every counted update counts,
// every rotated secret handed out works, every created key exists.
func TestConcurrentChangesKeptFile(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprintf("stores=%d", n), func(t *testing.T) {
			t.Parallel()
			b := NewFileBackend(filepath.Join(t.TempDir(), "keys.json"))
			concurrentChanges(t, n, func() Backend { return b })
		})
	}
}

// TestConcurrentChangesKeptRedis is TestConcurrentChangesKeptFile with
// stores that each have their own connection to one Redis, as instances
// sharing it do.
func TestConcurrentChangesKeptRedis(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	concurrentChanges(t, 2, func() Backend { return redisBackend(t, rs.Addr) })
}

// concurrentChanges makes the changes through n stores (1 or 2) on the
// backends backend returns.
func concurrentChanges(t *testing.T, n int, backend func() Backend) {
	r := reloader(t)
	ctx, cancel := context.WithCancel(context.Background())
	var running sync.WaitGroup
	t.Cleanup(func() { cancel(); running.Wait() })
	var stores [2]*Store
	for i := range n {
		s, err := New(ctx, Options{Backend: backend(), Policy: r.Policy, PollInterval: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		stores[i] = s
		running.Go(func() { s.Run(ctx) })
	}
	if n == 1 {
		stores[1] = stores[0]
	}
	const updates, rotations, creates = 15, 30, 10
	for round := range 4 {
		name, rot := fmt.Sprintf("rx%d", round), fmt.Sprintf("rot%d", round)
		raw, _, err := stores[0].Create(ctx, name, "gold", policy.KeyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rotRaw, _, err := stores[1].Create(ctx, rot, "gold", policy.KeyOptions{})
		if err != nil {
			t.Fatal(err)
		}

		var wg sync.WaitGroup
		start := make(chan struct{})
		var mu sync.Mutex // guards the results below
		counted, revoked := 0, false
		secrets := []string{rotRaw}
		// The secret each rotation found newest: a change lost to
		// another made on the same record shows as two rotations that
		// found the same one.
		found := map[string]int{}
		for i := range updates {
			wg.Go(func() {
				<-start
				_, err := stores[i%2].Update(ctx, name, func(r *Record) error {
					r.Quota, r.Generation = int64(i+1), r.Generation+1
					return nil
				})
				switch {
				case err == nil:
					mu.Lock()
					counted++
					mu.Unlock()
				case !errors.Is(err, ErrRevoked):
					t.Errorf("update %d: %v", i, err)
				}
			})
		}
		wg.Go(func() {
			<-start
			if _, err := stores[1].Update(ctx, name, func(r *Record) error { r.Revoked = true; return nil }); err != nil {
				t.Errorf("revoke: %v", err)
				return
			}
			mu.Lock()
			revoked = true
			mu.Unlock()
		})
		for i := range rotations {
			wg.Go(func() {
				<-start
				sec, rec, err := stores[i%2].Rotate(ctx, rot, time.Hour)
				if err != nil {
					t.Errorf("rotation %d: %v", i, err)
					return
				}
				mu.Lock()
				secrets = append(secrets, sec)
				if len(rec.Secrets) > 1 {
					found[rec.Secrets[1].SHA256]++
				}
				mu.Unlock()
			})
		}
		for i := range creates {
			wg.Go(func() {
				<-start
				if _, _, err := stores[i%2].Create(ctx, fmt.Sprintf("new%d-%d", round, i), "basic", policy.KeyOptions{}); err != nil {
					t.Errorf("create %d: %v", i, err)
				}
			})
		}
		close(start)
		wg.Wait()
		if !revoked {
			t.Fatal("the revocation failed")
		}

		// What the backend holds, as a new instance reads it, and what
		// each running store holds once caught up.
		fresh, err := New(ctx, Options{Backend: backend(), Policy: r.Policy})
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range []*Store{fresh, stores[0], stores[1]} {
			s.Refresh(ctx)
			got, err := s.Get(name)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Revoked || lookup(s, r.Policy(), raw) != nil {
				t.Errorf("round %d, store %d: the revoked key is back: %+v", round, i, got)
			}
			if got.Generation != int64(counted) {
				t.Errorf("round %d, store %d: generation %d after %d updates", round, i, got.Generation, counted)
			}
			got, err = s.Get(rot)
			if err != nil || len(got.Secrets) != min(1+rotations, MaxSecrets) {
				t.Errorf("round %d, store %d: %d secrets after %d rotations, %v", round, i, len(got.Secrets), rotations, err)
			}
			kept := map[string]bool{}
			for _, sec := range got.Secrets {
				kept[sec.SHA256] = true
			}
			for j, sec := range secrets {
				sum := sha256.Sum256([]byte(sec))
				if works := lookup(s, r.Policy(), sec) != nil; works != kept[hex.EncodeToString(sum[:])] {
					t.Errorf("round %d, store %d: secret %d of %d handed out works %v, kept %v", round, i, j, len(secrets), works, !works)
				}
			}
			for j := range creates {
				if _, err := s.Get(fmt.Sprintf("new%d-%d", round, j)); err != nil {
					t.Errorf("round %d, store %d: created key %d: %v", round, i, j, err)
				}
			}
		}
		if len(found) != rotations {
			t.Errorf("round %d: %d rotations found %d different newest secrets: changes were lost", round, rotations, len(found))
		}
		if t.Failed() {
			return
		}
	}
}
