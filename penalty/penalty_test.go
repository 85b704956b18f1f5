package penalty

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/internal/redisconn"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/policy"
)

var flood = config.Ban{Name: "flood", Key: config.BanKeyClientIP, After: 3, Within: time.Minute,
	Ban: time.Minute, MaxBan: 5 * time.Minute, Growth: 2}

// TestOffenceOnlyOnOwnLimits: a refusal is an offence of a rule without
// count_on only when the key of the limit that refused the request holds
// the identity the rule bans; a refusal by a limit every client shares
// (global, per route, per plan) or by a failure policy offends no rule,
// not even one with count_on that counts its status (429), and a rule
// with count_on counts the statuses of answers that are no refusal.
func TestOffenceOnlyOnOwnLimits(t *testing.T) {
	rule := func(name, key string, countOn ...int) config.Ban {
		return config.Ban{Name: name, Key: key, After: 1, Within: time.Minute, Ban: time.Minute, MaxBan: time.Minute,
			Growth: 2, CountOn: countOn}
	}
	box, err := New([]config.Ban{
		rule("ip", config.BanKeyClientIP), rule("key", config.BanKeyAPIKey), rule("user", config.BanKeyUser),
		rule("logins", config.BanKeyUser, 401), rule("noisy", config.BanKeyClientIP, 429),
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	ctx := context.Background()
	for i, c := range []struct {
		refused   bool
		refusedBy policy.Identities
		status    int
		want      []string // the rules that ban: ip, key, user, logins, noisy
	}{
		{true, 0, 429, nil},  // a shared limit (global, per route, per plan), or a failure policy
		{true, 0, 503, nil},  // a shared limit with a refusal of its own
		{true, 0, 401, nil},  // a shared limit refusing with 401
		{false, 0, 200, nil}, // not refused
		{false, 0, 401, []string{"logins"}},
		{false, 0, 429, []string{"noisy"}}, // the upstream's 429
		{true, policy.IdentityClientIP, 429, []string{"ip", "noisy"}},
		{true, policy.IdentityClientIP, 503, []string{"ip"}},
		{true, policy.IdentityAPIKey, 429, []string{"key"}},
		{true, policy.IdentityUser, 429, []string{"user"}},
		{true, policy.IdentityUser, 401, []string{"user", "logins"}},
		{true, policy.IdentityClientIP, 401, []string{"ip"}},
		{true, policy.IdentityClientIP | policy.IdentityAPIKey, 429, []string{"ip", "key", "noisy"}}, // a composite key
	} {
		ip, key, user := fmt.Sprintf("ip:10.0.0.%d", i), fmt.Sprintf("key%d", i), fmt.Sprintf("user%d", i)
		box.Outcome(ctx, ip, key, user, c.refused, c.refusedBy, c.status)
		bans, err := box.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, b := range bans {
			if b.Key == ip || b.Key == key || b.Key == user {
				got = append(got, b.Rule)
			}
		}
		slices.Sort(got)
		want := slices.Clone(c.want)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%d: refused by %b, status %d: banned by %q, want %q", i, c.refusedBy, c.status, got, want)
		}
	}
}

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
			box.Outcome(ctx, "10.0.0.1", "", "", true, policy.IdentityClientIP, 429)
		}
	}
	offend(2)
	if _, _, b := box.Banned("10.0.0.1", "", ""); b {
		t.Fatal("banned after 2 of 3")
	}
	box.Outcome(ctx, "10.0.0.1", "", "", false, 0, 200) // not an offence
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
	a.Outcome(ctx, "1.2.3.4", "acme", "", true, policy.IdentityAPIKey, 429)
	b.Outcome(ctx, "1.2.3.5", "acme", "", true, policy.IdentityAPIKey, 429)
	if _, _, banned := a.Banned("", "acme", ""); banned {
		t.Fatal("banned after 2 of 3")
	}
	b.Outcome(ctx, "1.2.3.6", "acme", "", true, policy.IdentityAPIKey, 429)
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

// clientsOf returns a function that opens a client of srv, closed when
// the test ends: one for each penalty box that shares it.
func clientsOf(t *testing.T, srv *redistest.Server) func() rueidis.Client {
	return func() rueidis.Client {
		c, err := redisconn.Open("redis://" + srv.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	if !within(5*time.Second, ok) {
		t.Fatal("not within 5s")
	}
}

// within reports whether ok holds within d, looking every 20 ms.
func within(d time.Duration, ok func() bool) bool {
	for end := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		if ok() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
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
		box.Outcome(ctx, fmt.Sprintf("ip:10.%d.%d", i>>8, i&255), "", "", true, policy.IdentityClientIP, 429)
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
		box.Outcome(ctx, fmt.Sprintf("ip:172.16.%d", i), "", "", true, policy.IdentityClientIP, 429)
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
	box.Outcome(ctx, "ip:198.51.100.7", "", "", true, policy.IdentityClientIP, 429)
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

// countingRedis counts the times every ban is read.
type countingRedis struct {
	*Redis
	full atomic.Int64
}

func (c *countingRedis) Bans(ctx context.Context) ([]Ban, string, error) {
	c.full.Add(1)
	return c.Redis.Bans(ctx)
}

func (c *countingRedis) ReadAll(ctx context.Context, since string) ([]Ban, []Ban, string, error) {
	c.full.Add(1)
	return c.Redis.ReadAll(ctx, since)
}

// TestRedisBansReadIncrementally: an instance polling a Redis that a
// flood of keys fills with bans reads what changed since its version, not
// every ban, and reads every ban again only when the change log no longer
// reaches back that far; the log stays bounded, and each new ban drops
// bans whose strikes are forgotten.
func TestRedisBansReadIncrementally(t *testing.T) {
	srv := redistest.Start(t)
	open := clientsOf(t, srv)
	c1, c2 := open(), open()
	r := flood
	r.After = 1
	a, err := New([]config.Ban{r}, Options{Backend: NewRedis(c1, 0), Poll: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	be := &countingRedis{Redis: NewRedis(c2, 0)}
	b, err := New([]config.Ban{r}, Options{Backend: be, Poll: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	const keys = 300
	for i := range keys {
		a.Outcome(ctx, fmt.Sprintf("ip:10.0.%d", i), "", "", true, policy.IdentityClientIP, 429)
	}
	waitFor(t, func() bool {
		for i := range keys {
			if _, _, banned := b.Banned(fmt.Sprintf("ip:10.0.%d", i), "", ""); !banned {
				return false
			}
		}
		return true
	})
	if err := a.Lift(ctx, "flood", "ip:10.0.7"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, _, banned := b.Banned("ip:10.0.7", "", ""); return !banned })
	if n := be.full.Load(); n != 1 {
		t.Errorf("every ban read %d times, want once (at the start)", n)
	}

	// A ban made as an instance of an earlier version makes it (the ban and
	// a new version, no change logged), as during a rolling upgrade: the
	// reader sees it all the same.
	fullBefore := be.full.Load()
	if err := c1.Do(ctx, c1.B().Hset().Key(redisBans).FieldValue().
		FieldValue(field("flood", "ip:10.2.2"), fmt.Sprintf("%d 1 %d", time.Now().Add(time.Minute).UnixMilli(), time.Now().Add(2*time.Minute).UnixMilli())).
		Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := c1.Do(ctx, c1.B().Incr().Key(redisVersion).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, _, banned := b.Banned("ip:10.2.2", "", ""); return banned })
	if be.full.Load() == fullBefore {
		t.Error("a change made without the log was seen without reading every ban")
	}

	// The log trimmed past the instance's version: it reads every ban.
	if err := c1.Do(ctx, c1.B().Set().Key(redisTrimmed).Value("1000000").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	a.Outcome(ctx, "ip:10.1.1", "", "", true, policy.IdentityClientIP, 429)
	waitFor(t, func() bool { _, _, banned := b.Banned("ip:10.1.1", "", ""); return banned })
	if n := be.full.Load(); n < 3 {
		t.Errorf("every ban read %d times after the log was trimmed past the version, want again", n)
	}
	if _, _, banned := b.Banned("ip:10.0.8", "", ""); !banned {
		t.Error("a ban lost in the full read")
	}

	// More changes than the log keeps: it keeps changeLog of them.
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < changeLog+100; i += 8 {
				if _, err := a.be.Offend(ctx, &r, fmt.Sprintf("ip:172.%d", i)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n, err := c1.Do(ctx, c1.B().Zcard().Key(redisChanges).Build()).AsInt64(); err != nil || n > changeLog {
		t.Errorf("the change log holds %d fields (%v), more than %d", n, err, changeLog)
	}
	if n, err := c1.Do(ctx, c1.B().Zcard().Key(redisTags).Build()).AsInt64(); err != nil || n > changeLog+1 {
		t.Errorf("the tags of the changes hold %d counts (%v), more than %d", n, err, changeLog+1)
	}
	waitFor(t, func() bool { _, _, banned := b.Banned(fmt.Sprintf("ip:172.%d", changeLog+99), "", ""); return banned })

	// Bans whose strikes are forgotten go as new bans are made.
	brief := r
	brief.Name, brief.Ban, brief.MaxBan = "brief", time.Millisecond, time.Millisecond
	for i := range 50 {
		if _, err := a.be.Offend(ctx, &brief, fmt.Sprintf("k%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond)
	if _, err := a.be.Offend(ctx, &brief, "k-last"); err != nil {
		t.Fatal(err)
	}
	fields := make([]string, 50)
	for i := range fields {
		fields[i] = field("brief", fmt.Sprintf("k%d", i))
	}
	left, err := c1.Do(ctx, c1.B().Hmget().Key(redisBans).Field(fields...).Build()).ToArray()
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range left {
		if !v.IsNil() {
			t.Errorf("%s, forgotten, is still kept after a new ban", fields[i])
		}
	}
	if n, _ := c1.Do(ctx, c1.B().Zscore().Key(redisForget).Member(field("brief", "k3")).Build()).AsFloat64(); n != 0 {
		t.Errorf("a forgotten ban is still in the forget set (%v)", n)
	}
}

// TestRedisClusterBans: on a Redis Cluster of three primaries the box's
// keys share one slot, so its scripts run there: a ban made through one
// client holds for a box on another, is read incrementally and lifted.
func TestRedisClusterBans(t *testing.T) {
	cl := redistest.StartCluster(t)
	url := "redis+cluster://" + strings.Join(cl.Addrs(), ",")
	open := func() rueidis.Client {
		c, err := redisconn.Open(url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	r := flood
	r.After = 2
	a, err := New([]config.Ban{r}, Options{Backend: NewRedis(open(), 0), Poll: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	be := &countingRedis{Redis: NewRedis(open(), 0)}
	b, err := New([]config.Ban{r}, Options{Backend: be, Poll: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	for i := range 40 {
		a.Outcome(ctx, fmt.Sprintf("ip:10.9.%d", i), "", "", true, policy.IdentityClientIP, 429)
		a.Outcome(ctx, fmt.Sprintf("ip:10.9.%d", i), "", "", true, policy.IdentityClientIP, 429)
	}
	waitFor(t, func() bool { _, _, banned := b.Banned("ip:10.9.39", "", ""); return banned })
	if err := a.Lift(ctx, "flood", "ip:10.9.39"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, _, banned := b.Banned("ip:10.9.39", "", ""); return !banned })
	if _, _, banned := b.Banned("ip:10.9.0", "", ""); !banned {
		t.Error("a ban made on the cluster is not held")
	}
	if n := be.full.Load(); n != 1 {
		t.Errorf("every ban read %d times, want once", n)
	}
}

// TestMemoryOffenceFlood: a steady flood of new offending keys past the
// bound of the counters (one key's window ending as each new one comes)
// does not make every offence sweep all the counters under the backend's
// lock, and a burst of new keys does not reset the counter of a key one
// offence from its ban.
func TestMemoryOffenceFlood(t *testing.T) {
	var now atomic.Int64
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now.Store(start.UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	const bound = 1000
	m := NewMemory(bound, clock)
	r := flood
	r.After, r.Within = 3, bound*time.Second
	ctx := context.Background()
	offend := func(key string) *Ban {
		t.Helper()
		ban, err := m.Offend(ctx, &r, key)
		if err != nil {
			t.Fatal(err)
		}
		return ban
	}
	// One new key a second: once the counters are full, the window of
	// the oldest ends as each new key comes.
	const keys = 3 * bound
	for i := range keys {
		now.Store(start.Add(time.Duration(i) * time.Second).UnixNano())
		offend(fmt.Sprintf("ip:%d", i))
	}
	if len(m.offences) > bound {
		t.Fatalf("%d counters, more than %d", len(m.offences), bound)
	}
	if n := m.offenceSweeps; n > (keys-bound)/(bound/8)+2 {
		t.Errorf("%d new keys past the bound swept the counters %d times: once per key, not once per an eighth of the bound", keys-bound, n)
	}

	// A key one offence from its ban, then a burst of new keys in one
	// instant, more than the bound: the key's counter is kept.
	offend("ip:attacker")
	offend("ip:attacker")
	for i := range 2 * bound {
		offend(fmt.Sprintf("ip:burst:%d", i))
	}
	if len(m.offences) > bound {
		t.Fatalf("%d counters, more than %d", len(m.offences), bound)
	}
	if ban := offend("ip:attacker"); ban == nil {
		t.Error("a burst of new keys reset the counter of a key one offence from its ban")
	}
}

// TestRedisOffencesBounded: a flood of distinct offending keys (unknown
// API keys, addresses of a large network) keeps at most the box's bound
// of offence counters in Redis, however long their window, and offences
// are still counted to a ban afterwards.
func TestRedisOffencesBounded(t *testing.T) {
	const bound = 100
	be, r := redisBox(t, bound)
	ctx := context.Background()
	for i := range 10 * bound {
		if _, err := be.Offend(ctx, &r, fmt.Sprintf("?%032x", i)); err != nil {
			t.Fatal(err)
		}
	}
	counters := func() int {
		t.Helper()
		n, cursor := 0, uint64(0)
		for {
			e, err := be.c.Do(ctx, be.c.B().Scan().Cursor(cursor).Match(redisOffences+"*").Count(1000).Build()).AsScanEntry()
			if err != nil {
				t.Fatal(err)
			}
			n += len(e.Elements)
			if cursor = e.Cursor; cursor == 0 {
				return n
			}
		}
	}
	if n := counters(); n > bound {
		t.Errorf("%d offence counters in Redis after %d keys offended, more than the bound %d", n, 10*bound, bound)
	}
	for i := range 3 {
		ban, err := be.Offend(ctx, &r, "acme")
		if err != nil {
			t.Fatal(err)
		}
		if (ban != nil) != (i == 2) {
			t.Fatalf("offence %d of 3: ban %+v", i+1, ban)
		}
	}
	if n := counters(); n > bound {
		t.Errorf("%d offence counters in Redis, more than the bound %d", n, bound)
	}
}

// TestRedisOffenceFloodKeepsNearBan: on Redis as in memory
// (TestMemoryOffenceFlood), a burst of new offending keys past the bound
// of the counters (addresses of a large network, made-up users) does not
// reset the counter of a key one offence from its ban: the counters
// holding the fewest offences go first, not the oldest.
func TestRedisOffenceFloodKeepsNearBan(t *testing.T) {
	const bound = 100
	be, r := redisBox(t, bound)
	ctx := context.Background()
	offend := func(key string) *Ban {
		t.Helper()
		ban, err := be.Offend(ctx, &r, key)
		if err != nil {
			t.Fatal(err)
		}
		return ban
	}
	offend("ip:attacker")
	offend("ip:attacker")
	for i := range 2 * bound {
		offend(fmt.Sprintf("ip:burst:%d", i))
	}
	if ban := offend("ip:attacker"); ban == nil {
		t.Error("a burst of new keys reset the counter of a key one offence from its ban")
	}
}

// TestRedisRestartBansSeen: a Redis restarted empty (no persistence, or a
// failover to an empty server) starts the bans' version again; an
// instance that did not look while it was low, and finds it past the
// version it had, reads every ban again rather than the changes above
// its old version, so it misses none of the bans made since the restart.
func TestRedisRestartBansSeen(t *testing.T) {
	srv := redistest.Start(t)
	open := clientsOf(t, srv)
	r := flood
	r.After = 1
	a, err := New([]config.Ban{r}, Options{Backend: NewRedis(open(), 0), Poll: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := New([]config.Ban{r}, Options{Backend: NewRedis(open(), 0), Poll: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	for i := range 5 {
		if _, err := a.be.Offend(ctx, &r, fmt.Sprintf("ip:10.0.0.%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, banned := b.Banned("ip:10.0.0.4", "", ""); !banned {
		t.Fatal("a ban made before the restart is not seen")
	}

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	const keys = 8 // more than the bans before the restart
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; i < keys; {
		_, err := a.be.Offend(ctx, &r, fmt.Sprintf("ip:192.0.2.%d", i))
		switch {
		case err == nil:
			i++
		case time.Now().After(deadline):
			t.Fatalf("no offence counted within 30s of the restart: %v", err)
		default:
			time.Sleep(10 * time.Millisecond) // reconnecting
		}
	}
	for {
		err := b.refresh(ctx)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bans not read within 30s of the restart: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := range keys {
		if _, _, banned := b.Banned(fmt.Sprintf("ip:192.0.2.%d", i), "", ""); !banned {
			t.Errorf("ip:192.0.2.%d, banned after the restart, is not banned on an instance that read the bans since", i)
		}
	}
}

// afterRead is a client that runs then after the first read of every ban
// (HGETALL of the bans) returns, before its caller goes on: a ban made by
// another instance at that moment.
type afterRead struct {
	rueidis.Client
	then func()
	once sync.Once
}

func (a *afterRead) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	read := false
	for _, c := range multi {
		cmd := c.Commands()
		read = read || len(cmd) == 2 && cmd[0] == "HGETALL" && cmd[1] == redisBans
	}
	res := a.Client.DoMulti(ctx, multi...)
	if read {
		a.once.Do(a.then)
	}
	return res
}

// TestRedisFullReadKeepsNewBan: a full read of the bans drops the entries
// whose strikes are forgotten, but not a ban another instance made of
// the same key just after the read: the key stays banned.
func TestRedisFullReadKeepsNewBan(t *testing.T) {
	srv := redistest.Start(t)
	open := clientsOf(t, srv)
	writer := NewRedis(open(), 0)
	ctx := context.Background()
	brief := flood
	brief.After, brief.Ban, brief.MaxBan = 1, time.Millisecond, time.Millisecond
	first, err := writer.Offend(ctx, &brief, "ip:10.0.0.1")
	if err != nil || first == nil {
		t.Fatalf("first ban %+v: %v", first, err)
	}
	forgotten := first.Until.Add(brief.MaxBan + time.Millisecond)
	for deadline := time.Now().Add(30 * time.Second); !time.Now().After(forgotten); {
		if time.Now().After(deadline) {
			t.Fatal("the clock did not pass the first ban's forget time")
		}
		time.Sleep(time.Millisecond)
	}

	// The key offends again, for a ban of a minute, just after a full
	// read found its old entry forgotten.
	long := brief
	long.Ban, long.MaxBan = time.Minute, time.Minute
	var again *Ban
	reader := NewRedis(&afterRead{Client: open(), then: func() {
		if again, err = writer.Offend(ctx, &long, "ip:10.0.0.1"); err != nil || again == nil {
			t.Errorf("second ban %+v: %v", again, err)
		}
	}}, 0)
	if _, _, err := reader.Bans(ctx); err != nil {
		t.Fatal(err)
	}
	if t.Failed() {
		return
	}
	bans, _, err := reader.Bans(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(bans) != 1 || bans[0].Key != "ip:10.0.0.1" || bans[0].Until.Sub(again.Until).Abs() > time.Second {
		t.Errorf("the bans are %+v after a full read, want the one made during it until %v", bans, again.Until)
	}
}

// TestNewWithHungRedis: a box made while its Redis takes connections but
// answers nothing (stopped, or a network that drops every reply) is
// returned all the same, without the bans, rather than holding up the
// start for ever; once Redis answers again, it reads them.
func TestNewWithHungRedis(t *testing.T) {
	srv := redistest.Start(t)
	c, err := redisconn.Open("redis://" + srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := flood
	r.After = 1
	if _, err := NewRedis(c, 0).Offend(context.Background(), &r, "ip:10.0.0.1"); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	resumed := false
	resume := func() {
		if !resumed {
			srv.Resume()
			resumed = true
		}
	}
	defer resume()
	made := make(chan *Box, 1)
	go func() {
		b, err := New([]config.Ban{r}, Options{Backend: NewRedis(c, 0), Poll: 10 * time.Millisecond})
		if err != nil {
			t.Error(err)
		}
		made <- b
	}()
	var b *Box
	select {
	case b = <-made:
	case <-time.After(30 * time.Second):
		t.Error("New did not return within 30s of a Redis that answers nothing")
		resume()
		b = <-made
	}
	if b == nil {
		return
	}
	defer b.Close()
	resume()
	waitFor(t, func() bool { _, _, banned := b.Banned("ip:10.0.0.1", "", ""); return banned })
}

// TestRedisBansOnServerClock: bans on Redis are made on the server's
// clock, and an instance whose own clock is ten minutes ahead of it
// (unsynchronised, or stepped) still holds them for their length, its own
// and those another instance made, rather than taking them for ended.
func TestRedisBansOnServerClock(t *testing.T) {
	srv := redistest.Start(t)
	open := clientsOf(t, srv)
	r := flood
	r.After = 1
	const skew = 10 * time.Minute
	ahead := func() time.Time { return time.Now().Add(skew) }
	a, err := New([]config.Ban{r}, Options{Backend: NewRedis(open(), 0), Poll: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := New([]config.Ban{r}, Options{Backend: NewRedis(open(), 0), Poll: 10 * time.Millisecond, Now: ahead})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	near := func(until time.Time) bool {
		left := until.Sub(ahead())
		return left > r.Ban-20*time.Second && left <= r.Ban
	}

	b.Outcome(ctx, "ip:10.0.0.1", "", "", true, policy.IdentityClientIP, 429)
	if _, until, banned := b.Banned("ip:10.0.0.1", "", ""); !banned || !near(until) {
		t.Errorf("the instance ahead does not hold its own ban of %v: banned %v, %v left on its clock", r.Ban, banned, until.Sub(ahead()))
	}
	a.Outcome(ctx, "ip:10.0.0.2", "", "", true, policy.IdentityClientIP, 429)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, until, banned := b.Banned("ip:10.0.0.2", "", "")
		if banned && near(until) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the instance ahead does not hold another's ban of %v: banned %v, %v left on its clock", r.Ban, banned, until.Sub(ahead()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	list, err := b.List(ctx)
	if err != nil || len(list) != 2 {
		t.Errorf("the instance ahead lists %+v (%v), want both bans", list, err)
	}
}

// heldRead is a client whose reads of every ban (HGETALL of the bans)
// wait until release is closed once held is set: a Redis slow to answer
// a large read.
type heldRead struct {
	rueidis.Client
	held    atomic.Bool
	reading chan struct{} // gets a value when a held read starts
	release chan struct{}
}

func (h *heldRead) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	for _, c := range multi {
		if cmd := c.Commands(); h.held.Load() && len(cmd) == 2 && cmd[0] == "HGETALL" && cmd[1] == redisBans {
			select {
			case h.reading <- struct{}{}:
			default:
			}
			<-h.release
		}
	}
	return h.Client.DoMulti(ctx, multi...)
}

// TestBanNotHeldByRead: a ban made while the box is reading the bans from
// a Redis slow to answer (a lift's read, or a poll's) is in force at once,
// without waiting for the read: the offence's caller is not held past its
// own call to Redis, and the ban is not lost when the read ends.
func TestBanNotHeldByRead(t *testing.T) {
	srv := redistest.Start(t)
	c, err := redisconn.Open("redis://" + srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	slow := &heldRead{Client: c, reading: make(chan struct{}, 1), release: make(chan struct{})}
	r := flood
	r.After = 1
	box, err := New([]config.Ban{r}, Options{Backend: NewRedis(slow, 0), Poll: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	ctx := context.Background()
	box.Outcome(ctx, "ip:10.0.0.1", "", "", true, policy.IdentityClientIP, 429)

	// The version moved without the log (an instance of an earlier
	// version lifted a ban): the lift's refresh reads every ban, slowly.
	if err := c.Do(ctx, c.B().Incr().Key(redisVersion).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	slow.held.Store(true)
	lifted := make(chan error, 1)
	go func() { lifted <- box.Lift(ctx, "flood", "ip:10.0.0.1") }()
	<-slow.reading
	released := false
	release := func() {
		if !released {
			close(slow.release)
			released = true
		}
	}
	defer release()

	done := make(chan struct{})
	go func() {
		box.Outcome(ctx, "ip:10.0.0.2", "", "", true, policy.IdentityClientIP, 429)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Error("an offence that made a ban was held for 30s by a read of the bans")
	}
	if _, _, banned := box.Banned("ip:10.0.0.2", "", ""); !banned {
		t.Error("a ban made during a read of the bans is not in force")
	}
	release()
	<-done
	if err := <-lifted; err != nil {
		t.Fatal(err)
	}
	if _, _, banned := box.Banned("ip:10.0.0.2", "", ""); !banned {
		t.Error("a ban made during a read of the bans is lost when the read ends")
	}
	if _, _, banned := box.Banned("ip:10.0.0.1", "", ""); banned {
		t.Error("a lifted ban is in force")
	}
}

// redisBox is a Redis backend on a redis-server of its own that keeps at
// most bound offence counters, and the flood rule counting 3 offences an
// hour to a ban.
func redisBox(t *testing.T, bound int) (*Redis, config.Ban) {
	t.Helper()
	srv := redistest.Start(t)
	c, err := redisconn.Open("redis://" + srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r := flood
	r.After, r.Within = 3, time.Hour
	return NewRedis(c, bound), r
}
