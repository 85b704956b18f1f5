package config

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
)

var update = flag.Bool("update", false, "rewrite the expected messages of testdata/invalid")

// TestInvalidGolden loads every file of testdata/invalid and compares the
// problems reported with the file's .err companion.
func TestInvalidGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "invalid", "*.yaml"))
	if err != nil || len(files) < 20 {
		t.Fatalf("want at least 20 invalid files, got %d (%v)", len(files), err)
	}
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".yaml"), func(t *testing.T) {
			_, err := Load(path)
			if err == nil {
				t.Fatal("invalid file accepted")
			}
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("error is %T, want config.Errors: %v", err, err)
			}
			for _, e := range errs {
				if e.File != path {
					t.Errorf("problem names file %q, want %q", e.File, path)
				}
			}
			got := err.Error() + "\n"
			want := strings.TrimSuffix(path, ".yaml") + ".err"
			if *update {
				if err := os.WriteFile(want, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			data, err := os.ReadFile(want)
			if err != nil {
				t.Fatalf("no expected messages (run go test -update): %v", err)
			}
			if got != string(data) {
				t.Errorf("messages differ\n got:\n%s\nwant:\n%s", got, data)
			}
		})
	}
}

func TestErrorsReportedAtOnce(t *testing.T) {
	_, err := Parse("many.yaml", []byte(`
server:
  ipv6_prefix: 200
limits:
  - name: a
    rate: 0
  - name: b
    rate: 5
    burst: 0
  - name: c
    algorithm: fixed_window
    limit: 5
`))
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("want Errors, got %v", err)
	}
	want := []string{
		"many.yaml:3:16: server.ipv6_prefix:",
		"many.yaml:6:11: limits[0].rate:",
		"many.yaml:9:12: limits[1].burst:",
		"many.yaml:10:5: limits[2].window:",
	}
	if len(errs) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%v", len(errs), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(errs[i].Error(), w) {
			t.Errorf("problem %d = %q, want prefix %q", i, errs[i].Error(), w)
		}
	}
}

func TestLoadExample(t *testing.T) {
	f, err := Load(filepath.Join("..", "examples", "school.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Server.StoreKind(); got != "memory" {
		t.Errorf("store kind %q", got)
	}
	if f.Server.User.JWT == nil || f.Server.User.JWT.KeyPath != filepath.Join("..", "examples", "demo-jwt-secret.txt") {
		t.Errorf("jwt key path not resolved against the file: %+v", f.Server.User.JWT)
	}
	var dev *Stage
	for i := range f.Stages {
		if f.Stages[i].Name == "dev" {
			dev = &f.Stages[i]
		}
	}
	if dev == nil || dev.Compiled.Rate != 5 || dev.Compiled.Burst != 5 || dev.Compiled.Per != time.Second ||
		dev.Compiled.Algorithm != floodgate.TokenBucket {
		t.Errorf("stage dev compiled to %+v", dev)
	}
	var basic *Plan
	for i := range f.Plans {
		if f.Plans[i].Name == "partner-basic" {
			basic = &f.Plans[i]
		}
	}
	if basic == nil {
		t.Fatal("no plan partner-basic")
	}
	if basic.Throttle.Rate != 2 || basic.Throttle.Burst != 2 {
		t.Errorf("partner-basic throttle %+v", basic.Throttle)
	}
	q := basic.QuotaLimit
	if q.Algorithm != floodgate.Quota || q.Max != 1000 || q.Period != floodgate.Day || q.Location.String() != "Asia/Kolkata" {
		t.Errorf("partner-basic quota %+v", q)
	}
	if f.Keys[0].SHA256 != HashKey("key-partner-1") {
		t.Errorf("partner-1 hash %s is not the sha256 of the demo key", f.Keys[0].SHA256)
	}
}

func TestDefaults(t *testing.T) {
	f, err := Parse("min.yaml", []byte("limits:\n  - name: a\n    rate: 7\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := f.Server
	if s.Listen != DefaultListen || s.Store != "memory" || s.StoreTimeout != floodgate.DefaultStoreTimeout ||
		s.Instances != 1 || !s.Headers.RateLimit || s.Headers.XRateLimit || s.IPv6Prefix != 64 ||
		s.APIKeyHeader != "x-api-key" || s.Upstream.Timeout != 30*time.Second {
		t.Errorf("defaults: %+v", s)
	}
	l := f.Limits[0]
	if l.Compiled.Algorithm != floodgate.TokenBucket || l.Compiled.Burst != 7 || l.Compiled.Per != time.Second ||
		l.Cost != 1 || len(l.Key.Parts) != 1 || l.Key.Parts[0] != KeyClientIP || l.Scope != ScopeRoute {
		t.Errorf("limit defaults: %+v", l)
	}
}

func TestStoreURLs(t *testing.T) {
	for _, tc := range []struct{ store, kind string }{
		{"memory", "memory"},
		{"redis://127.0.0.1:6379/0", "redis"},
		{"rediss://cache:6380", "rediss"},
		{"redis+cluster://a:7000,b:7001", "redis+cluster"},
		{"redis+sentinel://a:26379,b:26379/mymaster", "redis+sentinel"},
		{"rediss+cluster://a:7000,b:7001", "rediss+cluster"},
		{"redis+unix:///var/run/redis.sock", "redis+unix"},
	} {
		f, err := Parse("s.yaml", []byte("server:\n  store: \""+tc.store+"\"\n"))
		if err != nil {
			t.Errorf("%s: %v", tc.store, err)
			continue
		}
		if got := f.Server.StoreKind(); got != tc.kind {
			t.Errorf("%s: kind %q, want %q", tc.store, got, tc.kind)
		}
	}
	// What the store cannot open, the configuration refuses: the
	// store's own check decides.
	for _, bad := range []string{
		"redis+sentinel://a:26379",                  // no master
		"redis+sentinel://mymaster@a:26379,b:26379", // the master as a user name
		"redis://a:6379,b:6379",                     // one host only
		"redis+cluster://a:7000/1",                  // a cluster has only database 0
		"redis://a:6379/?db=1",                      // no query parameters
		"memcache://a:11211",                        // no such store
	} {
		if _, err := Parse("s.yaml", []byte("server:\n  store: \""+bad+"\"\n")); err == nil {
			t.Errorf("store %q accepted", bad)
		} else if !strings.Contains(err.Error(), "server.store") {
			t.Errorf("store %q: %v, want an error at server.store", bad, err)
		}
	}
}

func TestQuotaStartAndOffset(t *testing.T) {
	f, err := Parse("q.yaml", []byte(`
plans:
  - name: p
    quota: {limit: 100, period: MONTH, anchor_day: 15, offset: 40, start: 2026-03-15, time_zone: Asia/Kolkata}
`))
	if err != nil {
		t.Fatal(err)
	}
	q := f.Plans[0].QuotaLimit
	loc, _ := time.LoadLocation("Asia/Kolkata")
	if !q.Start.Equal(time.Date(2026, 3, 15, 0, 0, 0, 0, loc)) || q.Offset != 40 || q.AnchorDay != 15 {
		t.Errorf("quota %+v", q)
	}
}

func TestTrustedProxies(t *testing.T) {
	f, err := Parse("t.yaml", []byte("server:\n  trusted_proxies: [10.0.0.0/8, 192.0.2.7, '2001:db8::/32']\n  forwarded_header: Forwarded\n"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range f.Server.TrustedProxyPrefixes {
		got = append(got, p.String())
	}
	if strings.Join(got, " ") != "10.0.0.0/8 192.0.2.7/32 2001:db8::/32" {
		t.Errorf("prefixes %v", got)
	}
	if o := f.Server.IdentityOptions(); len(o.TrustedProxies) != 3 || o.IPv6Prefix != 64 || o.ForwardedHeader != "Forwarded" {
		t.Errorf("identity options %+v", o)
	}
}

func TestPosition(t *testing.T) {
	f, err := Parse("p.yaml", []byte("limits:\n  - name: a\n    rate: 7\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p := f.Position("limits[0].rate"); p != (Pos{Line: 3, Column: 11}) {
		t.Errorf("rate at %v", p)
	}
	if p := f.Position("limits[0].burst"); p != (Pos{Line: 2, Column: 5}) {
		t.Errorf("unwritten burst at %v, want its limit's position", p)
	}
}

func TestHashKey(t *testing.T) {
	if got := HashKey("key-trial"); got != "efa928a8b832a86862991bd6259ec33c372293d7091105e1b00b235287e8f04a" {
		t.Errorf("HashKey = %s", got)
	}
}

func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "invalid", "*.yaml"))
	seeds = append(seeds, filepath.Join("..", "examples", "school.yaml"))
	for _, s := range seeds {
		if data, err := os.ReadFile(s); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte("a: &a [*a]"))
	f.Add([]byte("limits: [{name: x, key: {a: b}, delay: nodelay}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("fuzz.yaml", data)
		if err == nil && file == nil {
			t.Fatal("nil file without an error")
		}
		if err != nil {
			var errs Errors
			if !errors.As(err, &errs) || len(errs) == 0 {
				t.Fatalf("error %T without problems: %v", err, err)
			}
		}
	})
}

func TestAliasBomb(t *testing.T) {
	// A small file whose aliases name two million values: a thousand
	// routes, each the same route with two thousand paths.
	var b strings.Builder
	b.WriteString("routes:\n  - &r {name: r, match: {paths: [")
	for i := 0; i < 2000; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("/p")
	}
	b.WriteString("]}}\n")
	for i := 0; i < 1000; i++ {
		b.WriteString("  - *r\n")
	}
	done := make(chan error, 1)
	go func() {
		_, err := Parse("bomb.yaml", []byte(b.String()))
		done <- err
	}()
	select {
	case err := <-done:
		var errs Errors
		if !errors.As(err, &errs) || len(errs) != 1 || !strings.Contains(err.Error(), "once its aliases are expanded") {
			t.Errorf("got %.300v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("decoding did not finish")
	}
}

func TestManyProblemsCapped(t *testing.T) {
	var b strings.Builder
	b.WriteString("limits:\n")
	for i := 0; i < 1000; i++ {
		b.WriteString("  - {name: x, rate: 0}\n")
	}
	_, err := Parse("many.yaml", []byte(b.String()))
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != MaxErrors+1 {
		t.Fatalf("%d problems reported", len(errs))
	}
	if last := errs[len(errs)-1].Error(); last != "many.yaml: and 1799 more problems" {
		t.Errorf("last item %q", last)
	}
}

// TestListenerTLS: every listener that takes TLS takes a client CA
// (mutual TLS) and a name its clients' certificates must carry, and each
// needs what comes before it.
func TestListenerTLS(t *testing.T) {
	const rls = "  grpc_listen: :8081\n  rls_config: [r.yaml]\n"
	for text, want := range map[string]string{
		rls + "  grpc_tls_cert: c.pem\n  grpc_tls_key: k.pem\n  grpc_tls_client_ca: ca.pem\n  grpc_tls_client_san: envoy\n": "",
		"  api_listen: :9091\n  api_auth: none\n  api_tls_cert: c.pem\n  api_tls_key: k.pem\n  api_tls_client_ca: ca.pem\n": "",
		"  admin:\n    tls_cert: c.pem\n    tls_key: k.pem\n    tls_client_ca: ca.pem\n    tls_client_san: ops\n":           "",
		rls + "  grpc_tls_client_ca: ca.pem\n":                                         "server.grpc_tls_client_ca: grpc_tls_client_ca asks for client certificates over TLS",
		"  api_listen: :9091\n  api_auth: none\n  api_tls_cert: c.pem\n":               "server.api_tls_cert: api_tls_cert and api_tls_key go together",
		"  api_tls_cert: c.pem\n  api_tls_key: k.pem\n":                                "server.api_tls_cert: api_tls_cert needs api_listen",
		"  admin:\n    tls_cert: c.pem\n    tls_key: k.pem\n    tls_client_san: ops\n": "server.admin.tls_client_san: tls_client_san needs tls_client_ca",
	} {
		_, err := Parse("s.yaml", []byte("server:\n"+text))
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", text, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want %q", text, err, want)
		}
	}
}
