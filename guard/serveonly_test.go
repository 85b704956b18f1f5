package guard_test

import (
	"errors"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/guard"
)

// TestServeOnlyGatekeepingRefused: a policy file whose server section
// has allow and deny lists (access) or penalty-box rules (bans), which
// floodgate serve applies before any limit and a Guard cannot, is
// refused with the file, line and field, at New and when a new version
// of the file brings them: a Guard never lets through, unnoticed, an
// address the file denies or a key it would ban.
func TestServeOnlyGatekeepingRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, server, field string
		line                int
	}{
		{"deny list", "server:\n  access:\n    deny: [127.0.0.1, \"::1\"]\n", "server.access", 4},
		{"allow list", "server:\n  trusted_proxies: [10.0.0.0/8]\n  access:\n    allow: [{networks: [10.0.0.0/8], exempt: [all]}]\n", "server.access", 5},
		{"bans", "server:\n  bans:\n    - {name: flood, key: client_ip, after: 1, within: 1m, ban: 5m}\n", "server.bans", 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			file := filepath.Join(t.TempDir(), "policy.yaml")
			writeFile(t, file, "version: 1\n"+c.server+"limits:\n  - {name: per-client, rate: 1, per: 1h}\n")
			g, err := guard.New(guard.File(file), guard.Options{ReloadInterval: -1})
			if err == nil {
				g.Close()
				t.Fatalf("guard.New accepted a policy whose %s a Guard does not apply", c.field)
			}
			var es config.Errors
			if !errors.As(err, &es) || len(es) != 1 || es[0].Field != c.field || es[0].Line != c.line || es[0].File != file {
				t.Fatalf("error %q (%#v), want one problem at %s:%d, field %s", err, es, file, c.line, c.field)
			}
			if !strings.Contains(err.Error(), "floodgate serve") {
				t.Errorf("error %q does not say who applies %s", err, c.field)
			}
		})
	}

	t.Run("a new version", func(t *testing.T) {
		t.Parallel()
		file := filepath.Join(t.TempDir(), "policy.yaml")
		policyOf := func(server, name string) string {
			return "version: 1\n" + server + "limits:\n  - {name: " + name + ", rate: 100, per: 1h}\n"
		}
		writeFile(t, file, policyOf("", "before"))
		logs := &syncBuffer{}
		g := newGuard(t, guard.File(file), guard.Options{ReloadInterval: 5 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(logs, nil))})
		url := serveGuard(t, g)
		c := &http.Client{}
		waitFor := func(what string, ok func() bool) {
			t.Helper()
			for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("after 30s: %s", what)
				}
			}
		}
		writeFile(t, file, policyOf("server:\n  access:\n    deny: [127.0.0.1, \"::1\"]\n", "denied"))
		waitFor("the version with a deny list is neither applied nor refused", func() bool {
			return strings.Contains(logs.String(), "server.access") || do(t, c, "GET", url+"/", nil).policy != `"before";q=100;w=3600`
		})
		if a := do(t, c, "GET", url+"/", nil); a.policy != `"before";q=100;w=3600` {
			t.Fatalf("a version whose deny list a Guard cannot apply was applied: %v", a)
		}
		writeFile(t, file, policyOf("", "after"))
		waitFor("the valid version after it is not applied", func() bool {
			return do(t, c, "GET", url+"/", nil).policy == `"after";q=100;w=3600`
		})
	})
}
