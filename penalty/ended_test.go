package penalty

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/config"
)

// endedRules are a rule whose short bans a flood of addresses earns, kept
// a day for their strikes, and a login rule banning users.
func endedRules(ban time.Duration) (flooded, login config.Ban) {
	flooded = config.Ban{Name: "flood", Key: config.BanKeyClientIP, After: 1, Within: time.Minute,
		Ban: ban, MaxBan: 24 * time.Hour, Growth: 2}
	login = config.Ban{Name: "login", Key: config.BanKeyUser, After: 1, Within: time.Minute,
		Ban: time.Hour, MaxBan: time.Hour, Growth: 1}
	return flooded, login
}

// TestFullBansMakeRoomFromEndedOnes: bans that have ended and are kept only
// for their strikes do not hold the box full. A flood of addresses earns
// as many short bans as the box holds; once they end, a user offending
// a login rule is banned all the same, on memory and on Redis (the box
// refused every ban for the day the flood's strikes are kept), while a
// box full of bans in force still refuses a new one.
func TestFullBansMakeRoomFromEndedOnes(t *testing.T) {
	const bound = 20
	t.Run("memory", func(t *testing.T) {
		var now atomic.Int64
		now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
		clock := func() time.Time { return time.Unix(0, now.Load()) }
		m := NewMemory(bound, clock)
		flooded, login := endedRules(time.Minute)
		testFullBansMakeRoom(t, m, &flooded, &login, func(d time.Duration) { now.Add(int64(d)) }, bound)
	})
	t.Run("redis", func(t *testing.T) {
		be, _ := redisBox(t, bound)
		flooded, login := endedRules(200 * time.Millisecond)
		testFullBansMakeRoom(t, be, &flooded, &login, func(d time.Duration) { time.Sleep(d) }, bound)
	})
}

func testFullBansMakeRoom(t *testing.T, be Backend, flooded, login *config.Ban, wait func(time.Duration), bound int) {
	ctx := context.Background()
	offend := func(r *config.Ban, key string) *Ban {
		t.Helper()
		ban, err := be.Offend(ctx, r, key)
		if err != nil {
			t.Fatal(err)
		}
		return ban
	}
	for i := range bound {
		if offend(flooded, fmt.Sprintf("ip:2001:db8:%x::", i)) == nil {
			t.Fatalf("address %d of %d not banned", i, bound)
		}
	}
	// Full of bans in force: a new one is refused.
	if ban := offend(login, "mallory"); ban != nil {
		t.Fatalf("a ban past the bound while every ban is in force: %+v", ban)
	}
	wait(flooded.Ban + flooded.Ban/2 + time.Second + 10*time.Millisecond)
	if ban := offend(login, "ana"); ban == nil {
		t.Fatal("a user offending a login rule is not banned: the box is held full by bans that have ended")
	}
	if ban := offend(login, "bob"); ban == nil {
		t.Fatal("a second user is not banned")
	}
	bans, _, err := be.Bans(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(bans) != 2 {
		t.Errorf("%d bans in force, want 2: %+v", len(bans), bans)
	}
}
