package dashboard

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/redisconn"
	"github.com/floodgate/floodgate/internal/redistest"
)

// TestShareSyncOfAStalledRedisEnds: a sync with a Redis that stopped
// answering (stopped with SIGSTOP: its connection stays open and silent)
// returns an error at the sync timeout, though its caller's context has
// no deadline, as Run's has none. Without the bound it waited until Redis
// answered again (the client's own timeout is minutes), the other
// instances' data stale meanwhile and nothing logged. The next sync once
// Redis answers succeeds.
func TestShareSyncOfAStalledRedisEnds(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	c, err := redisconn.Open("redis://" + rs.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := NewShare(c, "i0", NewRecorder(time.Now().Unix()), func() Instance { return Instance{Version: "v1"} }, nil)
	ctx := context.Background()
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}

	rs.Pause()
	resumed := false
	defer func() {
		if !resumed {
			rs.Resume()
		}
	}()
	done := make(chan error, 1)
	go func() { done <- s.Sync(ctx) }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a sync with a stopped Redis succeeded")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a sync with a stopped Redis still waits after 30 s")
	}
	rs.Resume()
	resumed = true
	if err := s.Sync(ctx); err != nil {
		t.Errorf("the sync after Redis answers again: %v", err)
	}
}
