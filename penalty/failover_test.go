package penalty

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/internal/redistest"
)

// TestRedisFailoverThatLostBans: a failover to a replica that missed the
// last bans keeps the epoch and takes the version's count back, and other
// bans then make the count again, or past it. An instance that read the
// lost bans and did not look meanwhile reads every ban again, so that it
// neither keeps a ban the store lost nor misses the bans made in its
// place. Before, with the count alone, it took the new bans for the ones
// it had read (the same count), or read only those past its count.
func TestRedisFailoverThatLostBans(t *testing.T) {
	srv := redistest.Start(t)
	open := clientsOf(t, srv)
	raw := open()
	ctx := context.Background()
	r := flood
	r.After = 1
	a := NewRedis(open(), 0)
	b, err := New([]config.Ban{r}, Options{Backend: NewRedis(open(), 0), Poll: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	keys := []string{redisBans, redisVersion, redisChanges, redisTrimmed, redisForget, redisEpoch, redisTag, redisTags}
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
	ban := func(key string) {
		t.Helper()
		if got, err := a.Offend(ctx, &r, key); err != nil || got == nil {
			t.Fatalf("%s not banned: %v", key, err)
		}
	}
	look := func() {
		t.Helper()
		if err := b.look(ctx); err != nil {
			t.Fatal(err)
		}
	}
	banned := func(key string) bool { _, _, ok := b.Banned(key, "", ""); return ok }
	ban("ip:10.0.0.1")
	look()

	for i, c := range []struct {
		name  string
		after int // bans made after the failover
	}{{"same-count", 1}, {"count-past", 2}} {
		replica := snapshot()
		lost := fmt.Sprintf("ip:10.1.%d.1", i)
		ban(lost)
		look()
		if !banned(lost) {
			t.Fatalf("%s: the ban made before the failover is not seen", c.name)
		}
		failover(replica)
		var made []string
		for j := range c.after {
			made = append(made, fmt.Sprintf("ip:10.2.%d.%d", i, j))
			ban(made[j])
		}
		look()
		if banned(lost) {
			t.Errorf("%s: a ban the store lost in the failover still holds on the instance that read it", c.name)
		}
		for j, k := range made {
			if !banned(k) {
				t.Errorf("%s: ban %d of %d made after the failover is not seen by the instance that did not look", c.name, j+1, len(made))
			}
		}
		if !banned("ip:10.0.0.1") {
			t.Errorf("%s: the ban made before the replica's copy is lost", c.name)
		}
	}
}
