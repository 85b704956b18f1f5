package penalty

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/internal/redisconn"
	"github.com/floodgate/floodgate/internal/redistest"
)

var flood = config.Ban{Name: "flood", Key: config.BanKeyClientIP, After: 3, Within: time.Minute,
	Ban: time.Minute, MaxBan: 5 * time.Minute, Growth: 2}

// TestMemoryBansGrow: the After-th offence within the window bans the key,
// a repeat offender's ban doubles up to MaxBan, and the strikes are
// forgotten MaxBan after the last ban ended.
func TestMemoryBansGrow(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	box, err := New([]config.Ban{flood}, Options{Backend: NewMemory(0, clock), Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	ctx := context.Background()
	offend := func(n int) {
		for range n {
			box.Outcome(ctx, "10.0.0.1", "", "", true, 429)
		}
	}
	offend(2)
	if _, _, b := box.Banned("10.0.0.1", "", ""); b {
		t.Fatal("banned after 2 of 3")
	}
	box.Outcome(ctx, "10.0.0.1", "", "", false, 200) // not an offence
	offend(1)
	for _, want := range []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 5 * time.Minute} {
		rule, until, banned := box.Banned("10.0.0.1", "", "")
		if !banned || rule != "flood" || until.Sub(clock()) != want {
			t.Fatalf("banned %v by %q for %v, want %v", banned, rule, until.Sub(clock()), want)
		}
		if _, _, b := box.Banned("10.0.0.2", "", ""); b {
			t.Fatal("another address banned")
		}
		now.Add(int64(want)) // the ban ends
		if _, _, b := box.Banned("10.0.0.1", "", ""); b {
			t.Fatal("still banned at the end")
		}
		offend(3)
	}
	now.Add(int64(5*time.Minute + 5*time.Minute + time.Second)) // past the ban and MaxBan after it
	offend(3)
	if _, until, _ := box.Banned("10.0.0.1", "", ""); until.Sub(clock()) != time.Minute {
		t.Errorf("strikes not forgotten: %v", until.Sub(clock()))
	}
	if err := box.Lift(ctx, "flood", "10.0.0.1"); err != nil {
		t.Fatal(err)
	}
	if _, _, b := box.Banned("10.0.0.1", "", ""); b {
		t.Error("banned after the lift")
	}
	if err := box.Lift(ctx, "flood", "10.0.0.1"); !errors.Is(err, ErrNoBan) {
		t.Errorf("second lift: %v", err)
	}
}

// TestMemoryBounded: past its bound the memory backend counts no new keys.
func TestMemoryBounded(t *testing.T) {
	m := NewMemory(10, nil)
	r := flood
	r.After = 1
	for i := range 100 {
		if _, err := m.Offend(context.Background(), &r, string(rune('a'+i))); err != nil {
			t.Fatal(err)
		}
	}
	if len(m.bans) > 10 || len(m.offences) > 10 {
		t.Errorf("%d bans, %d counters", len(m.bans), len(m.offences))
	}
}

// TestRedisBanSharedAndLifted: two boxes on one real Redis count offences
// together; the ban one makes holds on the other within its poll, and a
// lift on either ends it on both.
func TestRedisBanSharedAndLifted(t *testing.T) {
	srv := redistest.Start(t)
	c1, err := redisconn.Open("redis://" + srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c2, err := redisconn.Open("redis://" + srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	r := flood
	r.Key = config.BanKeyAPIKey
	a, err := New([]config.Ban{r}, Options{Backend: NewRedis(c1, 0), Poll: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := New([]config.Ban{r}, Options{Backend: NewRedis(c2, 0), Poll: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	a.Outcome(ctx, "1.2.3.4", "acme", "", true, 429)
	b.Outcome(ctx, "1.2.3.5", "acme", "", true, 429)
	if _, _, banned := a.Banned("", "acme", ""); banned {
		t.Fatal("banned after 2 of 3")
	}
	b.Outcome(ctx, "1.2.3.6", "acme", "", true, 429)
	if _, _, banned := b.Banned("", "acme", ""); !banned {
		t.Fatal("the instance that banned does not see it")
	}
	waitFor(t, func() bool { _, _, banned := a.Banned("", "acme", ""); return banned })
	list, err := a.List(ctx)
	if err != nil || len(list) != 1 || list[0].Key != "acme" || list[0].Strikes != 1 || time.Until(list[0].Until) > time.Minute {
		t.Fatalf("list %+v %v", list, err)
	}
	if err := a.Lift(ctx, "flood", "acme"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, _, banned := b.Banned("", "acme", ""); return !banned })
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for range 250 {
		if ok() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("not within 5s")
}

// TestBanFlood: a flood of keys, each banned at once, from more addresses
// than a view part holds. Every one of them is refused afterwards, a
// further ban copies a part of the view and not all of it (the view once
// copied the whole of it for every ban: quadratic in the number of
// keys), the memory backend sweeps its full bans at most once a second
// rather than for every new key's ban, and the log gets one ban line a
// second with the count of the others.
func TestBanFlood(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	var logged bytes.Buffer
	var logMu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logged}, nil))
	const keys = 20000
	mem := NewMemory(keys, clock)
	r := flood
	r.After = 1
	box, err := New([]config.Ban{r}, Options{Backend: mem, Now: clock, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	ctx := context.Background()
	for i := range keys {
		box.Outcome(ctx, fmt.Sprintf("ip:10.%d.%d", i>>8, i&255), "", "", true, 429)
	}
	for i := range keys {
		if _, _, banned := box.Banned(fmt.Sprintf("ip:10.%d.%d", i>>8, i&255), "", ""); !banned {
			t.Fatalf("key %d of %d not banned", i, keys)
		}
	}
	if _, _, banned := box.Banned("ip:192.0.2.1", "", ""); banned {
		t.Fatal("a key that never offended is banned")
	}

	// The bans are full: new keys' bans are refused, and the bans swept
	// once in the second, not once a key.
	sweeps := mem.sweeps
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range 1000 {
		box.Outcome(ctx, fmt.Sprintf("ip:172.16.%d", i), "", "", true, 429)
	}
	runtime.ReadMemStats(&after)
	if n := mem.sweeps - sweeps; n > 1 {
		t.Errorf("the full bans were swept %d times in one second, want at most 1", n)
	}
	if _, _, banned := box.Banned("ip:172.16.1", "", ""); banned {
		t.Error("a ban past the bound was made")
	}
	if perKey := (after.TotalAlloc - before.TotalAlloc) / 1000; perKey > 4<<10 {
		t.Errorf("an offence past the bound allocated %d bytes", perKey)
	}

	// Once the first bans and their strikes are forgotten, a sweep (a
	// second after the last) makes room, and a ban then copies one part of
	// the view.
	now.Add(int64(r.Ban + r.MaxBan + time.Second))
	runtime.ReadMemStats(&before)
	box.Outcome(ctx, "ip:198.51.100.7", "", "", true, 429)
	runtime.ReadMemStats(&after)
	if _, _, banned := box.Banned("ip:198.51.100.7", "", ""); !banned {
		t.Fatal("no ban made once the old ones were forgotten")
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
		t.Errorf("one ban among %d allocated %d bytes: more than its part of the view", keys, n)
	}

	logMu.Lock()
	lines := strings.Count(logged.String(), "penalty: banned")
	text := logged.String()
	logMu.Unlock()
	if lines != 2 || !strings.Contains(text, fmt.Sprintf("not_logged_since=%d", keys-1)) {
		t.Errorf("%d ban lines for %d bans in two instants, want 2, the second saying %d held back:\n%s",
			lines, keys+1, keys-1, text)
	}
}

// lockedWriter serialises writes to a buffer.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
