package replay

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/floodgate/floodgate/accesslog"
)

// TestCombinedLogAcrossTheUpgrade: a combined access log that a gateway
// went on appending to across the upgrade that added the client's field
// (lines without it, then lines with it, and the other way round after
// going back) reads whole: every line is replayed, none is unreadable,
// and the client's field of the later lines counts where it says.
func TestCombinedLogAcrossTheUpgrade(t *testing.T) {
	t.Parallel()
	p := compilePolicy(t, `
limits:
  - {name: per-client, rate: 1, per: 1h, burst: 3, key: client_ip, scope: global}
`)
	proxy := netip.MustParseAddr("192.0.2.9")
	line := func(i int, clientKey string) []byte {
		r := &accesslog.Record{Time: t0.Add(time.Duration(i) * time.Second), ClientIP: proxy, ClientKey: clientKey,
			Method: "GET", Path: "/x", Proto: "HTTP/1.1", Status: 200, Duration: 10 * time.Microsecond,
			Limit: "per-client", Decision: accesslog.Allow}
		return accesslog.AppendCombined(nil, r)
	}
	v1 := func(l []byte) []byte {
		l = bytes.TrimSuffix(l, []byte("\n"))
		return append(l[:bytes.LastIndex(l, []byte(` "`))], '\n')
	}
	for _, c := range []struct {
		name   string
		before func([]byte) []byte
		after  func([]byte) []byte
	}{
		{"upgraded", v1, func(l []byte) []byte { return l }},
		{"downgraded", func(l []byte) []byte { return l }, v1},
	} {
		var b []byte
		// Three of the proxy's own, then three forwarded for an address
		// that cannot be read: the gateway counted them apart.
		for i := range 3 {
			b = append(b, c.before(line(i, ""))...)
		}
		for i := 3; i < 6; i++ {
			key := "unknown@192.0.2.9"
			if c.name == "downgraded" {
				key = "" // a version without the field counts them under the proxy
			}
			b = append(b, c.after(line(i, key))...)
		}
		log := filepath.Join(t.TempDir(), "access.log")
		if err := os.WriteFile(log, b, 0o600); err != nil {
			t.Fatal(err)
		}
		r := mustRun(t, Options{Policy: p, Logs: []string{log}})
		wantDenied := int64(0)
		if c.name == "downgraded" {
			wantDenied = 3
		}
		if r.Requests != 6 || r.Logs[0].Skipped != 0 || r.Denied != wantDenied {
			t.Errorf("%s: %d requests, %d unreadable, %d denied; want 6, none and %d\n%s", c.name, r.Requests, r.Logs[0].Skipped,
				r.Denied, wantDenied, b)
		}
	}
}
