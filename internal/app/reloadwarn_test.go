package app

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/policy"
)

// TestReloadNamesStartOnlySettings: a reload that changes a setting serve
// applies only at its start is applied but for that setting, and the
// warning names what keeps its old value: the access log, the check API's
// authentication, the store's eviction check and the rate-limit service's
// and check API's TLS files changed without a word.
func TestReloadNamesStartOnlySettings(t *testing.T) {
	const base = "version: 1\nroutes:\n  - {name: all, match: {paths: [\"/**\"]}, upstream: \"http://127.0.0.1:9\"}\n"
	compile := func(src string) *policy.Policy {
		f, err := config.Parse("p.yaml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		p, err := policy.Compile(f, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	first := compile(base)
	for name, block := range map[string]string{
		"server.access_log":     "server:\n  access_log: {path: \"-\"}\n",
		"server.api_auth":       "server:\n  api_listen: \"127.0.0.1:0\"\n  api_auth: none\n",
		"server.redis_eviction": "server:\n  redis_eviction: refuse\n",
		"server.grpc_tls_*":     "server:\n  grpc_tls_cert: c.pem\n  grpc_tls_key: k.pem\n",
	} {
		var logs bytes.Buffer
		s := &server{log: slog.New(slog.NewTextHandler(&logs, nil)), cfg: &ServeOptions{}, srv: first.Server()}
		s.reloaded(compile(base + block))
		if !strings.Contains(logs.String(), name) {
			t.Errorf("a reload changing %s logged %q; want a warning naming it", name, logs.String())
		}
	}
	var logs bytes.Buffer
	s := &server{log: slog.New(slog.NewTextHandler(&logs, nil)), cfg: &ServeOptions{}, srv: first.Server()}
	s.reloaded(compile(base + "limits:\n  - {name: l, rate: 1, per: 1s}\n"))
	if logs.Len() != 0 {
		t.Errorf("a reload of limits alone logged %q", logs.String())
	}
}
