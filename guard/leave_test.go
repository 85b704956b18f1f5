package guard_test

import (
	"bufio"
	"bytes"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/guard"
)

// What a charge costs a Guard's middleware when the client leaves at each
// point of the exchange, and when the handler fails: the handler is the
// upstream, so the costs are those floodgate serve charges for its
// upstream (docs/promises.md, "Charges and reservations"). A failed
// login counts once its status is known, whatever the client does next;
// a reservation goes back in full only when no answer began (a handler
// that panicked before its status, as an upstream that dropped its
// connection before it: serve's 502); concurrency slots always come back.

// leaveLimits are the limits of the tests: 3 failed logins an hour
// counted by outcome, 2 requests of /slot/** at once.
var leaveLimits = []guard.Limit{
	{Name: "login", Algorithm: floodgate.SlidingLog, Max: 3, Window: time.Hour, Methods: []string{"POST"},
		Paths: []string{"/login"}, CountOn: []int{401}, Key: "global"},
	{Name: "slots", Algorithm: floodgate.Concurrency, Max: 2, Paths: []string{"/slot/**"}, Key: "global"},
}

// leaveHandler is the service: the request's X-Do says how it answers. A
// login with X-Password: right is 200, any other login 401 unless X-Do
// says otherwise.
func leaveHandler(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	switch r.Header.Get("X-Do") {
	case "panic":
		panic("the handler failed")
	case "abort":
		panic(http.ErrAbortHandler)
	case "panic-after-status":
		w.WriteHeader(http.StatusUnauthorized)
		panic("the handler failed")
	case "abort-after-status":
		w.WriteHeader(http.StatusUnauthorized)
		_ = rc.Flush()
		panic(http.ErrAbortHandler)
	case "nothing":
		return
	case "status":
		w.WriteHeader(http.StatusUnauthorized)
		return
	case "late":
		// Answers once its client has left.
		<-r.Context().Done()
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, "wrong password")
		return
	case "hold":
		// Holds the request until its client leaves.
		<-r.Context().Done()
		return
	case "stream":
		// The status line, then a body that goes on until the client
		// has left.
		w.WriteHeader(http.StatusUnauthorized)
		_ = rc.Flush()
		chunk := bytes.Repeat([]byte("z"), 4096)
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
			time.Sleep(time.Millisecond)
		}
	case "hijack":
		conn, buf, err := rc.Hijack()
		if err != nil {
			panic(err)
		}
		_, _ = buf.WriteString("HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		_ = buf.Flush()
		_ = conn.Close()
		return
	}
	if r.URL.Path == "/login" && r.Header.Get("X-Password") != "right" {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, "wrong password")
		return
	}
	_, _ = io.WriteString(w, "ok")
}

// leaveRig serves leaveHandler behind a Guard of leaveLimits; ended gets
// the X-Do of each request whose Guard middleware has returned (its
// reservation settled, its leases given back), panics included.
type leaveRig struct {
	url   string
	ended chan string
}

func newLeaveRig(t *testing.T, limits []guard.Limit) *leaveRig {
	t.Helper()
	g := newGuard(t, guard.Limits(limits...), guard.Options{})
	rig := &leaveRig{ended: make(chan string, 64)}
	guarded := g.Middleware(http.HandlerFunc(leaveHandler))
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if do := r.Header.Get("X-Do"); do != "" {
			defer func() { rig.ended <- do }()
		}
		guarded.ServeHTTP(w, r)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panics the tests cause
	srv.Start()
	t.Cleanup(srv.Close)
	rig.url = srv.URL
	return rig
}

// waitEnded waits for the request that asked for do to end.
func (rig *leaveRig) waitEnded(t *testing.T, do string) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		select {
		case got := <-rig.ended:
			if got == do {
				return
			}
		case <-deadline:
			t.Fatalf("the request %q never ended", do)
		}
	}
}

// rateLimit returns the remaining units of limit name in a RateLimit
// field (-1 when absent).
func rateLimit(field, name string) int {
	for item := range strings.SplitSeq(field, ",") {
		item = strings.TrimSpace(item)
		if !strings.HasPrefix(item, `"`+name+`";`) {
			continue
		}
		for p := range strings.SplitSeq(item, ";") {
			if v, ok := strings.CutPrefix(p, "r="); ok {
				n, err := strconv.Atoi(v)
				if err == nil {
					return n
				}
			}
		}
	}
	return -1
}

// failedLogins returns the failed logins the login limit holds: a right
// password reserves one unit (the RateLimit field says what is left
// after it) and costs nothing once it is answered 200.
func (rig *leaveRig) failedLogins(t *testing.T) int {
	t.Helper()
	a := do(t, http.DefaultClient, "POST", rig.url+"/login", map[string]string{"X-Password": "right"})
	if a.status == http.StatusTooManyRequests {
		return 3
	}
	r := rateLimit(a.rl, "login")
	if a.status != http.StatusOK || r < 0 {
		t.Fatalf("probe: %v", a)
	}
	return 3 - 1 - r
}

// slotsHeld returns the concurrency slots held by requests in flight: a
// probe takes one (the RateLimit field says what is left).
func (rig *leaveRig) slotsHeld(t *testing.T) int {
	t.Helper()
	a := do(t, http.DefaultClient, "GET", rig.url+"/slot/probe", nil)
	if a.status == http.StatusTooManyRequests {
		return 2
	}
	r := rateLimit(a.rl, "slots")
	if a.status != http.StatusOK || r < 0 {
		t.Fatalf("probe: %v", a)
	}
	return 2 - 1 - r
}

// leave says when a raw client leaves.
type leave int

const (
	leaveNever      leave = iota // reads the answer to its end (or the server's close)
	leaveSent                    // once the request is written
	leaveStatusLine              // once it has read the status line
)

// rawRequest sends req on a connection of its own and leaves as when
// says, closing the connection or resetting it; it returns what it read.
func rawRequest(t *testing.T, base, req string, when leave, reset bool) string {
	t.Helper()
	u, _ := url.Parse(base)
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if reset {
			_ = c.(*net.TCPConn).SetLinger(0)
		}
		_ = c.Close()
	}()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	switch when {
	case leaveSent:
		return ""
	case leaveStatusLine:
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			t.Fatalf("no status line: %v (%q)", err, line)
		}
		return line
	}
	b, _ := io.ReadAll(c)
	return string(b)
}

// rawHTTP is a request of method for path, with X-Do: do.
func rawHTTP(method, path, do string) string {
	return method + " " + path + " HTTP/1.1\r\nHost: x\r\nX-Do: " + do + "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
}

// TestLeaveLoginGuard: a failed login counts once its status is known,
// whatever the client does next and however the handler ends; it is
// given back only when the handler gave no answer (it panicked before its
// status line, or wrote nothing: a 200).
func TestLeaveLoginGuard(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		do      string
		when    leave
		reset   bool
		charged int
	}{
		{"401 read to its end", "default", leaveNever, false, 1},
		{"the status line read, then closed", "stream", leaveStatusLine, false, 1},
		{"the status line read, then reset", "stream", leaveStatusLine, true, 1},
		{"left before the status line, answered 401 after", "late", leaveSent, false, 1},
		{"left before the status line, reset, answered 401 after", "late", leaveSent, true, 1},
		{"only a status", "status", leaveNever, false, 1},
		{"a panic after the status", "panic-after-status", leaveNever, false, 1},
		{"ErrAbortHandler after the status", "abort-after-status", leaveStatusLine, false, 1},
		{"a panic before any answer", "panic", leaveNever, false, 0},
		{"ErrAbortHandler before any answer", "abort", leaveNever, false, 0},
		{"no answer written (200)", "nothing", leaveNever, false, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rig := newLeaveRig(t, leaveLimits)
			rawRequest(t, rig.url, rawHTTP("POST", "/login", c.do), c.when, c.reset)
			rig.waitEnded(t, c.do)
			if got := rig.failedLogins(t); got != c.charged {
				t.Errorf("failed logins counted: %d, want %d", got, c.charged)
			}
		})
	}
}

// TestLeaveConcurrencyGuard: a concurrency slot comes back however the
// request ends: the handler panics, aborts, writes nothing, writes only a
// status, hijacks its connection; the client leaves before the handler
// answers, after the status line, while the body streams.
func TestLeaveConcurrencyGuard(t *testing.T) {
	t.Parallel()
	rig := newLeaveRig(t, leaveLimits)
	for _, c := range []struct {
		name  string
		do    string
		when  leave
		reset bool
	}{
		{"a panic", "panic", leaveNever, false},
		{"ErrAbortHandler", "abort", leaveNever, false},
		{"ErrAbortHandler after the status", "abort-after-status", leaveNever, false},
		{"no answer written", "nothing", leaveNever, false},
		{"only a status", "status", leaveNever, false},
		{"held until the client leaves", "hold", leaveSent, false},
		{"held until the client resets", "hold", leaveSent, true},
		{"the status line read, then closed", "stream", leaveStatusLine, false},
		{"the status line read, then reset", "stream", leaveStatusLine, true},
		{"hijacked", "hijack", leaveNever, false},
	} {
		for range 3 { // more than the limit of 2: a slot kept would show
			rawRequest(t, rig.url, rawHTTP("GET", "/slot/"+c.do, c.do), c.when, c.reset)
			rig.waitEnded(t, c.do)
		}
		if n := rig.slotsHeld(t); n != 0 {
			t.Errorf("%s: %d slots held once the requests ended, want 0", c.name, n)
		}
	}
}
