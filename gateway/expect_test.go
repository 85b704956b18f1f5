package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// expectPolicy: an upload route under one request an hour per client
// address, a route under a concurrency limit of one, and (bodies: true) a
// route whose limit reads its cost from the body.
func expectPolicy(upstream string, bodies bool) string {
	src := fmt.Sprintf(`version: 1
routes:
  - name: upload
    match: {paths: ["/upload/**"]}
    upstream: %[1]s
  - name: one
    match: {paths: ["/one/**"]}
    upstream: %[1]s
  - name: priced
    match: {paths: ["/priced/**"]}
    upstream: %[1]s
limits:
  - name: uploads
    algorithm: fixed_window
    limit: 1
    window: 1h
    key: client_ip
    match: {routes: [upload]}
  - name: one-at-a-time
    algorithm: concurrency
    limit: 1
    key: global
    match: {routes: [one]}
`, upstream)
	if bodies {
		src += `  - name: priced
    rate: 1000
    per: 1h
    burst: 1000
    key: client_ip
    match: {routes: [priced]}
    estimate: {body: cost, default: 1}
`
	}
	return src
}

// expectGateway is a gateway enforcing expectPolicy in front of an
// upstream that records the bodies it gets, by path.
func expectGateway(t *testing.T, fr string, bodies bool) (base string, got func(path string) []string) {
	t.Helper()
	var mu sync.Mutex
	seen := map[string][]string{}
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen[r.URL.Path] = append(seen[r.URL.Path], string(b))
		mu.Unlock()
		_, _ = io.WriteString(w, "got "+string(b))
	})
	g := policyGateway(t, expectPolicy(up.URL, bodies), nil, nil)
	return serveFront(t, fr, g, nil), func(path string) []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen[path]...)
	}
}

// expectExchange sends a request for path with Expect: 100-continue and a
// body of five bytes, and reads the first answer's status line. send says
// whether the body goes once 100 Continue comes; then the final answer's
// status and body follow.
func expectExchange(t *testing.T, base, path string, send bool) (first string, final *http.Response, c net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	first, err = br.ReadString('\n')
	if err != nil {
		t.Fatalf("%s: no answer to the head: %v", path, err)
	}
	if !strings.HasPrefix(first, "HTTP/1.1 100 ") {
		resp, err := http.ReadResponse(bufio.NewReader(io.MultiReader(strings.NewReader(first), br)), nil)
		if err != nil {
			t.Fatalf("%s: %q then %v", path, first, err)
		}
		return first, resp, c
	}
	if line, err := br.ReadString('\n'); err != nil || line != "\r\n" {
		t.Fatalf("%s: 100 Continue goes on with %q, %v; want its end (its fields are the answer's)", path, line, err)
	}
	if !send {
		return first, nil, c
	}
	if _, err := io.WriteString(c, "hello"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s: after the body: %v", path, err)
	}
	return first, resp, c
}

// TestExpectContinueDecidedBeforeTheBody: a request that asks for 100
// Continue is decided before its client sends the body, on each engine,
// as NGINX's limit_req decides it: one admitted is told 100 Continue (a
// bare one: the RateLimit fields come with the answer) and forwarded with
// its body; one refused gets its 429 (with Retry-After)
// without a 100 Continue, so the client never sends a body that would be
// thrown away. Where a limit reads its cost from the body, the body comes
// first.
func TestExpectContinueDecidedBeforeTheBody(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		base, got := expectGateway(t, fr, false)
		first, resp, _ := expectExchange(t, base, "/upload/a", true)
		if !strings.HasPrefix(first, "HTTP/1.1 100 ") || resp.StatusCode != 200 {
			t.Fatalf("the first upload: %q, then %v", first, resp)
		}
		if resp.Header.Get("RateLimit") == "" || resp.Header.Get("RateLimit-Policy") == "" {
			t.Errorf("the answer to an upload after 100 Continue has no RateLimit fields: %v", resp.Header)
		}
		resp.Body.Close()
		if b := got("/upload/a"); len(b) != 1 || b[0] != "hello" {
			t.Fatalf("the upstream got %q; want the body", b)
		}

		first, resp, _ = expectExchange(t, base, "/upload/b", false)
		if resp == nil {
			t.Fatalf("an upload over the limit: %q; want 429 before any 100 Continue", first)
		}
		if !strings.HasPrefix(first, "HTTP/1.1 429 ") || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("an upload over the limit: %q (Retry-After %q); want 429 before any 100 Continue", first, resp.Header.Get("Retry-After"))
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if b := got("/upload/b"); len(b) != 0 {
			t.Errorf("the upstream got a refused upload: %q", b)
		}

		// A limit that reads its cost from the body: decided once it
		// came, so 100 Continue first.
		base, got = expectGateway(t, fr, true)
		first, resp, _ = expectExchange(t, base, "/priced/a", true)
		if !strings.HasPrefix(first, "HTTP/1.1 100 ") || resp.StatusCode != 200 {
			t.Fatalf("a priced upload: %q, then %v", first, resp)
		}
		resp.Body.Close()
		if b := got("/priced/a"); len(b) != 1 || b[0] != "hello" {
			t.Fatalf("the upstream got %q; want the body", b)
		}
	})
}

// TestExpectContinueBodyNeverSent: a request admitted before its body
// holds the one concurrency slot of its route; its client is told 100
// Continue and leaves without sending the body, having sent part of it, or
// sending a malformed chunk. The slot is given back each time, on each
// engine: the next request is admitted.
func TestExpectContinueBodyNeverSent(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, func(t *testing.T, fr string) {
		base, _ := expectGateway(t, fr, false)
		for i, leave := range []string{"", "he", "chunked"} {
			var first string
			var c net.Conn
			if leave == "chunked" {
				var err error
				c, err = net.Dial("tcp", strings.TrimPrefix(base, "http://"))
				if err != nil {
					t.Fatal(err)
				}
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				fmt.Fprintf(c, "POST /one/%d HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n", i)
				first, _ = bufio.NewReader(c).ReadString('\n')
				_, _ = io.WriteString(c, "zz\r\nnot a chunk\r\n")
				time.Sleep(100 * time.Millisecond)
			} else {
				first, _, c = expectExchange(t, base, fmt.Sprintf("/one/%d", i), false)
				_, _ = io.WriteString(c, leave)
			}
			if !strings.HasPrefix(first, "HTTP/1.1 100 ") {
				t.Fatalf("leaving %q: %q; want 100 Continue", leave, first)
			}
			c.Close()
			// The slot comes back once the engine sees the end.
			deadline := time.Now().Add(5 * time.Second)
			for {
				a := do(t, newClient(t), "GET", fmt.Sprintf("%s/one/next%d", base, i), nil)
				if a.status == 200 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after a client left its body (%q): the next request is %d; the slot was not given back", leave, a.status)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	})
}
