package redisstore

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/floodgate/floodgate/internal/redistest"
)

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startRedis starts a server of the test's own with extra arguments.
func startRedis(t *testing.T, args ...string) *redistest.Server {
	t.Helper()
	srv, err := redistest.StartServer(redistest.Config{Dir: t.TempDir(), Args: args})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

// TestEvictionWarning: a Redis that may evict the limiter's keys is
// reported (Eviction, a warning in the log) and refused on request, also
// where CONFIG is disabled; one that cannot is not.
func TestEvictionWarning(t *testing.T) {
	for _, tc := range []struct {
		name      string
		args      []string
		evictable bool
		policy    string
	}{
		{"allkeys-lru", []string{"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"}, true, "allkeys-lru"},
		{"volatile-ttl", []string{"--maxmemory", "64mb", "--maxmemory-policy", "volatile-ttl"}, true, "volatile-ttl"},
		{"no CONFIG", []string{"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lfu", "--rename-command", "CONFIG", ""}, true, "allkeys-lfu"},
		{"noeviction", []string{"--maxmemory", "64mb", "--maxmemory-policy", "noeviction"}, false, "noeviction"},
		{"no maxmemory", []string{"--maxmemory-policy", "allkeys-lru"}, false, "allkeys-lru"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startRedis(t, tc.args...)
			var logs syncBuffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			s, err := New(Options{URL: "redis://" + srv.Addr, Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			e := s.Eviction()
			s.Close()
			if e.Err != nil || e.Evictable != tc.evictable || e.Policy != tc.policy || e.Node != srv.Addr || e.Checked.IsZero() {
				t.Fatalf("Eviction() = %+v, want evictable %v with policy %s", e, tc.evictable, tc.policy)
			}
			warned := strings.Contains(logs.String(), "may evict the limiter's keys")
			if warned != tc.evictable {
				t.Fatalf("warning logged: %v, want %v; log:\n%s", warned, tc.evictable, logs.String())
			}
			refusing, err := New(Options{URL: "redis://" + srv.Addr, RefuseEvictable: true})
			if err == nil {
				refusing.Close()
			}
			if tc.evictable && !errors.Is(err, ErrEvictable) {
				t.Fatalf("RefuseEvictable: %v, want ErrEvictable", err)
			}
			if !tc.evictable && err != nil {
				t.Fatalf("RefuseEvictable on a safe server: %v", err)
			}
			if err != nil {
				t.Logf("refused: %v", err)
			}
		})
	}
}

// TestEvictionChange: a policy changed at run time is found by the next
// check, and its end is logged too.
func TestEvictionChange(t *testing.T) {
	srv := startRedis(t, "--maxmemory", "64mb")
	var logs syncBuffer
	s, err := New(Options{URL: "redis://" + srv.Addr, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if e := s.Eviction(); e.Evictable || e.Policy != "noeviction" {
		t.Fatalf("at start: %+v", e)
	}
	if _, err := srv.Do("CONFIG", "SET", "maxmemory-policy", "volatile-lru"); err != nil {
		t.Fatal(err)
	}
	if e := s.CheckEviction(ctx); !e.Evictable || e.Policy != "volatile-lru" || !s.Eviction().Evictable {
		t.Fatalf("after CONFIG SET volatile-lru: %+v", e)
	}
	if _, err := srv.Do("CONFIG", "SET", "maxmemory-policy", "noeviction"); err != nil {
		t.Fatal(err)
	}
	if e := s.CheckEviction(ctx); e.Evictable {
		t.Fatalf("after CONFIG SET noeviction: %+v", e)
	}
	out := logs.String()
	if strings.Count(out, "may evict") != 1 || !strings.Contains(out, "no longer evicts") {
		t.Fatalf("want one warning and one all-clear; log:\n%s", out)
	}
}
