package access

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/internal/redisconn"
	"github.com/floodgate/floodgate/internal/redistest"
)

// TestRedisRestartEntriesSeen: lists that did not look while their Redis
// restarted empty and took as many changes as before read the entries
// again all the same. Before, the version was a bare count: the lists
// took the new entries for the ones they had, so they went on refusing a
// network no list held any more and let through the one denied in its
// place, until the next change.
func TestRedisRestartEntriesSeen(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	open := func() *Redis {
		c, err := redisconn.Open("redis://" + rs.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return NewRedis(c)
	}
	ctx := context.Background()
	file := &config.Access{MaxEntries: 100}
	a := New(file, open(), time.Hour, nil)
	defer a.Close()
	b := New(file, open(), time.Hour, nil) // looks only when told to
	defer b.Close()
	before := []string{"198.51.100.0/24", "198.51.100.7/32", "2001:db8::/48"}
	after := []string{"203.0.113.0/24", "203.0.113.9/32", "2001:db8:1::/48"}
	for _, n := range before {
		if _, err := a.Add(ctx, Entry{List: Deny, Network: netip.MustParsePrefix(n)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.look(ctx); err != nil {
		t.Fatal(err)
	}
	if !b.List().Denied(netip.MustParseAddr("198.51.100.1")) {
		t.Fatal("an entry added before the restart is not in force")
	}

	if err := rs.Restart(); err != nil {
		t.Fatal(err)
	}
	// As many changes as before, on the emptied Redis.
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range after {
		for {
			_, err := a.Add(ctx, Entry{List: Deny, Network: netip.MustParsePrefix(n)})
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no entry added within 30s of the restart: %v", err)
			}
			time.Sleep(10 * time.Millisecond) // reconnecting
		}
	}
	// A look may meet a connection that is reconnecting: look until one
	// goes through.
	for {
		if err := b.look(ctx); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the other lists could not look within 30s of the restart: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !b.List().Denied(netip.MustParseAddr("203.0.113.1")) {
		t.Error("an entry added after the restart is not in force on the lists that did not look")
	}
	if b.List().Denied(netip.MustParseAddr("198.51.100.1")) {
		t.Error("an entry the restarted Redis no longer holds is still in force on the lists that did not look")
	}
}
