package rls

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// TestJSONClientThatNeverReadsIsCut: served through BoundWrites, the /json
// endpoint closes the connection of a client that pipelines requests and
// never reads their answers once a write has waited the bound, while a
// client that reads keeps its connection across pauses longer than the
// bound. Without it such a client held its connection, a goroutine and
// the answers queued on it for as long as it stayed connected.
func TestJSONClientThatNeverReadsIsCut(t *testing.T) {
	const stall = 500 * time.Millisecond
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc := New(limiter.New(st, limiter.Options{}), mustParse(t, basic), Options{})
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &closeWatch{Listener: raw, closed: make(chan string, 16)}
	hs := &http.Server{Handler: JSONHandler(svc), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(BoundWrites(ln, stall)) }()
	t.Cleanup(func() {
		hs.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	addr := raw.Addr().String()

	var descs []string
	for i := range 60 {
		descs = append(descs, fmt.Sprintf(`{"entries":[{"key":"user","value":"u%d"}]}`, i))
	}
	body := `{"domain":"d","descriptors":[` + strings.Join(descs, ",") + `]}`
	one := fmt.Sprintf("POST /json HTTP/1.1\r\nHost: rls\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)

	// A client that reads keeps its connection across pauses longer than
	// the bound.
	reader, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	_ = reader.SetDeadline(time.Now().Add(60 * time.Second)) // a bound for failing only
	br := bufio.NewReader(reader)
	for i := range 3 {
		if i > 0 {
			time.Sleep(3 * stall)
		}
		if _, err := io.WriteString(reader, one); err != nil {
			t.Fatalf("request %d of a client that reads: %v", i, err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d to a client that reads: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("answer %d to a client that reads: %d", i, resp.StatusCode)
		}
	}
	select {
	case a := <-ln.closed:
		t.Fatalf("the connection of a client that reads (%s) was closed", a)
	default:
	}

	// A client that never reads, with a small receive buffer.
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
	batch := strings.Repeat(one, 64)
	sent := 0
	for sent < 64<<20 {
		// A bound for the test only: the server stops reading once its
		// answers are stuck.
		_ = c.SetWriteDeadline(time.Now().Add(2 * time.Second))
		n, err := io.WriteString(c, batch)
		sent += n
		if err != nil {
			break // stuck, or already closed
		}
	}
	mine := c.LocalAddr().String()
	wait := time.After(30 * time.Second)
	for {
		select {
		case a := <-ln.closed:
			if a == mine {
				return
			}
			t.Fatalf("the connection of a client that reads (%s) was closed", a)
		case <-wait:
			t.Fatalf("30 s after a client sent %d bytes of requests and read none of their answers, the server still holds its connection (write bound %v)", sent, stall)
		}
	}
}
