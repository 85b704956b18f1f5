package keystore

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"

	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/policy"
)

// heldBackend holds the first write that adds a record, once the store
// making it has counted its keys, until release is closed.
type heldBackend struct {
	Backend
	once          sync.Once
	held, release chan struct{}
}

func (b *heldBackend) hold() {
	first := false
	b.once.Do(func() { first = true })
	if first {
		close(b.held)
		<-b.release
	}
}

func (b *heldBackend) Add(ctx context.Context, r Record, most int) (string, string, error) {
	b.hold()
	return b.Backend.Add(ctx, r, most)
}

// TestMaxKeysHoldsAcrossInstances: two instances sharing the backend,
// each making a key when one place is left, keep server.admin.max_keys:
// the one that counted its keys before the other wrote is refused with
// ErrFull. Before, each counted the keys it had read and both wrote, one
// key past the bound (one more per instance racing).
func TestMaxKeysHoldsAcrossInstances(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	for _, kind := range []string{"file", "redis"} {
		t.Run(kind, func(t *testing.T) {
			r, _ := reloaderWith(t, 2)
			ctx := context.Background()
			file := NewFileBackend(filepath.Join(t.TempDir(), "keys.json"))
			backend := func() Backend {
				if kind == "redis" {
					return redisBackend(t, rs.Addr)
				}
				return file
			}
			held := &heldBackend{Backend: backend(), held: make(chan struct{}), release: make(chan struct{})}
			a, err := New(ctx, Options{Backend: held, Policy: r.Policy})
			if err != nil {
				t.Fatal(err)
			}
			b, err := New(ctx, Options{Backend: backend(), Policy: r.Policy})
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := b.Create(ctx, "first", "basic", policy.KeyOptions{}); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, _, err := a.Create(ctx, "from-a", "basic", policy.KeyOptions{})
				done <- err
			}()
			<-held.held // a counted one key of two
			if _, _, err := b.Create(ctx, "from-b", "basic", policy.KeyOptions{}); err != nil {
				t.Fatal(err)
			}
			close(held.release)
			errA := <-done
			b.Refresh(ctx)
			if n := len(b.List()); n > 2 || !errors.Is(errA, ErrFull) {
				t.Errorf("%d keys stored under max_keys 2; the create that lost the race: %v, want ErrFull", n, errA)
			}
		})
	}
}
