package replay

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/accesslog"
)

var t0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

func sampleRecord() *accesslog.Record {
	return &accesslog.Record{
		Time:     t0.Add(123456 * time.Microsecond),
		ClientIP: netip.MustParseAddr("203.0.113.7"),
		Method:   "GET", Host: "api.example.com", Path: "/students/9 x", Proto: "HTTP/1.1",
		Status: 429, Bytes: 32, Duration: 2500 * time.Microsecond,
		Key: "partner-1", User: "ana \"the\" admin", Route: "students", Limit: "stage.dev",
		Decision: accesslog.Deny, RetryAfter: time.Second, UserAgent: "curl/8",
	}
}

func parseOne(t *testing.T, p lineParser, line string) Record {
	t.Helper()
	var r Record
	if err := p.parse([]byte(strings.TrimRight(line, "\n")), &r); err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	return r
}

func checkParsed(t *testing.T, r Record, want *accesslog.Record, withHost bool) {
	t.Helper()
	if r.Time != want.Time.UnixNano() || r.ClientIP != want.ClientIP || r.Method != want.Method || r.Path != want.Path ||
		r.Status != want.Status || r.Duration != want.Duration || r.Key != want.Key || r.User != want.User ||
		r.Limit != want.Limit || r.Logged != LoggedDeny || (withHost && r.Host != want.Host) {
		t.Errorf("parsed %+v\nfrom %+v", r, want)
	}
}

// TestParseOwnFormats reads back what the access log writes, in both
// formats.
func TestParseOwnFormats(t *testing.T) {
	t.Parallel()
	want := sampleRecord()
	in := newInterner()
	checkParsed(t, parseOne(t, newJSONParser(in), string(accesslog.AppendJSON(nil, want))), want, true)
	tp, err := compileNginx(accesslog.CombinedLogFormat, DefaultDeniedStatuses, in)
	if err != nil {
		t.Fatal(err)
	}
	checkParsed(t, parseOne(t, tp, string(accesslog.AppendCombined(nil, want))), want, false)
	if tp.resolution() != time.Microsecond {
		t.Errorf("combined resolution %v", tp.resolution())
	}
	// An allowed request, a degraded one, and none.
	for _, c := range []struct {
		d        accesslog.Decision
		degraded string
		logged   Logged
	}{{accesslog.Allow, "", LoggedAllow}, {accesslog.None, "", LoggedAllow}, {accesslog.Allow, "deadline", LoggedDegraded}} {
		r := sampleRecord()
		r.Decision, r.Degraded = c.d, c.degraded
		if got := parseOne(t, newJSONParser(in), string(accesslog.AppendJSON(nil, r))); got.Logged != c.logged {
			t.Errorf("%v %q: logged %v", c.d, c.degraded, got.Logged)
		}
	}
}

func TestParseJSONVariants(t *testing.T) {
	t.Parallel()
	p := newJSONParser(newInterner())
	// Unknown fields of any shape are skipped; time may be Unix seconds;
	// escapes are decoded.
	r := parseOne(t, p, `{"time":`+strconv.FormatInt(t0.Unix(), 10)+`.5,"extra":{"a":[1,"}"]},"ip":"::ffff:10.0.0.1","method":"POST","path":"/a\"b\u00e9","status":200,"decision":"allow","header:x-tenant":"t1"}`)
	if r.Time != t0.UnixNano()+5e8 || r.ClientIP.String() != "10.0.0.1" ||
		r.Path != "/a\"b\u00e9" || r.Logged != LoggedAllow || len(r.Headers) != 1 || r.Headers[0] != (Header{"X-Tenant", "t1"}) {
		t.Errorf("%+v", r)
	}
	if p.resolution() != 100*time.Millisecond {
		t.Errorf("resolution %v after a time with one decimal", p.resolution())
	}
	for _, bad := range []string{`{"ip":"1.2.3.4"}`, `{"time":"yesterday"}`, `{"time":"2026-11-30T10:00:00Z","ip":"1.2.3"}`,
		`[1,2]`, `{"time":"2026-11-30T10:00:00Z","status":"x"}`, `{"time":"2026-11-30T10:00:00Z","path":"/a`} {
		var r Record
		if err := p.parse([]byte(bad), &r); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
	var r2 Record
	if err := p.parse([]byte("   "), &r2); err != errSkip {
		t.Errorf("blank line: %v", err)
	}
}

func TestParseTimes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want time.Time
		dig  int
	}{
		{"2026-11-30T10:00:00Z", t0, 0},
		{"2026-11-30T10:00:00.123456Z", t0.Add(123456 * time.Microsecond), 6},
		{"2026-11-30T11:30:00.5+01:30", t0.Add(500 * time.Millisecond), 1},
		{"2026-11-30 10:00:00.000000001Z", t0.Add(1), 9},
		{"2026-11-30T05:00:00-05:00", t0, 0},
		{"2024-02-29T00:00:00Z", time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC), 0},
		{"1999-12-31T23:59:59Z", time.Date(1999, 12, 31, 23, 59, 59, 0, time.UTC), 0},
	} {
		ns, dig, ok := parseRFC3339([]byte(c.in))
		if !ok || ns != c.want.UnixNano() || dig != c.dig {
			t.Errorf("%s: %v %d %v, want %v", c.in, time.Unix(0, ns).UTC(), dig, ok, c.want)
		}
	}
	for _, bad := range []string{"2026-13-01T00:00:00Z", "2026-11-30T10:00:00", "today"} {
		if _, _, ok := parseRFC3339([]byte(bad)); ok {
			t.Errorf("%s parsed", bad)
		}
	}
	for _, c := range []struct {
		in   string
		want time.Time
	}{{"30/Nov/2026:10:00:00 +0000", t0}, {"30/Nov/2026:11:00:00 +0100", t0}, {"01/Mar/2024:00:00:00 -0800", time.Date(2024, 3, 1, 8, 0, 0, 0, time.UTC)}} {
		ns, ok := parseTimeLocal([]byte(c.in))
		if !ok || ns != c.want.UnixNano() {
			t.Errorf("%s: %v", c.in, time.Unix(0, ns).UTC())
		}
	}
	if _, ok := parseTimeLocal([]byte("30/Foo/2026:10:00:00 +0000")); ok {
		t.Error("a bad month parsed")
	}
	if ns, d, ok := parseSeconds([]byte(strconv.FormatInt(t0.Unix(), 10) + ".123")); !ok || ns != t0.UnixNano()+123e6 || d != 3 {
		t.Errorf("seconds: %d %d %v", ns, d, ok)
	}
}

func TestParseNginx(t *testing.T) {
	t.Parallel()
	in := newInterner()
	comb, err := compileNginx(NginxCombined, DefaultDeniedStatuses, in)
	if err != nil {
		t.Fatal(err)
	}
	r := parseOne(t, comb, `203.0.113.9 - - [30/Nov/2026:10:00:00 +0000] "GET /students/9?x=1 HTTP/1.1" 503 197 "-" "curl/8.5.0"`)
	if r.Time != t0.UnixNano() || r.ClientIP.String() != "203.0.113.9" || r.Method != "GET" || r.Path != "/students/9" ||
		r.Status != 503 || r.Logged != LoggedDeny || r.User != "" {
		t.Errorf("combined: %+v", r)
	}
	if comb.resolution() != time.Second {
		t.Errorf("combined resolution %v", comb.resolution())
	}
	r = parseOne(t, comb, `::1 - bob [30/Nov/2026:10:00:00 +0000] "POST /a%20b/\x22q HTTP/2.0" 200 0 "-" "-"`)
	if r.Path != `/a b/"q` || r.User != "bob" || r.Logged != LoggedAllow || r.ClientIP.String() != "::1" {
		t.Errorf("escapes: %+v", r)
	}
	main, err := compileNginx(NginxMain, []int{429}, in)
	if err != nil {
		t.Fatal(err)
	}
	r = parseOne(t, main, `10.0.0.1 - - [30/Nov/2026:10:00:00 +0000] "GET / HTTP/1.1" 503 0 "-" "-" "198.51.100.1, 10.0.0.9"`)
	if r.Logged != LoggedAllow || len(r.Headers) != 1 || r.Headers[0].Name != "X-Forwarded-For" {
		t.Errorf("main with 429 only: %+v", r)
	}
	// A log_format with $msec and $request_time: the arrival is msec minus
	// request_time; a key header is kept as a header.
	custom, err := compileNginx(`$remote_addr [$time_local] "$request" $status $request_time $msec "$http_x_api_key"`, DefaultDeniedStatuses, in)
	if err != nil {
		t.Fatal(err)
	}
	r = parseOne(t, custom, `203.0.113.9 [30/Nov/2026:10:00:01 +0000] "GET /x HTTP/1.1" 429 0.250 `+strconv.FormatInt(t0.Unix()+1, 10)+`.250 "secret"`)
	if r.Time != t0.Add(time.Second).UnixNano() || r.Duration != 250*time.Millisecond || r.Logged != LoggedDeny ||
		len(r.Headers) != 1 || r.Headers[0] != (Header{"X-Api-Key", "secret"}) {
		t.Errorf("custom: %+v", r)
	}
	if custom.resolution() != time.Millisecond {
		t.Errorf("custom resolution %v", custom.resolution())
	}
	for _, bad := range []string{
		`203.0.113.9 - - [30/Nov/2026:10:00:00 +0000] "GET /students/9 HTTP/1.1" 503 197 "-" "curl" extra`,
		`203.0.113.9 - - [yesterday] "GET / HTTP/1.1" 200 0 "-" "-"`,
		`203.0.113.9 - - [30/Nov/2026:10:00:00 +0000] "\x16\x03\x01" 400 0 "-" "-"`,
		`not a log line`,
	} {
		var r Record
		if err := comb.parse([]byte(bad), &r); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
	for _, bad := range []string{`$remote_addr$remote_user [$time_local] "$request"`, `$remote_addr "$request"`, `[$time_local] $status`} {
		if _, err := compileNginx(bad, nil, in); err == nil {
			t.Errorf("format %q compiled", bad)
		}
	}
}

func TestParseEnvoy(t *testing.T) {
	t.Parallel()
	in := newInterner()
	e, err := compileEnvoy(EnvoyDefault+"\n", DefaultDeniedStatuses, in)
	if err != nil {
		t.Fatal(err)
	}
	r := parseOne(t, e, `[2026-11-30T10:00:00.250Z] "GET /api/v1/items?page=2 HTTP/1.1" 429 RL 0 18 3 - "198.51.100.7,10.1.2.3" "curl/8" "8f2c" "api.example.com" "-"`)
	if r.Time != t0.Add(250*time.Millisecond).UnixNano() || r.Method != "GET" || r.Path != "/api/v1/items" || r.Status != 429 ||
		r.Logged != LoggedDeny || r.Duration != 3*time.Millisecond || r.Host != "api.example.com" || r.ClientIP.String() != "10.1.2.3" {
		t.Errorf("envoy: %+v", r)
	}
	if e.resolution() != time.Millisecond {
		t.Errorf("envoy resolution %v", e.resolution())
	}
	custom, err := compileEnvoy(`%START_TIME% %DOWNSTREAM_REMOTE_ADDRESS% %REQ(:METHOD)% %REQ(:PATH)% %RESPONSE_CODE% %REQ(X-API-KEY)% 100%%`, nil, in)
	if err != nil {
		t.Fatal(err)
	}
	r = parseOne(t, custom, `2026-11-30T10:00:00.000Z 192.0.2.1:51234 POST /login 200 k-raw 100%`)
	if r.ClientIP.String() != "192.0.2.1" || r.Method != "POST" || len(r.Headers) != 1 || r.Headers[0].Value != "k-raw" {
		t.Errorf("envoy custom: %+v", r)
	}
}

func TestParseCSV(t *testing.T) {
	t.Parallel()
	in := newInterner()
	p, err := newCSVParser([]byte("Timestamp,Client_IP,method,url,status,duration_ms,key,user,decision,header:X-Tenant,ignored"), []int{429}, in)
	if err != nil {
		t.Fatal(err)
	}
	r := parseOne(t, p, `2026-11-30T10:00:00.5Z,203.0.113.1,get,/a%2Fb?q=1,429,1.5,k1,"ana, the admin",deny,t1,x`)
	if r.Time != t0.Add(500*time.Millisecond).UnixNano() || r.ClientIP.String() != "203.0.113.1" || r.Method != "GET" ||
		r.Path != "/a/b" || r.Duration != 1500*time.Microsecond || r.Key != "k1" || r.User != "ana, the admin" ||
		r.Logged != LoggedDeny || r.Headers[0] != (Header{"X-Tenant", "t1"}) {
		t.Errorf("csv: %+v", r)
	}
	r = parseOne(t, p, strconv.FormatInt(t0.Unix(), 10)+`,-,POST,/login,503,,,,,,`)
	if r.Time != t0.UnixNano() || r.ClientIP.IsValid() || r.Logged != LoggedAllow {
		t.Errorf("csv without a decision: %+v", r)
	}
	if _, err := newCSVParser([]byte("ip,method,path"), nil, in); err == nil {
		t.Error("a header without time")
	}
	var bad Record
	if err := p.parse([]byte("2026-11-30T10:00:00Z,1.2.3.4"), &bad); err == nil {
		t.Error("a short row")
	}
}

func TestDetect(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, first, format, want string }{
		{"a.log", `{"time":"x"}`, "", FormatJSON},
		{"a.csv.gz", "time,ip,method,path", "", FormatCSV},
		{"a.log", "time,ip,method,path", "", FormatCSV},
		{"a.log", `[2026-11-30T10:00:00.250Z] "GET / HTTP/1.1" 200`, "", FormatEnvoy},
		{"a.log", `1.2.3.4 - - [30/Nov/2026:10:00:00 +0000] "GET / HTTP/1.1" 200 0 "-" "-"`, "", FormatNginx},
		{"a.log", `anything`, `$remote_addr [$time_local] "$request"`, FormatNginx},
		{"a.log", `anything`, `%START_TIME% %REQ(:METHOD)%`, FormatEnvoy},
	} {
		if got := detect(c.name, []byte(c.first), c.format); got != c.want {
			t.Errorf("%s %q: %s, want %s", c.name, c.first, got, c.want)
		}
	}
	fg := string(accesslog.AppendCombined(nil, sampleRecord()))
	for _, c := range []struct{ line, want string }{
		{strings.TrimSpace(fg), accesslog.CombinedLogFormat},
		{`1.2.3.4 - - [30/Nov/2026:10:00:00 +0000] "GET / HTTP/1.1" 200 0 "-" "-" "-"`, NginxMain},
		{`1.2.3.4 - - [30/Nov/2026:10:00:00 +0000] "GET / HTTP/1.1" 200 0 "-" "-"`, NginxCombined},
	} {
		if got := guessTemplate(FormatNginx, []byte(c.line), nil); got != c.want {
			t.Errorf("%s: %s", c.line, got)
		}
	}
}
