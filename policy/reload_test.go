package policy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// writeFile replaces path atomically, as configuration tools do.
func writeFile(t testing.TB, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// clock is a settable clock for memstore.
type clock struct{ ns atomic.Int64 }

func (c *clock) now() int64      { return c.ns.Load() }
func (c *clock) set(t time.Time) { c.ns.Store(t.UnixNano()) }

// syncBuffer is a bytes.Buffer safe for a logger used from goroutines.
type syncBuffer struct {
	mu sync.Mutex
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

const reloadV1 = `
routes:
  - {name: r, match: {paths: ["/**"]}, stage: dev, upstream: none}
stages:
  - {name: dev, rate: 5, burst: 5, per: 1h}
limits:
  - {name: per-ip, rate: 10, burst: 10, per: 1h}
`

func TestReloadRejectsInvalid(t *testing.T) {
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	writeFile(t, path, reloadV1)
	var logs syncBuffer
	var hooked atomic.Int32
	rl, err := NewReloader(ReloaderOptions{Path: path,
		Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
		OnReject: func(error) { hooked.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	p1 := rl.Policy()
	writeFile(t, path, reloadV1+"  - {name: bad, rate: 5, brust: 3}\n")
	err = rl.Reload()
	var errs config.Errors
	if !errors.As(err, &errs) || len(errs) != 1 || errs[0].Field != "limits[1].brust" {
		t.Fatalf("reload error %v", err)
	}
	if rl.Policy() != p1 || rl.Rejected() != 1 || hooked.Load() != 1 {
		t.Errorf("invalid file applied or not counted: rejected %d, hook %d", rl.Rejected(), hooked.Load())
	}
	if !strings.Contains(logs.String(), "limits[1].brust") {
		t.Errorf("problem not logged:\n%s", logs.String())
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := rl.Reload(); err == nil || rl.Policy() != p1 || rl.Rejected() != 2 {
		t.Errorf("missing file: err %v, rejected %d", err, rl.Rejected())
	}
	if _, err := NewReloader(ReloaderOptions{Path: path}); err == nil {
		t.Error("NewReloader accepted a missing file")
	}
}

// TestReloadRejectsABadParameter: a limit whose parameters break the
// limit's own rules is refused with its file, line, column and the field of
// the parameter, and the running policy stays.
func TestReloadRejectsABadParameter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	writeFile(t, path, reloadV1)
	rl, err := NewReloader(ReloaderOptions{Path: path, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	p1 := rl.Policy()
	writeFile(t, path, reloadV1+"  - {name: huge, rate: 1, per: 1h, burst: 4611686018427387904}\n")
	err = rl.Reload()
	var errs config.Errors
	if !errors.As(err, &errs) || len(errs) != 1 {
		t.Fatalf("reload error %v", err)
	}
	if e := errs[0]; e.File != path || e.Line != 8 || e.Column != 43 || e.Field != "limits[1].burst" ||
		e.Msg != "burst 4611686018427387904 at 1 per 1h0m0s overflows" {
		t.Errorf("problem %q, want %s:8:43: limits[1].burst: burst ... overflows", e, path)
	}
	if rl.Policy() != p1 || rl.Rejected() != 1 {
		t.Errorf("invalid file applied or not counted: rejected %d", rl.Rejected())
	}
}

func TestReloadPolls(t *testing.T) {
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	writeFile(t, path, reloadV1)
	applied := make(chan *Policy, 4)
	rl, err := NewReloader(ReloaderOptions{Path: path, Interval: 5 * time.Millisecond,
		OnReload: func(p *Policy) { applied <- p }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { rl.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	// An invalid version is rejected once, however often it is seen.
	writeFile(t, path, "limits: [{name: x}]\n")
	deadline := time.After(30 * time.Second)
	for rl.Rejected() == 0 {
		select {
		case <-deadline:
			t.Fatal("invalid file never noticed")
		case <-time.After(5 * time.Millisecond):
		}
	}
	writeFile(t, path, reloadV1+"  - {name: added, rate: 7}\n")
	select {
	case p := <-applied:
		if _, ok := p.Limit("added"); !ok || rl.Policy() != p {
			t.Error("the new version is not the current policy")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("change never applied")
	}
	if rl.Rejected() != 1 {
		t.Errorf("invalid version rejected %d times, want once", rl.Rejected())
	}
}

// TestReloadUnderLoad replaces the file ten times, valid and invalid in
// turn, while goroutines match and check requests without pause.
func TestReloadUnderLoad(t *testing.T) {
	const capacity = 1 << 40
	version := func(i int, valid bool) string {
		s := fmt.Sprintf(`
routes:
  - {name: r, match: {paths: ["/**"]}, upstream: none}
limits:
  - {name: counted, algorithm: fixed_window, limit: %d, window: 1h, key: global}
  - {name: changing, rate: %d, burst: 1000000, key: client_ip}
`, capacity, 1000000+i)
		if !valid {
			s += "  - {name: invalid-marker, rate: 5, burst: 0}\n"
		}
		return s
	}
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	writeFile(t, path, version(0, true))
	rl, err := NewReloader(ReloaderOptions{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{}
	clk.set(t0)
	st, err := memstore.New(memstore.Options{Now: clk.now, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	lim := limiter.New(st, limiter.Options{})

	var checks, failures atomic.Int64
	var sawInvalid atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var m Match
			var res limiter.Result
			req := &Request{Method: "GET", Path: "/x", ClientIP: ip(fmt.Sprintf("198.51.100.%d", w+1))}
			for {
				select {
				case <-stop:
					return
				default:
				}
				p := rl.Policy()
				if _, ok := p.Limit("invalid-marker"); ok {
					sawInvalid.Store(true)
				}
				p.Match(req, &m)
				if err := lim.Decide(context.Background(), &limiter.Request{Hits: m.Hits}, &res); err != nil || !res.Allowed || len(m.Hits) != 2 {
					failures.Add(1)
				}
				checks.Add(1)
			}
		}()
	}
	waitFor := func(n int64) {
		deadline := time.Now().Add(60 * time.Second)
		for checks.Load() < n && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	for i := 1; i <= 10; i++ {
		waitFor(int64(i) * 500)
		valid := i%2 == 0
		writeFile(t, path, version(i, valid))
		err := rl.Reload()
		if valid != (err == nil) {
			t.Errorf("version %d (valid %v): reload error %v", i, valid, err)
		}
	}
	waitFor(6000)
	close(stop)
	wg.Wait()

	if n := failures.Load(); n != 0 {
		t.Errorf("%d of %d checks failed", n, checks.Load())
	}
	if sawInvalid.Load() {
		t.Error("an invalid version was applied")
	}
	if rl.Reloads() != 5 || rl.Rejected() != 5 {
		t.Errorf("reloads %d, rejected %d; want 5 and 5", rl.Reloads(), rl.Rejected())
	}
	if checks.Load() < 5000 {
		t.Errorf("only %d checks ran", checks.Load())
	}
	// The counted limit never changed: every check of every version is in
	// the same count.
	var m Match
	rl.Policy().Match(&Request{Method: "GET", Path: "/x", ClientIP: ip("198.51.100.1")}, &m)
	res, err := lim.Peek(context.Background(), m.Hits[:1])
	if err != nil {
		t.Fatal(err)
	}
	if used := capacity - res.Decisions[0].Remaining - 1; used != checks.Load() {
		t.Errorf("counted %d, want %d checks (counts lost across reloads)", used, checks.Load())
	}
	if l, _ := rl.Policy().Limit("changing"); l.Rule.Limit().Rate != 1000010 {
		t.Errorf("final rate %d, want the last valid version's", l.Rule.Limit().Rate)
	}
}

func TestReloadFollowsJWTKeyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "floodgate.yaml")
	keyPath := filepath.Join(dir, "secret.txt")
	if err := os.WriteFile(keyPath, []byte(strings.Repeat("a", 32)), 0o600); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, "server:\n  user:\n    jwt: {alg: HS256, key_file: secret.txt}\n"+reloadV1)
	rl, err := NewReloader(ReloaderOptions{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	p1 := rl.Policy()
	if err := rl.Reload(); err != nil || rl.Policy() != p1 {
		t.Fatalf("unchanged files reloaded: %v", err)
	}
	// A rotated secret is a new version; a too-short one is rejected.
	writeFile(t, keyPath, strings.Repeat("b", 32))
	if err := rl.Reload(); err != nil || rl.Policy() == p1 || rl.Reloads() != 1 {
		t.Fatalf("rotated key not applied: %v", err)
	}
	writeFile(t, keyPath, "short")
	if err := rl.Reload(); err == nil || rl.Rejected() != 1 {
		t.Errorf("short secret: err %v, rejected %d", err, rl.Rejected())
	}
}

// TestReloadCheckRefuses: a version the Check hook refuses is refused as
// an invalid one: at the start NewReloader fails with the hook's error;
// later Reload returns it, counts it as rejected and keeps the running
// policy, and a version the hook accepts is applied.
func TestReloadCheckRefuses(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	policyOf := func(name string) string {
		return "version: 1\nlimits:\n  - {name: " + name + ", rate: 1, per: 1s}\n"
	}
	errRefused := errors.New("refused by the program")
	has := func(p *Policy, name string) bool { _, ok := p.Limit(name); return ok }
	check := func(p *Policy) error {
		if has(p, "refused") {
			return errRefused
		}
		return nil
	}
	writeFile(t, path, policyOf("refused"))
	if _, err := NewReloader(ReloaderOptions{Path: path, Check: check}); !errors.Is(err, errRefused) {
		t.Fatalf("NewReloader of a version the check refuses: %v, want %v", err, errRefused)
	}
	writeFile(t, path, policyOf("first"))
	r, err := NewReloader(ReloaderOptions{Path: path, Check: check})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, policyOf("refused"))
	if err := r.Reload(); !errors.Is(err, errRefused) {
		t.Fatalf("Reload of a version the check refuses: %v, want %v", err, errRefused)
	}
	if p := r.Policy(); !has(p, "first") || r.Rejected() != 1 || r.Reloads() != 0 {
		t.Fatalf("after a refused version: %d rejected, %d reloads, limit first kept: %v; want 1, 0, true", r.Rejected(), r.Reloads(), has(p, "first"))
	}
	writeFile(t, path, policyOf("second"))
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if !has(r.Policy(), "second") {
		t.Fatalf("an accepted version after a refused one is not applied")
	}
}
