package penalty

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/policy"
)

// lateChanges is a client that takes its answers to the reads of what
// changed (changesScript) hold late once held is set: a process that
// reads Redis' answer late (a loaded machine, a slow network).
type lateChanges struct {
	rueidis.Client
	held atomic.Bool
	hold time.Duration
}

func (l *lateChanges) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c := cmd.Commands() // read before the call, which recycles them
	changes := len(c) > 4 && (c[0] == "EVALSHA" || c[0] == "EVAL") && c[3] == redisVersion && c[4] == redisChanges
	res := l.Client.Do(ctx, cmd)
	if changes && l.held.Load() {
		time.Sleep(l.hold)
	}
	return res
}

// TestRedisBanEndsAgree: two instances sharing the penalty box on Redis
// end a ban at the moment the server's clock set, whenever each read it:
// a ban made while Redis was stopped (SIGSTOP) ends when the ban made then
// says, and an instance that reads the answer telling it of a ban 3 s
// late does not hold it 3 s longer than the one that made it. Before, an
// instance placed the ban's end as far from the moment it read the answer
// as it was from the server's time: the late reader ended the ban 3 s
// after the other.
func TestRedisBanEndsAgree(t *testing.T) {
	srv := redistest.Start(t)
	open := clientsOf(t, srv)
	r := flood
	r.After = 1
	a, err := New([]config.Ban{r}, Options{Backend: NewRedis(open(), 0), Poll: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	late := &lateChanges{Client: open(), hold: 3 * time.Second}
	b, err := New([]config.Ban{r}, Options{Backend: NewRedis(late, 0), Poll: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	// agree checks that b holds key's ban, made by a, until a does, give
	// or take the round trips that tell each where the server's time is.
	agree := func(key string) {
		t.Helper()
		_, ua, banned := a.Banned(key, "", "")
		if !banned {
			t.Fatalf("%s is not banned by the instance that banned it", key)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			if _, ub, banned := b.Banned(key, "", ""); banned {
				t.Logf("%s's ban ends %v apart on the two instances", key, ub.Sub(ua))
				if d := ub.Sub(ua).Abs(); d > time.Second {
					t.Errorf("%s's ban ends %v on one instance, %v on the other: %v apart", key, ua, ub, ub.Sub(ua))
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the other instance does not hold %s's ban after 30s", key)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// A ban made once a stopped Redis runs again.
	srv.Pause()
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.Outcome(ctx, "ip:10.0.0.1", "", "", true, policy.IdentityClientIP, 429)
	}()
	time.Sleep(time.Second)
	srv.Resume()
	<-done
	agree("ip:10.0.0.1")

	// A ban the other instance reads late.
	late.held.Store(true)
	a.Outcome(ctx, "ip:10.0.0.2", "", "", true, policy.IdentityClientIP, 429)
	agree("ip:10.0.0.2")
}

// lateFirstRead is a client that takes the answer to its first read of
// every ban (Bans) 3 s late: a process that starts on a loaded machine.
type lateFirstRead struct {
	rueidis.Client
	reads atomic.Int32
}

func (l *lateFirstRead) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	res := l.Client.DoMulti(ctx, multi...)
	if l.reads.Add(1) == 1 {
		time.Sleep(3 * time.Second)
	}
	return res
}

// TestRedisFirstReadLateBanEndsAgree: an instance that reads the answer
// to its first read of the bans 3 s late ends the bans it read then when
// the instance that made them does, once a quicker call tells it where
// the server's time is. Before, it held them to the end its first, late
// answer placed: 3 s after the other instance.
func TestRedisFirstReadLateBanEndsAgree(t *testing.T) {
	srv := redistest.Start(t)
	open := clientsOf(t, srv)
	r := flood
	r.After = 1
	a, err := New([]config.Ban{r}, Options{Backend: NewRedis(open(), 0), Poll: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx := context.Background()
	a.Outcome(ctx, "ip:10.0.0.1", "", "", true, policy.IdentityClientIP, 429)
	b, err := New([]config.Ban{r}, Options{Backend: NewRedis(&lateFirstRead{Client: open()}, 0), Poll: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// A ban the other instance reads from the change log, quickly.
	a.Outcome(ctx, "ip:10.0.0.2", "", "", true, policy.IdentityClientIP, 429)
	waitFor(t, func() bool { _, _, banned := b.Banned("ip:10.0.0.2", "", ""); return banned })
	for _, key := range []string{"ip:10.0.0.1", "ip:10.0.0.2"} {
		_, ua, _ := a.Banned(key, "", "")
		_, ub, banned := b.Banned(key, "", "")
		if !banned {
			t.Fatalf("%s is not banned by the other instance", key)
		}
		t.Logf("%s's ban ends %v apart on the two instances", key, ub.Sub(ua))
		if d := ub.Sub(ua).Abs(); d > time.Second {
			t.Errorf("%s's ban ends %v on one instance, %v on the other: %v apart", key, ua, ub, ub.Sub(ua))
		}
	}
}
