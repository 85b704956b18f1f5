package upstreamtest

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestRaw: the upstream answers each request on a connection as answer
// writes it, and closes the connection when answer says so.
func TestRaw(t *testing.T) {
	addr := Raw(t, func(c net.Conn, req *http.Request) bool {
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		return req.URL.Path != "/last"
	})
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for _, path := range []string{"/a", "/last"} {
		if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != 200 || string(b) != "ok" {
			t.Fatalf("%s: %d %q", path, res.StatusCode, b)
		}
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after the last answer: %v, want the connection closed", err)
	}
}
