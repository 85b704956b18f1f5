package keystore

import (
	"context"
	"testing"

	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/internal/redisconn"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/policy"
)

// TestRedisFailoverThatLostChanges: a failover to a replica that missed
// the last changes keeps the epoch and takes the count back, and other
// changes then make the count again, or past it. An instance that read
// the lost changes and did not look meanwhile reads every key again, so
// that it neither keeps a key the store lost nor misses the keys made in
// its place. Before, with the count alone, it took the new changes for
// the ones it had read (the same count), or read only those past its
// count.
func TestRedisFailoverThatLostChanges(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	r := reloader(t)
	ctx := context.Background()
	raw, err := redisconn.Open("redis://" + rs.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	keys := []string{redisHash, redisVersion, redisEpoch, redisChanges, redisTag}
	// snapshot returns what the replica holds: each key's DUMP ("" none).
	snapshot := func() map[string]string {
		m := map[string]string{}
		for _, k := range keys {
			v, err := raw.Do(ctx, raw.B().Dump().Key(k).Build()).ToString()
			if err != nil && !rueidis.IsRedisNil(err) {
				t.Fatal(err)
			}
			m[k] = v
		}
		return m
	}
	// failover puts the replica's data in place of the primary's.
	failover := func(m map[string]string) {
		for _, k := range keys {
			if err := raw.Do(ctx, raw.B().Del().Key(k).Build()).Error(); err != nil {
				t.Fatal(err)
			}
			if m[k] != "" {
				if err := raw.Do(ctx, raw.B().Restore().Key(k).Ttl(0).SerializedValue(m[k]).Replace().Build()).Error(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	a, err := New(ctx, Options{Backend: redisBackend(t, rs.Addr), Policy: r.Policy})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(ctx, Options{Backend: redisBackend(t, rs.Addr), Policy: r.Policy})
	if err != nil {
		t.Fatal(err)
	}
	create := func(name string) string {
		t.Helper()
		secret, _, err := a.Create(ctx, name, "basic", policy.KeyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return secret
	}
	create("first")

	for _, c := range []struct {
		name  string
		after int // changes made after the failover
	}{{"same-count", 1}, {"count-past", 2}} {
		replica := snapshot()
		lost := create("lost-" + c.name)
		b.Refresh(ctx)
		if lookup(b, r.Policy(), lost) == nil {
			t.Fatalf("%s: the key made before the failover is not seen", c.name)
		}
		failover(replica)
		var made []string
		for i := range c.after {
			made = append(made, create("made-"+c.name+"-"+string(rune('a'+i))))
		}
		b.Refresh(ctx)
		if lookup(b, r.Policy(), lost) != nil {
			t.Errorf("%s: a key the store lost in the failover still works on the instance that read it", c.name)
		}
		for i, s := range made {
			if lookup(b, r.Policy(), s) == nil {
				t.Errorf("%s: key %d of %d made after the failover is refused on the instance that did not look", c.name, i+1, len(made))
			}
		}
		sameRecords(t, c.name, a, b)
	}
}
