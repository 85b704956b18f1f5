package replay

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestGatewaysOwn400sNotCountedAsAllowed attacks the counts of a
// replay's report with the requests the gateway answers 400 itself,
// before any limit: a path whose escaped slash would move it to another
// route, and a field sent twice that a limit is keyed by. No limit
// allowed them, and the report must not say one did (nor that no limit
// applied): they are counted apart, from the gateway's JSON access log
// and when the replay's own gateway answers them so (an NGINX log, which
// holds the target as sent).
func TestGatewaysOwn400sNotCountedAsAllowed(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") }))
	defer up.Close()
	p := compilePolicy(t, fmt.Sprintf(`version: 1
routes:
  - {name: files, match: {paths: ["/files/{id}"]}, upstream: %[1]q}
  - {name: all, match: {paths: ["/**"]}, upstream: %[1]q}
limits:
  - {name: tenant, rate: 5, per: 1h, burst: 5, key: "header:X-Tenant", match: {paths: ["/api/**"]}}
  - {name: per-ip, rate: 1, per: 1h, burst: 1, key: client_ip, match: {paths: ["/api/**"]}}
`, up.URL))
	url, log, _ := liveGateway(t, p)
	var codes []int
	for i, hdr := range [][]string{{}, {"X-Tenant", "a", "X-Tenant", "b"}, {"X-Tenant", "a"}, {"X-Tenant", "a"}} {
		path := "/api/x"
		if i == 0 {
			path = "/files/a%2Fb"
		}
		req, err := http.NewRequest("GET", url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for j := 0; j+1 < len(hdr); j += 2 {
			req.Header.Add(hdr[j], hdr[j+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
		log.wait(t, i+1)
	}
	if fmt.Sprint(codes) != "[400 400 200 429]" {
		t.Fatalf("the gateway answered %v, want [400 400 200 429]", codes)
	}
	file := writeAccessLog(t, log, len(codes))
	r := mustRun(t, Options{Policy: p, Logs: []string{file}, Compare: p})
	if r.Requests != 4 || r.Allowed != 1 || r.Unlimited != 0 || r.Denied != 1 || r.Answered != 2 {
		t.Errorf("JSON log: %d requests: %d allowed (%d with no limit), %d denied, %d answered before any limit; want 4: 1 allowed (0), 1 denied, 2 answered",
			r.Requests, r.Allowed, r.Unlimited, r.Denied, r.Answered)
	}
	if a := r.Agreement; a == nil || a.Compared != 4 || a.Matched != 4 {
		t.Errorf("agreement with the log %+v: want all 4 decided as the gateway did", a)
	}
	if c := r.Compare; c == nil || c.Allowed != 1 || c.Denied != 1 || c.Answered != 2 || c.Flips != 0 {
		t.Errorf("comparison with the same policy %+v: want 1 allowed, 1 denied, 2 answered, no flip", c)
	}
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "4 requests: 1 allowed, 1 denied (25.0%), 2 answered before any limit") {
		t.Errorf("text report:\n%s\nwant its counts to set the 400s apart", text.String())
	}

	// An NGINX log holds the target as sent; the replay's own gateway
	// answers the escaped slash 400.
	at := t0
	line := fmt.Sprintf(`192.0.2.7 - - [%s] "GET /files/a%%2Fb HTTP/1.1" 200 3 "-" "curl/8"`+"\n", at.Format("02/Jan/2006:15:04:05 -0700"))
	line += fmt.Sprintf(`192.0.2.7 - - [%s] "GET /files/b HTTP/1.1" 200 3 "-" "curl/8"`+"\n", at.Add(time.Second).Format("02/Jan/2006:15:04:05 -0700"))
	path := filepath.Join(t.TempDir(), "nginx.log")
	if err := os.WriteFile(path, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	r = mustRun(t, Options{Policy: p, Logs: []string{path}, Format: "nginx"})
	if r.Requests != 2 || r.Allowed != 1 || r.Answered != 1 {
		t.Errorf("NGINX log: %d requests: %d allowed, %d answered before any limit; want 2: 1 allowed, 1 answered (400)",
			r.Requests, r.Allowed, r.Answered)
	}
}
