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

// eachLogFormat writes recs as Floodgate's JSON access log and as its
// combined one, and runs check on each file in a subtest: a replay reads
// the same requests from either.
func eachLogFormat(t *testing.T, recs []*accesslog.Record, check func(t *testing.T, path string)) {
	t.Helper()
	for _, f := range []struct {
		name   string
		append func([]byte, *accesslog.Record) []byte
	}{{"json", accesslog.AppendJSON}, {"combined", accesslog.AppendCombined}} {
		t.Run(f.name, func(t *testing.T) {
			var b []byte
			for _, r := range recs {
				b = f.append(b, r)
			}
			path := filepath.Join(t.TempDir(), "access."+f.name+".log")
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			check(t, path)
		})
	}
}

// asCombinedV2 returns a line of accesslog.CombinedLogFormat as
// accesslog.CombinedLogFormatV2 wrote it: without its last three fields
// (degraded, shed, screened).
func asCombinedV2(line []byte) []byte { return withoutLastFields(line, 3) }

// asCombinedV1 returns a line of accesslog.CombinedLogFormat as
// accesslog.CombinedLogFormatV1 wrote it: without the client's field
// either.
func asCombinedV1(line []byte) []byte { return withoutLastFields(line, 4) }

// withoutLastFields cuts the last n quoted fields off line.
func withoutLastFields(line []byte, n int) []byte {
	l := bytes.TrimSuffix(line, []byte("\n"))
	for range n {
		l = l[:bytes.LastIndex(l, []byte(` "`))]
	}
	return append(bytes.Clone(l), '\n')
}

// TestCombinedLogAcrossTheUpgrade: a combined access log that a gateway
// went on appending to across the upgrades that added the client's field
// and then the degraded, shed and screened fields (lines of an older
// format, then lines of a newer one, and the other way round after going
// back) reads whole: every line is replayed, none is unreadable, and the
// client's field of the later lines counts where it says.
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
	v3 := func(l []byte) []byte { return l }
	for _, c := range []struct {
		name          string
		before, after func([]byte) []byte
		clientField   bool // the later lines have the client's field
	}{
		{"v1 to v3", asCombinedV1, v3, true},
		{"v3 to v1", v3, asCombinedV1, false},
		{"v2 to v3", asCombinedV2, v3, true},
		{"v3 to v2", v3, asCombinedV2, true},
		{"v1 to v2", asCombinedV1, asCombinedV2, true},
	} {
		var b []byte
		// Three of the proxy's own, then three forwarded for an address
		// that cannot be read: the gateway counted them apart.
		for i := range 3 {
			b = append(b, c.before(line(i, ""))...)
		}
		for i := 3; i < 6; i++ {
			key := "unknown@192.0.2.9"
			if !c.clientField {
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
		if !c.clientField {
			wantDenied = 3
		}
		if r.Requests != 6 || r.Logs[0].Skipped != 0 || r.Denied != wantDenied {
			t.Errorf("%s: %d requests, %d unreadable, %d denied; want 6, none and %d\n%s", c.name, r.Requests, r.Logs[0].Skipped,
				r.Denied, wantDenied, b)
		}
	}
}
