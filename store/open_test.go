package store_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memstore"
	"github.com/floodgate/floodgate/store/redisstore"
)

func TestSchemesAreTheStores(t *testing.T) {
	want := []string{"memory", "redis", "redis+cluster", "redis+sentinel", "redis+unix", "rediss", "rediss+cluster", "rediss+sentinel"}
	if got := store.Schemes(); !slices.Equal(got, want) {
		t.Fatalf("schemes %v, want %v", got, want)
	}
}

func TestCheck(t *testing.T) {
	for url, ok := range map[string]bool{
		"memory":                              true,
		"memory://x":                          false,
		"redis://127.0.0.1:6379/2":            true,
		"redis+sentinel://a:26379,b/mymaster": true,
		"redis+sentinel://mymaster@a:26379":   false,
		"redis+unix:///run/redis.sock":        true,
		"redis+unix://u:p@/run/redis.sock":    true,
		"redis+unix://run/redis.sock":         false,
		"memcache://a:11211":                  false,
		"":                                    false,
	} {
		if err := store.Check(url); (err == nil) != ok {
			t.Errorf("Check(%q) = %v, want ok=%v", url, err, ok)
		}
	}
}

func TestOpenUnknownScheme(t *testing.T) {
	_, _, err := store.Open(context.Background(), "memcache://a:11211", store.Options{})
	if !errors.Is(err, store.ErrUnknownScheme) {
		t.Fatalf("Open of an unknown scheme: %v, want ErrUnknownScheme", err)
	}
}

// TestStoreURLMistypedNeverShown: a store URL mistyped without its "://",
// or a password given where the URL was meant (a store file from the
// wrong key of a Secret), is refused by Check and Open without showing
// it; a URL of an unknown scheme is refused naming its scheme.
func TestStoreURLMistypedNeverShown(t *testing.T) {
	for _, url := range []string{"redis//:s3cret@127.0.0.1:6379", "redis:/:s3cret@127.0.0.1:6379",
		":s3cret@127.0.0.1:6379", "s3cretPassw0rd", "redis:s3cret@h://x", "memory://:s3cret@h"} {
		for name, err := range map[string]error{
			"Check": store.Check(url),
			"Open": func() error {
				_, _, err := store.Open(context.Background(), url, store.Options{})
				return err
			}(),
		} {
			if err == nil || strings.Contains(err.Error(), "s3cret") {
				t.Errorf("%s(%q): %v, want a refusal that does not show it", name, url, err)
			}
		}
	}
	if err := store.Check("memcache://:s3cret@a:11211"); err == nil || !strings.Contains(err.Error(), `unknown store scheme "memcache"`) ||
		strings.Contains(err.Error(), "s3cret") {
		t.Errorf("Check of an unknown scheme: %v, want it named alone", err)
	}
}

// decideTwice charges a limit of one twice: allowed, then denied.
func decideTwice(t *testing.T, s limiter.Store) {
	t.Helper()
	r := ruletest.Rule(t, floodgate.Limit{Name: "one", Algorithm: floodgate.FixedWindow, Max: 1, Window: time.Hour})
	hits := []limiter.Hit{{Rule: r, Key: t.Name(), Cost: 1}}
	out := make([]floodgate.Decision, 1)
	for i, want := range []bool{true, false} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := s.Decide(ctx, hits, false, out)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if out[0].Allowed != want {
			t.Fatalf("decision %d: %+v, want allowed=%v", i+1, out[0], want)
		}
	}
}

func TestOpenMemory(t *testing.T) {
	s, c, err := store.Open(context.Background(), "memory", store.Options{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := s.(*memstore.Store); !ok {
		t.Fatalf("memory opened a %T", s)
	}
	decideTwice(t, s)
}

func TestOpenRedis(t *testing.T) {
	rs := redistest.Start(t)
	s, c, err := store.Open(context.Background(), "redis://"+rs.Addr, store.Options{Prefix: "open-test:"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := s.(*redisstore.Store); !ok {
		t.Fatalf("redis:// opened a %T", s)
	}
	decideTwice(t, s)
}

func TestOpenRedisUnixSocket(t *testing.T) {
	_, sock := redistest.StartUnix(t)
	s, c, err := store.Open(context.Background(), "redis+unix://"+sock, store.Options{Prefix: "open-test:", DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	decideTwice(t, s)
}
