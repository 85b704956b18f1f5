package replay

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/accesslog"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// TestReplayCountsUnreadableHopsApart: a trusted proxy's requests and
// those it forwards for a client whose address cannot be read are counted
// apart by the gateway (the latter as "unknown@" the proxy); its access
// log says so, and a replay of the log counts them where the gateway did,
// never under the proxy's own address.
func TestReplayCountsUnreadableHopsApart(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	p := compilePolicy(t, `version: 1
server:
  trusted_proxies: [127.0.0.1/32]
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: "`+up.URL+`"}
limits:
  - {name: per-client, algorithm: sliding_log, limit: 2, window: 1h}
`)
	st, err := memstore.New(memstore.Options{Now: func() int64 { return time.Now().UnixNano() }, SweepInterval: -1, SnapshotInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	pm, err := gateway.NewPolicyMatcher(gateway.Fixed(p), gateway.PolicyMatcherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	log := &recordLog{}
	g, err := gateway.New(gateway.Options{Matcher: pm, Engine: limiter.New(st, gateway.EngineOptions(p.Server())), AccessLog: log})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(g)
	defer front.Close()
	// Two of the proxy's own, two forwarded for "garbage": each counter
	// takes two.
	var logFile, combined, combinedV1 []byte
	for i, xff := range []string{"", "", "garbage", "garbage"} {
		req, _ := http.NewRequest("GET", front.URL+"/x", nil)
		if xff != "" {
			req.Header.Set("X-Forwarded-For", xff)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
		log.wait(t, i+1)
		lr := log.get(i)
		logFile = accesslog.AppendJSON(logFile, &lr)
		line := accesslog.AppendCombined(nil, &lr)
		combined = append(combined, line...)
		// As written before the client's field.
		combinedV1 = append(combinedV1, asCombinedV1(line)...)
	}
	if !strings.Contains(string(logFile), `"client":"unknown@127.0.0.1"`) {
		t.Errorf("the log does not say whom the limits counted:\n%s", logFile)
	}
	path := filepath.Join(t.TempDir(), "access.log")
	if err := os.WriteFile(path, logFile, 0o600); err != nil {
		t.Fatal(err)
	}
	r := mustRun(t, Options{Policy: p, Logs: []string{path}})
	if a := r.Agreement; a.Compared != 4 || a.Matched != a.Compared {
		t.Errorf("replay agreement: %d of %d compared match: %+v", a.Matched, a.Compared, a.Mismatches)
	}
	// The combined format says it too; one written before it did is still
	// read, every line of it.
	cpath := filepath.Join(t.TempDir(), "access.combined.log")
	if err := os.WriteFile(cpath, combined, 0o600); err != nil {
		t.Fatal(err)
	}
	r = mustRun(t, Options{Policy: p, Logs: []string{cpath}})
	if a := r.Agreement; a.Compared != 4 || a.Matched != a.Compared {
		t.Errorf("replay of the combined log: %d of %d compared match: %+v\n%s", a.Matched, a.Compared, a.Mismatches, combined)
	}
	v1path := filepath.Join(t.TempDir(), "access.v1.log")
	if err := os.WriteFile(v1path, combinedV1, 0o600); err != nil {
		t.Fatal(err)
	}
	r = mustRun(t, Options{Policy: p, Logs: []string{v1path}})
	if r.Requests != 4 || r.Logs[0].Skipped != 0 {
		t.Errorf("a combined log without the client's field: %d requests, %d unreadable\n%s", r.Requests, r.Logs[0].Skipped, combinedV1)
	}
}
