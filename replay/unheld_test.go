package replay

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/accesslog"
)

// TestLimitKeyedByAFieldTheLogLacksIsNamed attacks a replay of
// Floodgate's JSON access log through a policy with a limit keyed by a
// header field the log does not hold (header:X-Tenant): the gateway
// refused the tenant's third request, and the replay, which cannot know
// the tenant, lets it through. The report must say so, naming the limit
// and the field, rather than show the limit as seen by no request; a log
// that holds the field (a CSV's header:X-Tenant column) replays it, and
// the report names nothing.
func TestLimitKeyedByAFieldTheLogLacksIsNamed(t *testing.T) {
	p := compilePolicy(t, fmt.Sprintf(`version: 1
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: %q}
limits:
  - {name: tenant, rate: 1, per: 1h, burst: 2, key: "header:X-Tenant"}
  - {name: per-ip, rate: 100, per: 1s, burst: 100, key: client_ip}
`, okUpstream(t)))
	url, log, _ := liveGateway(t, p)
	var reqs []*http.Request
	for range 3 {
		req := newGet(t, url+"/x")
		req.Header.Set("X-Tenant", "acme")
		reqs = append(reqs, req)
	}
	sendAnswered(t, log, "[200 200 429]", reqs)
	r := mustRun(t, Options{Policy: p, Logs: []string{writeAccessLog(t, log, 3)}})
	if l := limitReport(t, r, "tenant"); fmt.Sprint(l.Unheld) != "[header:X-Tenant]" {
		t.Errorf("tenant: %+v; want it named as keyed by header:X-Tenant, which the log does not hold", l)
	}
	if l := limitReport(t, r, "per-ip"); len(l.Unheld) != 0 {
		t.Errorf("per-ip: %+v; it is keyed by nothing the log lacks", l)
	}
	var text, page bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if want := "(tenant is keyed by header:X-Tenant, which no line of the logs holds: replayed as if no request carried it)"; !strings.Contains(text.String(), want) {
		t.Errorf("text report:\n%s\nwant %q", text.String(), want)
	}
	if err := r.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page.String(), "which no line of the logs holds") {
		t.Errorf("the HTML report does not name the limit keyed by a field the log lacks")
	}

	// A CSV that holds the field replays the limit as the gateway decided.
	csv := "time,ip,method,path,header:X-Tenant\n"
	for i := range 3 {
		csv += fmt.Sprintf("%s,192.0.2.7,GET,/x,acme\n", t0.Add(time.Duration(i)*100*time.Millisecond).Format("2006-01-02T15:04:05.000Z07:00"))
	}
	path := filepath.Join(t.TempDir(), "app.csv")
	if err := os.WriteFile(path, []byte(csv), 0o600); err != nil {
		t.Fatal(err)
	}
	r = mustRun(t, Options{Policy: p, Logs: []string{path}})
	if l := limitReport(t, r, "tenant"); len(l.Unheld) != 0 || l.Seen != 3 || l.Denied != 1 {
		t.Errorf("tenant from a CSV holding the field: %+v; want 3 seen, 1 denied, nothing unheld", l)
	}
}

// TestHostRoutesFromACombinedLogAreNamed attacks a replay of Floodgate's
// combined access log, which holds no host, through a policy that routes
// by host: the gateway refused the third request to its host's route, and
// the replay, which cannot tell the host, matches no route for it. The
// report must say so; the JSON log, which holds the host, replays every
// request as the gateway decided it and names nothing.
func TestHostRoutesFromACombinedLogAreNamed(t *testing.T) {
	p := compilePolicy(t, fmt.Sprintf(`version: 1
routes:
  - {name: api, match: {hosts: [api.example.com]}, upstream: %[1]q}
  - {name: rest, match: {paths: ["/**"]}, upstream: %[1]q}
limits:
  - {name: api, rate: 1, per: 1h, burst: 2, key: client_ip, match: {routes: [api]}}
`, okUpstream(t)))
	url, log, _ := liveGateway(t, p)
	var reqs []*http.Request
	for range 3 {
		req := newGet(t, url+"/x")
		req.Host = "api.example.com"
		reqs = append(reqs, req)
	}
	sendAnswered(t, log, "[200 200 429]", reqs)
	var combined []byte
	for i := range 3 {
		lr := log.get(i)
		combined = accesslog.AppendCombined(combined, &lr)
	}
	path := filepath.Join(t.TempDir(), "access.log")
	if err := os.WriteFile(path, combined, 0o600); err != nil {
		t.Fatal(err)
	}
	r := mustRun(t, Options{Policy: p, Logs: []string{path}})
	if r.Requests != 3 || r.Logs[0].Skipped != 0 {
		t.Fatalf("combined log: %d requests, %d lines unreadable", r.Requests, r.Logs[0].Skipped)
	}
	if fmt.Sprint(r.Unheld) != "[host]" {
		t.Errorf("combined log: unheld %v; want [host], the policy routing by the host the log does not hold", r.Unheld)
	}
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if want := "(the policy matches routes or limits by host, which no line of the logs holds: replayed as if no request named one)"; !strings.Contains(text.String(), want) {
		t.Errorf("text report:\n%s\nwant %q", text.String(), want)
	}

	r = mustRun(t, Options{Policy: p, Logs: []string{writeAccessLog(t, log, 3)}})
	if len(r.Unheld) != 0 || r.Allowed != 2 || r.Denied != 1 {
		t.Errorf("JSON log: unheld %v, %d allowed, %d denied; want nothing unheld, 2 allowed, 1 denied", r.Unheld, r.Allowed, r.Denied)
	}
}
