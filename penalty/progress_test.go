package penalty

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate/floodgate/config"
)

// testFloodUnderHighAfter: a key two offences into a rule that bans at
// the third, then a flood of new keys past the bound of the counters,
// each with more offences (three) under a rule that bans at the 100th:
// the key's counter, nearest its ban, is kept, and its next offence bans
// it. The counters go by their progress toward a ban, not by their raw
// count across rules of other afters.
func testFloodUnderHighAfter(t *testing.T, be Backend, bound int) {
	t.Helper()
	logins := config.Ban{Name: "logins", Key: config.BanKeyUser, After: 3, Within: time.Hour, Ban: time.Minute,
		MaxBan: time.Minute, Growth: 1}
	noise := config.Ban{Name: "noise", Key: config.BanKeyClientIP, After: 100, Within: time.Hour, Ban: time.Minute,
		MaxBan: time.Minute, Growth: 1}
	ctx := context.Background()
	offend := func(r *config.Ban, key string) *Ban {
		t.Helper()
		ban, err := be.Offend(ctx, r, key)
		if err != nil {
			t.Fatal(err)
		}
		return ban
	}
	offend(&logins, "alice")
	offend(&logins, "alice")
	for i := range 2 * bound {
		for range 3 {
			offend(&noise, fmt.Sprintf("ip:flood:%d", i))
		}
	}
	if ban := offend(&logins, "alice"); ban == nil {
		t.Error("a flood of 3 offences a key under after 100 dropped the counter of a key at 2 of after 3: its third offence banned nothing")
	}
}

// TestMemoryOffencesKeptByProgress: testFloodUnderHighAfter in memory.
func TestMemoryOffencesKeptByProgress(t *testing.T) {
	const bound = 100
	testFloodUnderHighAfter(t, NewMemory(bound, nil), bound)
}

// TestRedisOffencesKeptByProgress: testFloodUnderHighAfter on Redis.
func TestRedisOffencesKeptByProgress(t *testing.T) {
	const bound = 100
	be, _ := redisBox(t, bound)
	testFloodUnderHighAfter(t, be, bound)
}
