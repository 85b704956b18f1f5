package keystore

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/redisconn"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/policy"
)

// TestLoadLater: a store made while its Redis does not answer (stopped
// with SIGSTOP, so that the keys made before are still there) starts
// without them with LoadLater, instead of failing, and finds them once
// Redis answers; without LoadLater it fails, as a keys file that does not
// load must.
func TestLoadLater(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	c, err := redisconn.Open("redis://" + rs.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := reloader(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, err := New(ctx, Options{Backend: NewRedisBackend(c), Policy: r.Policy})
	if err != nil {
		t.Fatal(err)
	}
	raw, _, err := first.Create(ctx, "acme", "basic", policy.KeyOptions{})
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
	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancelShort()
	if _, err := New(short, Options{Backend: NewRedisBackend(c), Policy: r.Policy}); err == nil {
		t.Error("a store made while Redis does not answer started without LoadLater")
	}
	short2, cancelShort2 := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancelShort2()
	s, err := New(short2, Options{Backend: NewRedisBackend(c), Policy: r.Policy, LoadLater: true, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatalf("New with LoadLater while Redis does not answer: %v", err)
	}
	if k := lookup(s, r.Policy(), raw); k != nil {
		t.Fatalf("a key found before it was read: %+v", k)
	}
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	rs.Resume()
	resumed = true
	deadline := time.Now().Add(30 * time.Second)
	for lookup(s, r.Policy(), raw) == nil {
		if time.Now().After(deadline) {
			t.Fatal("30 s after Redis answered again, the key made before is still not found")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
