package console_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/internal/console"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store"
)

// duringHandler is a log handler that keeps the key store's messages
// logged while during is set.
type duringHandler struct {
	during *atomic.Bool
	mu     *sync.Mutex
	msgs   *[]string
}

func (h duringHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h duringHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h duringHandler) WithGroup(string) slog.Handler            { return h }

func (h duringHandler) Handle(_ context.Context, r slog.Record) error {
	if h.during.Load() && strings.HasPrefix(r.Message, "keystore:") {
		h.mu.Lock()
		*h.msgs = append(*h.msgs, r.Message)
		h.mu.Unlock()
	}
	return nil
}

// TestReloadNotHeldByAStalledRedis: a policy reload (SIGHUP, or the file
// watched) does not read the keys in Redis, so a Redis that stopped
// answering (SIGSTOP: its connections stay open and silent) holds neither
// the reload, which holds the reloader's lock, nor the next one: before,
// each reload waited for the keys' version until the refresh timeout
// (5 s), and the new version's deny list and ban rules waited with it.
// The reload's deny list and ban rules are in force once it returns.
func TestReloadNotHeldByAStalledRedis(t *testing.T) {
	rs := redistest.Start(t)
	url := "redis://" + rs.Addr
	dir := t.TempDir()
	cfg := filepath.Join(dir, "fg.yaml")
	write := func(extra string) {
		t.Helper()
		if err := os.WriteFile(cfg, fmt.Appendf(nil, `version: 1
server:
  store: %s
%splans:
  - {name: basic, rate: 50, burst: 50}
`, url, extra), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("")
	var c *console.Console
	rl, err := policy.NewReloader(policy.ReloaderOptions{Path: cfg, OnReload: func(p *policy.Policy) { c.Reloaded(p) }})
	if err != nil {
		t.Fatal(err)
	}
	st, closer, err := store.Open(t.Context(), url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	var reloading atomic.Bool
	var mu sync.Mutex
	var during []string
	log := slog.New(duringHandler{during: &reloading, mu: &mu, msgs: &during})
	c, err = console.New(console.Options{ConfigPath: cfg, Server: rl.Policy().Server(), Reloader: rl, Store: st,
		Registerer: prometheus.NewRegistry(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	k := c.Gatekeeper()

	rs.Pause()
	resumed := false
	defer func() {
		if !resumed {
			rs.Resume()
		}
	}()
	for i, extra := range []string{
		"  bans:\n    - {name: logins, key: client_ip, count_on: [401], after: 3, within: 1m, ban: 1m}\n",
		"  bans:\n    - {name: logins, key: user, count_on: [401], after: 3, within: 1m, ban: 1m}\n",
	} {
		write(extra)
		reloading.Store(true)
		err := rl.Reload()
		reloading.Store(false)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		msgs := during
		mu.Unlock()
		if len(msgs) > 0 {
			t.Errorf("reload %d with Redis stopped waited for it, logging %q before it returned", i+1, msgs)
		}
		if !k.CountsStatuses() || k.ScreensUsers() != (i == 1) {
			t.Errorf("reload %d returned without its ban rules in force", i+1)
		}
	}
	rs.Resume()
	resumed = true
}
