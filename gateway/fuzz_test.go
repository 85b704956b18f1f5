package gateway

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
)

// FuzzMiddleware sends arbitrary requests (method, path, host, API key,
// forwarded chain, peer address) through the school example: the gateway
// never panics and answers only what it may answer: 400 only to a path it
// documents as refused (badTarget), with that reason.
func FuzzMiddleware(f *testing.F) {
	f.Add("GET", "/students/9", "example.com", "", "", "192.0.2.1:1234")
	f.Add("GET", "/partner/students/9", "h", "key-trial", "203.0.113.9, 10.0.0.1", "[2001:db8::1]:443")
	f.Add("POST", "/login", "", "key-partner-1", "garbage,,", "not-an-address")
	f.Add("DELETE", "//notices/../urgent/", "x:99", "\x00", "::ffff:1.2.3.4", "")
	pm, err := NewPolicyMatcher(Fixed(loadSchool(f)), PolicyMatcherOptions{})
	if err != nil {
		f.Fatal(err)
	}
	g, err := New(Options{Matcher: pm, Engine: limiter.New(newMemStore(f, nil), limiter.Options{})})
	if err != nil {
		f.Fatal(err)
	}
	h := g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	f.Fuzz(func(t *testing.T, method, path, host, key, xff, peer string) {
		r := &http.Request{
			Method:     method,
			URL:        &url.URL{Path: path},
			Host:       host,
			Header:     http.Header{},
			RemoteAddr: peer,
			Proto:      "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		}
		r = r.WithContext(t.Context())
		if key != "" {
			r.Header.Set("X-Api-Key", key)
		}
		if xff != "" {
			r.Header.Set("X-Forwarded-For", xff)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		switch w.Code {
		case http.StatusOK, http.StatusForbidden, http.StatusTooManyRequests:
		case http.StatusBadRequest:
			why := badTarget(path)
			if why == "" || w.Body.String() != string(badRequestBody(why)) {
				t.Fatalf("400 %q for %q %q (refused path: %q)", w.Body.String(), method, path, why)
			}
		default:
			t.Fatalf("status %d for %q %q", w.Code, method, path)
		}
		if w.Code == http.StatusTooManyRequests && w.Header().Get("Retry-After") == "" {
			t.Fatalf("429 without Retry-After")
		}
	})
}

// FuzzEdgeRequest sends arbitrary bytes as a request to the edge engine in
// front of the school example (its routes sent to a real upstream): the
// gateway never panics, and answers only what it may answer.
func FuzzEdgeRequest(f *testing.F) {
	for _, s := range []string{
		"GET /students/9 HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /partner/students/9 HTTP/1.1\r\nHost: x\r\nX-Api-Key: key-trial\r\nX-Forwarded-For: 203.0.113.9\r\n\r\n",
		"POST /login HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 30\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
		"GET /login%00 HTTP/1.1\r\nHost: x\r\nX-HTTP-Method-Override: POST\r\n\r\n",
		"GET //notices/../urgent/;x HTTP/1.0\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	up := newUpstream(f, nil)
	u, _ := url.Parse(up.URL)
	pm, err := NewPolicyMatcher(Fixed(loadSchool(f)), PolicyMatcherOptions{Upstream: u})
	if err != nil {
		f.Fatal(err)
	}
	g, err := New(Options{Matcher: pm, Engine: limiter.New(newMemStore(f, nil), limiter.Options{})})
	if err != nil {
		f.Fatal(err)
	}
	base := serveFront(f, frontEdge, g, nil)
	addr := strings.TrimPrefix(base, "http://")
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(raw); err != nil {
			return // the gateway closed first
		}
		_ = c.(*net.TCPConn).CloseWrite() // all of the request is in
		br := bufio.NewReader(c)
		for {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				return // no more answers
			}
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusOK, http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound,
				http.StatusMethodNotAllowed, http.StatusExpectationFailed, http.StatusTooManyRequests,
				http.StatusRequestHeaderFieldsTooLarge, http.StatusNotImplemented, http.StatusBadGateway,
				http.StatusHTTPVersionNotSupported:
			default:
				t.Fatalf("status %d for %q", resp.StatusCode, raw)
			}
			if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
				t.Fatalf("429 without Retry-After for %q", raw)
			}
		}
	})
}
