package keystore

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/policy"
)

// fullReads returns how many times the Redis at rs read a whole hash
// (HGETALL), scripts' calls included.
func fullReads(t *testing.T, rs *redistest.Server) int {
	t.Helper()
	info, err := rs.Do("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_hgetall:calls=")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		if err != nil {
			t.Fatalf("commandstats: %q: %v", line, err)
		}
		return n
	}
	return 0
}

// sameRecords fails t unless the stores a and b hold the same records.
func sameRecords(t *testing.T, when string, a, b *Store) {
	t.Helper()
	ja, err := json.Marshal(a.List())
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b.List())
	if err != nil {
		t.Fatal(err)
	}
	if string(ja) != string(jb) {
		t.Fatalf("%s: the other instance holds other records:\n%s\nwant\n%s", when, jb, ja)
	}
}

// TestRedisChangesReadOnlyWhatChanged: an instance that is a change or
// two behind reads only the records that changed, not every key: with
// 1,000 keys stored, creates, rotations, disables, revocations and
// deletions made through one instance are seen by another (a deleted key
// gone from it too) without one read of the whole hash. Before, every
// change made every instance read every record (HGETALL), which holds a
// Redis shared with the rate limits for tens of milliseconds per 100,000
// keys.
func TestRedisChangesReadOnlyWhatChanged(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	r := reloader(t)
	ctx := context.Background()
	a, err := New(ctx, Options{Backend: redisBackend(t, rs.Addr), Policy: r.Policy})
	if err != nil {
		t.Fatal(err)
	}
	const stored = 1000
	raws := make([]string, stored)
	for i := range stored {
		if raws[i], _, err = a.Create(ctx, fmt.Sprintf("k%d", i), "basic", policy.KeyOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	b, err := New(ctx, Options{Backend: redisBackend(t, rs.Addr), Policy: r.Policy})
	if err != nil {
		t.Fatal(err)
	}
	sameRecords(t, "start", a, b)
	before := fullReads(t, rs)

	var fresh, rotated, oldSecret string
	steps := []struct {
		name string
		do   func() error
	}{
		{"a key made", func() (err error) { fresh, _, err = a.Create(ctx, "fresh", "gold", policy.KeyOptions{}); return err }},
		{"a key rotated", func() error {
			rec, err := a.Get("fresh")
			if err != nil {
				return err
			}
			oldSecret = rec.Secrets[0].SHA256
			rotated, _, err = a.Rotate(ctx, "fresh", 0)
			return err
		}},
		{"a key disabled", func() error {
			_, err := a.Update(ctx, "k1", func(r *Record) error { r.Disabled = true; return nil })
			return err
		}},
		{"a key given its own rate", func() error {
			_, err := a.Update(ctx, "k2", func(r *Record) error { r.Rate = 5; return nil })
			return err
		}},
		{"a key revoked", func() error {
			_, err := a.Update(ctx, "k3", func(r *Record) error { r.Revoked = true; return nil })
			return err
		}},
		{"a revoked key deleted", func() error { return a.Delete(ctx, "k3") }},
		{"a key made and disabled, then looked at once", func() error {
			if _, _, err := a.Create(ctx, "twice", "basic", policy.KeyOptions{}); err != nil {
				return err
			}
			_, err := a.Update(ctx, "twice", func(r *Record) error { r.Disabled = true; return nil })
			return err
		}},
		{"a key revoked and deleted, then looked at once", func() error {
			if _, err := a.Update(ctx, "k4", func(r *Record) error { r.Revoked = true; return nil }); err != nil {
				return err
			}
			return a.Delete(ctx, "k4")
		}},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		b.Refresh(ctx)
		sameRecords(t, st.name, a, b)
	}
	p := r.Policy()
	if k := lookup(b, p, rotated); k == nil || k.Name() != "fresh" {
		t.Errorf("the rotated key's new secret on the other instance: %v", k)
	}
	if lookup(b, p, fresh) != nil {
		t.Errorf("the rotated key's old secret (sha256 %s…) still works on the other instance", oldSecret[:12])
	}
	for i, want := range map[int]string{0: "k0", 1: "", 2: "k2", 3: "", 4: ""} {
		switch k := lookup(b, p, raws[i]); {
		case want == "" && k != nil:
			t.Errorf("k%d, disabled or revoked, still works on the other instance", i)
		case want != "" && (k == nil || k.Name() != want):
			t.Errorf("k%d on the other instance: %v", i, k)
		}
	}
	for _, gone := range []string{"k3", "k4"} {
		if _, err := b.Get(gone); err == nil {
			t.Errorf("the deleted key %s is still on the other instance", gone)
		}
	}
	if n := fullReads(t, rs) - before; n != 0 {
		t.Errorf("%d reads of the whole hash of %d keys for %d changes looked at one or two at a time; want 0", n, stored, len(steps))
	}
}

// TestRedisChangesFullReadWhenBehind: an instance reads every record
// again when the log of changes cannot tell it what changed: when it is
// further behind than the log reaches, when a change was made without
// the log (an instance of an earlier version during a rolling upgrade),
// and when the version is of another epoch (a Redis emptied, then counted
// past the version it had read). Otherwise it reads only what changed,
// and the log stays bounded.
func TestRedisChangesFullReadWhenBehind(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	r := reloader(t)
	ctx := context.Background()
	w := redisBackend(t, rs.Addr) // writes as another instance would
	add := func(name string) string {
		t.Helper()
		raw, sum, err := NewSecret()
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := w.Add(ctx, Record{Name: name, Plan: "basic", Secrets: []Secret{{SHA256: sum}}}, 0); err != nil {
			t.Fatal(err)
		}
		return raw
	}
	b, err := New(ctx, Options{Backend: redisBackend(t, rs.Addr), Policy: r.Policy})
	if err != nil {
		t.Fatal(err)
	}
	names := func() []string {
		var out []string
		for _, rec := range b.List() {
			out = append(out, rec.Name)
		}
		return out
	}
	look := func(what string, want int) {
		t.Helper()
		before := fullReads(t, rs)
		b.Refresh(ctx)
		if got := fullReads(t, rs) - before; got != want {
			t.Errorf("%s: %d reads of every record, want %d", what, got, want)
		}
	}

	// Further behind than the log reaches.
	var last string
	for i := range changeLog + 1 {
		last = add(fmt.Sprintf("k%d", i))
	}
	if n, err := rs.Do("ZCARD", redisChanges); err != nil || n != strconv.Itoa(changeLog) {
		t.Errorf("the log holds %s changes (%v), want %d", n, err, changeLog)
	}
	look("further behind than the log", 1)
	if got := len(b.List()); got != changeLog+1 {
		t.Fatalf("%d keys after a full read, want %d", got, changeLog+1)
	}
	if lookup(b, r.Policy(), last) == nil {
		t.Error("the last key made is not found after a full read")
	}

	// One change: read alone.
	one := add("one")
	look("one change", 0)
	if lookup(b, r.Policy(), one) == nil {
		t.Error("a key made one change ahead is not found")
	}

	// A change made without the log.
	_, sum, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(Record{Name: "unlogged", Plan: "basic", Secrets: []Secret{{SHA256: sum}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rs.Do("HSET", redisHash, "unlogged", string(js)); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.Do("INCR", redisVersion); err != nil {
		t.Fatal(err)
	}
	add("after-unlogged")
	look("a change made without the log", 1)
	if _, err := b.Get("unlogged"); err != nil {
		t.Errorf("a key written without the log: %v", err)
	}

	// Another epoch: Redis emptied, and its count set past the one read
	// with two changes logged after it.
	if _, err := rs.Do("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.Do("SET", redisVersion, strconv.Itoa(changeLog+3)); err != nil {
		t.Fatal(err)
	}
	add("e1")
	add("e2")
	look("another epoch", 1)
	if got := names(); len(got) != 2 || got[0] != "e1" || got[1] != "e2" {
		t.Errorf("after Redis was emptied the other instance holds %d keys %v…, want [e1 e2]", len(got), got[:min(len(got), 4)])
	}
	if lookup(b, r.Policy(), last) != nil {
		t.Error("a key the emptied Redis no longer holds still works")
	}
}

// countWarnings counts the log records whose message is msg.
type countWarnings struct {
	msg string
	n   atomic.Int64
}

func (c *countWarnings) Enabled(context.Context, slog.Level) bool { return true }
func (c *countWarnings) Handle(_ context.Context, r slog.Record) error {
	if r.Message == c.msg {
		c.n.Add(1)
	}
	return nil
}
func (c *countWarnings) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *countWarnings) WithGroup(string) slog.Handler      { return c }

// TestChangeResolvesOnlyThatKey: a change of one key among many resolves
// that key alone against the policy, on the instance that made it and on
// one that read it; a policy reload resolves them all. Before, every
// change resolved every key again on every instance (with 100,000 keys
// 130 ms of CPU per change), and logged again each key the policy no
// longer serves.
func TestChangeResolvesOnlyThatKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	polPath := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(polPath, []byte(testPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := policy.NewReloader(policy.ReloaderOptions{Path: polPath})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	backend := NewFileBackend(filepath.Join(dir, "keys.json"))
	warned := &countWarnings{msg: "keystore: key not usable with this policy"}
	s, err := New(ctx, Options{Backend: backend, Policy: r.Policy, Logger: slog.New(warned)})
	if err != nil {
		t.Fatal(err)
	}
	const gold = 50
	for i := range gold {
		if _, _, err := s.Create(ctx, fmt.Sprintf("g%d", i), "gold", policy.KeyOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The plan gold is gone: its keys are not served.
	if err := os.WriteFile(polPath, []byte(strings.ReplaceAll(testPolicy,
		"  - {name: gold, rate: 20, burst: 20, quota: {limit: 1000, period: DAY}}\n", "")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	s.Refresh(ctx)
	if n := warned.n.Load(); n != gold {
		t.Fatalf("%d keys reported not usable after the reload, want %d", n, gold)
	}
	warned.n.Store(0)
	raw, _, err := s.Create(ctx, "fresh", "basic", policy.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lookup(s, r.Policy(), raw) == nil {
		t.Fatal("the key made is not found")
	}
	if _, err := s.Update(ctx, "g1", func(r *Record) error { r.Revoked = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if n := warned.n.Load(); n != 0 {
		t.Errorf("two changes resolved the %d keys of the gone plan again (%d reports), want none", gold, n)
	}
}
