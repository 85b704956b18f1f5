package keystore

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/redisconn"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/policy"
)

// lockedBuffer is a log sink safe for the store's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRevocationSeenWithoutChangeNotices: an instance that never gets a
// change notice (its Redis user may use no channel, as a user made on
// Redis 7 without "&*" may not) still sees a new key and a revocation
// made through another instance within half a second and a margin for a
// loaded machine, by its poll alone; and it keeps polling after each
// failed subscription.
func TestRevocationSeenWithoutChangeNotices(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	admin, err := redisconn.Open("redis://" + rs.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := admin.Do(ctx, admin.B().Arbitrary("ACL", "SETUSER", "nochan").Args("on", ">pw", "~*", "+@all", "resetchannels").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	r := reloader(t)
	a, err := New(ctx, Options{Backend: redisBackend(t, rs.Addr), Policy: r.Policy})
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	c, err := redisconn.Open("redis://nochan:pw@" + rs.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	b, err := New(ctx, Options{Backend: NewRedisBackend(c), Policy: r.Policy, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); b.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// seen waits, polling, until cond holds, and returns how long it took.
	seen := func(what string, cond func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		for !cond() {
			if time.Since(start) > 10*time.Second {
				t.Fatalf("%s not seen within 10s; log:\n%s", what, logs.String())
			}
			time.Sleep(5 * time.Millisecond)
		}
		return time.Since(start)
	}
	// Wait for the first failed subscription, so that the changes below
	// are made while the instance has no notices.
	seen("a failed subscription", func() bool { return strings.Contains(logs.String(), "change notices lost") })

	raw, _, err := a.Create(ctx, "acme", "basic", policy.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const bound = 500*time.Millisecond + time.Second // the poll, and room for a loaded machine
	if d := seen("the new key", func() bool { return lookup(b, r.Policy(), raw) != nil }); d > bound {
		t.Errorf("the new key was seen after %v, want at most %v", d, bound)
	}
	// Another subscription fails meanwhile; the poll goes on.
	seen("a second failed subscription", func() bool { return strings.Count(logs.String(), "change notices lost") >= 2 })
	if _, err := a.Update(ctx, "acme", func(r *Record) error { r.Revoked = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if d := seen("the revocation", func() bool { return lookup(b, r.Policy(), raw) == nil }); d > bound {
		t.Errorf("the revocation was seen after %v, want at most %v", d, bound)
	}
}
