package admin

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRotateBodyIsOptional: a rotation's body is optional however the
// request says it has none: no body, an empty one of Content-Length 0, or
// a chunked one of no bytes (what a client streaming its body sends). The
// chunked one is sent over a raw loopback connection, as such clients do.
func TestRotateBodyIsOptional(t *testing.T) {
	ta := newTestAPI(t)
	if st, msg := ta.do(t, "POST", "/api/v1/keys", `{"name":"acme","plan":"basic"}`, nil); st != http.StatusCreated {
		t.Fatalf("create: %d %s", st, msg)
	}
	if st, msg := ta.do(t, "POST", "/api/v1/keys/acme/rotate", "", nil); st != http.StatusOK {
		t.Errorf("rotate without a body: %d %s", st, msg)
	}
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(ta.url, "http://"), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := conn.Write([]byte("POST /api/v1/keys/acme/rotate HTTP/1.1\r\nHost: 127.0.0.1\r\n" +
		"Authorization: Bearer ops-token\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		Error   string `json:"error"`
		Secrets []struct {
			NotAfter time.Time `json:"not_after"`
		} `json:"secrets"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || len(v.Secrets) != 3 {
		t.Fatalf("rotate with an empty chunked body: %s %q, %d secrets; want 200 and 3 secrets", resp.Status, v.Error, len(v.Secrets))
	}
	// The default overlap applies.
	if left := time.Until(v.Secrets[1].NotAfter); left < DefaultOverlap-time.Hour || left > DefaultOverlap {
		t.Errorf("the older secret ends in %v, want the default overlap of %v", left, DefaultOverlap)
	}
}
