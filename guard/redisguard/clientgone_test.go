package redisguard_test

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/guard"
	"github.com/floodgate/floodgate/guard/redisguard"
	"github.com/floodgate/floodgate/internal/redistest"
)

// TestClientGoneBeforeTheDecision: a client that leaves before its
// request is decided (here, while a middleware in front of the Guard
// holds it) must not get its request to the handler uncharged. On the
// memory store the request is decided and charged as any other; on Redis
// the engine's call gives up with the client (context.Canceled), and the
// request must not then pass as if the store had failed.
func TestClientGoneBeforeTheDecision(t *testing.T) {
	t.Parallel()
	g := threeOnRedis(t)
	var ran atomic.Int64
	guarded := g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran.Add(1) // the work a request buys: done whether or not its client waits
		io.WriteString(w, "done")
	}))
	ended := make(chan struct{}, 16)
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { ended <- struct{}{} }()
		// A middleware in front (authentication, a body read) holds the
		// request until its client has left.
		<-r.Context().Done()
		guarded.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	u, _ := url.Parse(s.URL)
	const sent = 6
	for range sent {
		c, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, "GET /work HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		c.Close()
		select {
		case <-ended:
		case <-time.After(time.Minute):
			t.Fatal("the request never ended")
		}
	}
	if n := ran.Load(); n > 3 {
		t.Errorf("%d requests whose clients left before the decision reached the handler, against a limit of 3", n)
	}
}

// TestHalfClosedClientGoneBeforeTheDecision: a client that shuts down its
// side of the connection once its request is sent (it still reads) and
// whose request is then not decided, the Redis call giving up with it,
// gets no answer: the connection is closed, as for a client that left
// while queued. Before, net/http wrote "200 OK" with an empty body, which
// such a client reads as its request served.
func TestHalfClosedClientGoneBeforeTheDecision(t *testing.T) {
	t.Parallel()
	g := threeOnRedis(t)
	var ran atomic.Int64
	guarded := g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran.Add(1)
		io.WriteString(w, "done")
	}))
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A middleware in front holds the request until net/http sees its
		// client's end of the connection.
		<-r.Context().Done()
		guarded.ServeHTTP(w, r)
	}))
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // the aborted request's line
	s.Start()
	t.Cleanup(s.Close)
	u, _ := url.Parse(s.URL)
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /work HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	got, _ := io.ReadAll(c)
	if len(got) > 0 || ran.Load() != 0 {
		t.Errorf("a request not decided, its client gone: the client read %q, the handler ran %d times; want no answer, no run", got, ran.Load())
	}
}

// threeOnRedis is a Guard of a limit of three requests an hour for
// everyone, counted on a redis-server of its own.
func threeOnRedis(t *testing.T) *guard.Guard {
	t.Helper()
	srv := redistest.Start(t)
	file := filepath.Join(t.TempDir(), "policy.yaml")
	policy := fmt.Sprintf("version: 1\nserver: {store: \"redis://%s/0\"}\nlimits:\n  - {name: three, rate: 3, per: 1h, key: global}\n", srv.Addr)
	if err := os.WriteFile(file, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := guard.New(guard.File(file), guard.Options{OpenStore: redisguard.Open, ReloadInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Error(err)
		}
	})
	return g
}
