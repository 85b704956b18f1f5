package keystore

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/policy"
)

// TestRedisRestartKeysSeen: an instance that did not look while a Redis
// restarted empty was made to count the keys' version up to the one it
// had read reloads the keys all the same. Before, the version was a bare
// count: the instance took the new keys for the ones it had, so it went
// on accepting a secret the store no longer held and refused the key made
// in its place, until the next change.
func TestRedisRestartKeysSeen(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	r := reloader(t)
	ctx := context.Background()
	a, err := New(ctx, Options{Backend: redisBackend(t, rs.Addr), Policy: r.Policy})
	if err != nil {
		t.Fatal(err)
	}
	bBackend := redisBackend(t, rs.Addr)
	b, err := New(ctx, Options{Backend: bBackend, Policy: r.Policy})
	if err != nil {
		t.Fatal(err)
	}
	old, _, err := a.Create(ctx, "acme", "basic", policy.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.Refresh(ctx)
	if lookup(b, r.Policy(), old) == nil {
		t.Fatal("the key made before the restart is not seen")
	}

	if err := rs.Restart(); err != nil {
		t.Fatal(err)
	}
	// The same count of changes as before, on the emptied Redis.
	var fresh string
	deadline := time.Now().Add(30 * time.Second)
	for {
		if fresh, _, err = a.Create(ctx, "acme", "basic", policy.KeyOptions{}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no key made within 30s of the restart: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // reconnecting
	}
	for { // every connection of the other instance's client answers again
		if _, _, err := bBackend.Load(ctx); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the other instance not reconnected within 30s of the restart: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A look may still meet a connection of the other instance's client
	// that is reconnecting (it logs and keeps what it has): look again
	// until one goes through.
	for {
		b.Refresh(ctx)
		if lookup(b, r.Policy(), fresh) != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the key made after the restart is refused on the instance that did not look, 30 s on")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if lookup(b, r.Policy(), old) != nil {
		t.Error("a secret the restarted Redis no longer holds still works on the instance that did not look")
	}
}
