package keystore

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/redisconn"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/policy"
)

// TestRefreshOfAStalledRedisEnds: a look at a Redis that stopped answering
// (stopped with SIGSTOP: its connection stays open and silent) ends at
// the refresh timeout, though its caller's context has no deadline. A
// policy reload refreshes the keys with such a context while it holds the
// reloader's lock, and the poll with the store's own: without the bound
// both waited until Redis answered again, every later reload behind them.
// A key made meanwhile through another instance is found at the next look
// once Redis answers.
func TestRefreshOfAStalledRedisEnds(t *testing.T) {
	t.Parallel()
	if d := (&Store{}).refreshTimeout(); d != 5*time.Second {
		t.Fatalf("the default refresh timeout is %s, want 5s", d)
	}
	rs := redistest.Start(t)
	c, err := redisconn.Open("redis://" + rs.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := reloader(t)
	ctx := context.Background()
	s, err := New(ctx, Options{Backend: NewRedisBackend(c), Policy: r.Policy, RefreshTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	other, err := New(ctx, Options{Backend: NewRedisBackend(c), Policy: r.Policy})
	if err != nil {
		t.Fatal(err)
	}

	rs.Pause()
	resumed := false
	defer func() {
		if !resumed {
			rs.Resume()
		}
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Refresh(ctx) // no deadline of its own, as a reload's
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("a refresh of a stopped Redis still waits after 30 s")
	}
	rs.Resume()
	resumed = true
	raw, _, err := other.Create(ctx, "acme", "basic", policy.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Refresh(ctx)
	if lookup(s, r.Policy(), raw) == nil {
		t.Error("a key made through another instance is not found once Redis answers again")
	}
}
