package keystore

import (
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/redisconn"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/policy"
)

const testPolicy = `
routes:
  - {name: partner, match: {paths: ["/**"]}, api_key_required: true, upstream: none}
plans:
  - {name: basic, rate: 2, burst: 2, quota: {limit: 10, period: DAY}}
  - {name: gold, rate: 20, burst: 20, quota: {limit: 1000, period: DAY}}
`

func reloader(t *testing.T) *policy.Reloader {
	t.Helper()
	path := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(path, []byte(testPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := policy.NewReloader(policy.ReloaderOptions{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// redisBackend returns a backend on its own connection to the Redis at
// addr, closed when the test ends.
func redisBackend(t *testing.T, addr string) Backend {
	t.Helper()
	c, err := redisconn.Open("redis://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return NewRedisBackend(c)
}

// clock is a settable clock for rotations.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func lookup(s *Store, p *policy.Policy, raw string) *policy.Key {
	sum := sha256.Sum256([]byte(raw))
	return s.LookupKey(p, &sum)
}

func TestStoreLifecycle(t *testing.T) {
	t.Parallel()
	r := reloader(t)
	clk := &clock{t: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	path := filepath.Join(t.TempDir(), "keys.json")
	ctx := context.Background()
	s, err := New(ctx, Options{Backend: NewFileBackend(path), Policy: r.Policy, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	raw, rec, err := s.Create(ctx, "acme", "basic", policy.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Plan != "basic" || len(rec.Secrets) != 1 {
		t.Fatalf("record %+v", rec)
	}
	if k := lookup(s, r.Policy(), raw); k == nil || k.Name() != "acme" {
		t.Fatalf("created key not found: %v", k)
	}
	if _, _, err := s.Create(ctx, "acme", "basic", policy.KeyOptions{}); !errors.Is(err, ErrExists) {
		t.Errorf("duplicate: %v", err)
	}
	if _, _, err := s.Create(ctx, "bad name", "basic", policy.KeyOptions{}); !errors.Is(err, ErrBadName) {
		t.Errorf("bad name: %v", err)
	}
	if _, _, err := s.Create(ctx, "x", "platinum", policy.KeyOptions{}); !errors.Is(err, policy.ErrUnknownPlan) {
		t.Errorf("unknown plan: %v", err)
	}

	// Rotation with an overlap: both secrets work until it ends.
	raw2, _, err := s.Rotate(ctx, "acme", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if lookup(s, r.Policy(), raw) == nil || lookup(s, r.Policy(), raw2) == nil {
		t.Fatal("a secret fails during the overlap")
	}
	clk.t = clk.t.Add(time.Hour)
	if lookup(s, r.Policy(), raw) != nil || lookup(s, r.Policy(), raw2) == nil {
		t.Fatal("after the overlap only the new secret works")
	}

	// Plan, override, reset, disable.
	if _, err := s.Update(ctx, "acme", func(r *Record) error { r.Plan, r.Quota, r.Generation = "gold", 5000, r.Generation+1; return nil }); err != nil {
		t.Fatal(err)
	}
	k := lookup(s, r.Policy(), raw2)
	if _, q := k.Limits(); k.Plan() != "gold" || q.Rule.Limit().Max != 5000 || k.Counter() != "key:acme#1" {
		t.Errorf("updated key: plan %s, quota %d, counter %s", k.Plan(), q.Rule.Limit().Max, k.Counter())
	}
	if _, err := s.Update(ctx, "acme", func(r *Record) error { r.Disabled = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if lookup(s, r.Policy(), raw2) != nil {
		t.Error("disabled key still works")
	}

	// The file keeps it all for the next process.
	s2, err := New(ctx, Options{Backend: NewFileBackend(path), Policy: r.Policy, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s2.Get("acme")
	if err != nil || !got.Disabled || got.Plan != "gold" || got.Quota != 5000 {
		t.Errorf("reloaded record %+v, %v", got, err)
	}
	if _, err := s.Update(ctx, "acme", func(r *Record) error { r.Revoked = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, "acme", func(r *Record) error { r.Disabled = false; return nil }); !errors.Is(err, ErrRevoked) {
		t.Errorf("changing a revoked key: %v", err)
	}
}

// TestRedisPropagation: a key created through one store is seen by
// another sharing the Redis, and so is its revocation.
func TestRedisPropagation(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	r := reloader(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stores [2]*Store
	for i := range stores {
		var err error
		if stores[i], err = New(ctx, Options{Backend: redisBackend(t, rs.Addr), Policy: r.Policy}); err != nil {
			t.Fatal(err)
		}
		go stores[i].Run(ctx)
	}
	raw, _, err := stores[0].Create(ctx, "acme", "basic", policy.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the key on the other store", func() bool { return lookup(stores[1], r.Policy(), raw) != nil })
	if _, err := stores[1].Update(ctx, "acme", func(r *Record) error { r.Revoked = true; return nil }); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the revocation on the first store", func() bool { return lookup(stores[0], r.Policy(), raw) == nil })
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLookupKeyName: a request that gives its API key by name (an access
// log replayed) finds a key of the store, as one carrying the secret does:
// the same plan and the same counters; a disabled or unknown name finds
// nothing.
func TestLookupKeyName(t *testing.T) {
	t.Parallel()
	r := reloader(t)
	ctx := context.Background()
	s, err := New(ctx, Options{Backend: NewFileBackend(filepath.Join(t.TempDir(), "keys.json")), Policy: r.Policy})
	if err != nil {
		t.Fatal(err)
	}
	r.SetKeySource(s)
	raw, _, err := s.Create(ctx, "acme", "gold", policy.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := r.Policy()
	if k := s.LookupKeyName(p, "acme"); k == nil || k != lookup(s, p, raw) {
		t.Fatalf("by name %v, by secret %v", k, lookup(s, p, raw))
	}
	var byName, bySecret policy.Match
	p.Match(&policy.Request{Method: "GET", Path: "/x", KeyName: "acme"}, &byName)
	p.Match(&policy.Request{Method: "GET", Path: "/x", APIKey: raw}, &bySecret)
	if byName.Forbidden || byName.KeyID != "acme" || byName.Plan != "gold" || len(byName.Hits) == 0 {
		t.Fatalf("a request naming acme: %+v", byName)
	}
	if len(byName.Hits) != len(bySecret.Hits) {
		t.Fatalf("%d hits by name, %d by secret", len(byName.Hits), len(bySecret.Hits))
	}
	for i := range byName.Hits {
		if byName.Hits[i].Key != bySecret.Hits[i].Key || byName.Hits[i].Rule != bySecret.Hits[i].Rule {
			t.Errorf("hit %d: %+v by name, %+v by secret", i, byName.Hits[i], bySecret.Hits[i])
		}
	}
	if _, err := s.Update(ctx, "acme", func(r *Record) error { r.Disabled = true; return nil }); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"acme", "nobody"} {
		if k := s.LookupKeyName(p, name); k != nil {
			t.Errorf("%s: found %v", name, k)
		}
		var m policy.Match
		p.Match(&policy.Request{Method: "GET", Path: "/x", KeyName: name}, &m)
		if !m.Forbidden {
			t.Errorf("a request naming %s: %+v, want 403", name, m)
		}
	}
}

// TestRotationsAreBounded: a key rotated again and again (an automation in
// a loop) holds MaxSecrets secrets at most, the newest; the older ones
// stop working at once. An overlap past MaxOverlap is refused: the old
// secret would have worked for centuries. Before, every rotation within
// the overlap added a secret to the key's record, without end.
func TestRotationsAreBounded(t *testing.T) {
	t.Parallel()
	r := reloader(t)
	clk := &clock{t: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	path := filepath.Join(t.TempDir(), "keys.json")
	ctx := context.Background()
	s, err := New(ctx, Options{Backend: NewFileBackend(path), Policy: r.Policy, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	raw, _, err := s.Create(ctx, "acme", "basic", policy.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secrets := []string{raw}
	for i := 0; i < 50; i++ {
		clk.t = clk.t.Add(time.Second)
		raw, rec, err := s.Rotate(ctx, "acme", 24*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, raw)
		if want := min(len(secrets), MaxSecrets); len(rec.Secrets) != want {
			t.Fatalf("after %d rotations the key holds %d secrets, want %d", i+1, len(rec.Secrets), want)
		}
	}
	for i, sec := range secrets {
		live := i >= len(secrets)-MaxSecrets
		if got := lookup(s, r.Policy(), sec) != nil; got != live {
			t.Errorf("secret %d of %d: works %v, want %v", i, len(secrets), got, live)
		}
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > 4096 {
		t.Errorf("the store's file holds %d bytes for one key", st.Size())
	}
	for _, d := range []time.Duration{-time.Second, MaxOverlap + time.Second, 1<<63 - 1} {
		if _, _, err := s.Rotate(ctx, "acme", d); !errors.Is(err, ErrOverlap) {
			t.Errorf("overlap %v: %v, want ErrOverlap", d, err)
		}
	}
	if _, _, err := s.Rotate(ctx, "acme", MaxOverlap); err != nil {
		t.Errorf("overlap %v: %v", MaxOverlap, err)
	}
}
