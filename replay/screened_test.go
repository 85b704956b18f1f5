package replay

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/floodgate/floodgate/accesslog"
	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/penalty"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memstore"
	"github.com/golang-jwt/jwt/v5"
)

// boxKeeper screens the gateway's requests with a penalty box, as the
// console's keeper does: a banned client is answered 429 before any limit.
type boxKeeper struct{ box *penalty.Box }

func (k boxKeeper) Screen(m *gateway.Match) (int, time.Duration) {
	if _, until, banned := k.box.Banned(m.ClientKey, m.KeyID, m.User); banned {
		return http.StatusTooManyRequests, time.Until(until)
	}
	return 0, 0
}

func (k boxKeeper) Outcome(ctx context.Context, within time.Duration, m *gateway.Match, refused bool, status int) {
	var by policy.Identities
	if refused {
		by = m.RefusedBy
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), within)
	defer cancel()
	k.box.Outcome(ctx, m.ClientKey, m.KeyID, m.User, refused, by, status)
}

// ScreensUsers: a rule keyed by user has the gateway verify tokens for it.
func (k boxKeeper) ScreensUsers() bool {
	for _, r := range k.box.Rules() {
		if r.Key == config.BanKeyUser {
			return true
		}
	}
	return false
}

// A request the gateway's gatekeeper refused (a banned client address or
// user) charged no limit, and a replay of the access log charges none for
// it: the requests after it are decided as the gateway decided them. Here
// a client banned for spending its own limit sends three requests during
// its ban; another client's three requests then fit the global limit of 3,
// at the gateway and in the replay. A banned user is refused after the
// limits that need no user were looked at (nothing charged), and is no
// different.
func TestScreenedRequestsNotChargedInAReplay(t *testing.T) {
	tok := "Bearer " + flowToken(t, "ana", flowSecret)
	for _, c := range []struct {
		name, banKey, ownLimit string
		banned                 map[string]string // the fields of the banned client's requests
		bannedKey              [3]string         // its keys in the penalty box
	}{
		{"client address", "client_ip", "{name: own, algorithm: sliding_log, limit: 1, window: 1h, key: client_ip, match: {routes: [own]}}",
			map[string]string{"X-Forwarded-For": "192.0.2.1"}, [3]string{"192.0.2.1", "", ""}},
		{"user", "user", "{name: own, algorithm: sliding_log, limit: 1, window: 1h, key: user, match: {routes: [own]}}",
			map[string]string{"X-Forwarded-For": "192.0.2.1", "Authorization": tok}, [3]string{"", "", "ana"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			testScreenedNotCharged(t, c.banKey, c.ownLimit, c.banned, c.bannedKey)
		})
	}
}

func testScreenedNotCharged(t *testing.T, banKey, ownLimit string, banned map[string]string, bannedKey [3]string) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "secret.txt"), []byte(flowSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "screened.yaml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(`version: 1
server:
  trusted_proxies: [127.0.0.1/32]
  user: {jwt: {alg: HS256, key_file: secret.txt}}
  bans:
    - {name: abuse, key: %s, after: 1, within: 1h, ban: 1h}
routes:
  - {name: own, match: {paths: ["/own"]}, upstream: %q}
  - {name: other, match: {paths: ["/**"]}, upstream: %[2]q}
limits:
  - %s
  - {name: global, algorithm: sliding_log, limit: 3, window: 1h, key: global, match: {routes: [other]}}
`, banKey, up.URL, ownLimit)), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Compile(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	box, err := penalty.New(p.File().Server.Bans, penalty.Options{Backend: penalty.NewMemory(0, nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
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
	g, err := gateway.New(gateway.Options{Matcher: pm, Engine: limiter.New(st, limiter.Options{}), AccessLog: log, Gatekeeper: boxKeeper{box}})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(g)
	defer front.Close()

	n := 0
	send := func(path string, hdr map[string]string) int {
		req, _ := http.NewRequest("GET", front.URL+path, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		n++
		log.wait(t, n)
		return resp.StatusCode
	}
	got := []int{send("/own", banned), send("/own", banned)}
	// The refusal is an offence: wait until it is counted and the client
	// banned.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, _, ok := box.Banned(bannedKey[0], bannedKey[1], bannedKey[2]); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the client was not banned")
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i := range 3 {
		// A token of the banned user this instance has not verified yet
		// (the user is known only once the limits that need none looked).
		hdr := maps.Clone(banned)
		if _, ok := hdr["Authorization"]; ok {
			hdr["Authorization"] = "Bearer " + freshToken(t, "ana", i)
		}
		got = append(got, send("/other", hdr))
	}
	for range 3 {
		got = append(got, send("/other", map[string]string{"X-Forwarded-For": "192.0.2.2"}))
	}
	want := []int{200, 429, 429, 429, 429, 200, 200, 200}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("gateway answered %v, want %v", got, want)
	}

	var recs []*accesslog.Record
	for i := range want {
		lr := log.get(i)
		recs = append(recs, &lr)
	}
	eachLogFormat(t, recs, func(t *testing.T, logPath string) {
		r := mustRun(t, Options{Policy: p, Logs: []string{logPath}})
		if gl := limitReport(t, r, "global"); gl.Denied != 0 || gl.Allowed != 3 {
			logFile, _ := os.ReadFile(logPath)
			t.Errorf("global limit in the replay: %d allowed, %d denied; want 3 and 0, as at the gateway (the banned client's requests charged nothing)\n%s",
				gl.Allowed, gl.Denied, logFile)
		}
		if a := r.Agreement; a.Matched != a.Compared {
			t.Errorf("replay agreement: %d of %d compared match: %+v", a.Matched, a.Compared, a.Mismatches)
		}
	})
}

// freshToken signs a token for user that no other call signs (its jti).
func freshToken(t *testing.T, user string, n int) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": user, "jti": fmt.Sprint("fresh-", n),
		"exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(flowSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}
