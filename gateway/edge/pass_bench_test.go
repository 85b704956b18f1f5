package edge

import (
	"bufio"
	"bytes"
	"io"
	"iter"
	"math"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/racecheck"
	"github.com/floodgate/floodgate/internal/upstreamtest"
	"github.com/valyala/fasthttp"
)

// passOnce sets up the pass-through of scripts/bench-gateway.sh (a
// per-address limit that never binds, scripts/bench-gateway/pass.yaml)
// through the edge engine on loopback, in front of an upstream that
// allocates nothing (upstreamtest.Fixed), and returns a function that
// sends one request over a kept-alive connection and reads its answer.
// The engine is shut down with the test.
func passOnce(tb testing.TB) func() {
	tb.Helper()
	up := upstreamtest.Fixed(tb, []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{\"ok\":true}\n"))
	g := policyGateway(tb, `version: 1
server:
  headers: {ratelimit: true}
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: http://`+up+`}
limits:
  - {name: per-ip, rate: 1000000, burst: 1000000, key: client_ip, scope: global}
`)
	addr, stop := serveOn(tb, New(g, Options{}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		c.Close()
		stop()
	})
	br := bufio.NewReader(c)
	req := []byte("GET /students/9 HTTP/1.1\r\nHost: gateway.example\r\nUser-Agent: bench\r\n\r\n")
	body := make([]byte, 64)
	return func() {
		if _, err := c.Write(req); err != nil {
			tb.Fatal(err)
		}
		status, n := 0, -1
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				tb.Fatal(err)
			}
			line = bytes.TrimRight(line, "\r\n")
			switch {
			case len(line) == 0:
				if status != 200 || n < 0 || n > len(body) {
					tb.Fatalf("answered %d with a body of %d bytes, want 200 and a small one", status, n)
				}
				if _, err := io.ReadFull(br, body[:n]); err != nil {
					tb.Fatal(err)
				}
				return
			case status == 0:
				if len(line) < 12 {
					tb.Fatalf("status line %q", line)
				}
				status, _ = strconv.Atoi(string(line[9:12]))
			case len(line) > 16 && bytes.EqualFold(line[:16], []byte("content-length: ")):
				n, _ = strconv.Atoi(string(line[16:]))
			}
		}
	}
}

// TestForwardedRequestAllocatesNothing: a request the edge engine
// forwards over kept connections, both ways, allocates nothing. Before,
// each allocated twice: the targets of two errors.As, called whether the
// exchange failed or not.
func TestForwardedRequestAllocatesNothing(t *testing.T) {
	if racecheck.Enabled {
		t.Skip("under the race detector sync.Pool drops items at random: allocations are not counted")
	}
	one := passOnce(t)
	one() // the connections opened
	// AllocsPerRun counts the whole process's allocations, which the
	// engine's own goroutines add to: the least of a few runs is the
	// request's own.
	least := math.MaxFloat64
	for range 5 {
		least = min(least, testing.AllocsPerRun(500, one))
	}
	if least != 0 {
		t.Errorf("a forwarded request allocates %v times", least)
	}
}

// BenchmarkEdgePass: a request forwarded by the edge engine (passOnce), to
// an upstream that allocates nothing: allocs/op are the engine's.
func BenchmarkEdgePass(b *testing.B) {
	one := passOnce(b)
	one() // the connections opened
	b.ReportAllocs()
	for b.Loop() {
		one()
	}
}

// TestHopBit: each hop-by-hop name, in any case, has its own bit; a name
// of the same length that is not one, or one a byte longer or shorter,
// has none.
func TestHopBit(t *testing.T) {
	for i, n := range hopNames {
		for _, k := range []string{n, strings.ToLower(n), strings.ToUpper(n)} {
			if b := hopBit([]byte(k)); b != 1<<i {
				t.Errorf("hopBit(%q) = %b, want %b", k, b, 1<<i)
			}
		}
		for _, k := range []string{n[:len(n)-1], n + "x", strings.Repeat("x", len(n))} {
			if b := hopBit([]byte(k)); b != 0 {
				t.Errorf("hopBit(%q) = %b, want 0", k, b)
			}
		}
	}
	for _, k := range []string{"Server", "Cookie", "User-Agent", "Content-Type", "Date", "X-Forwarded-For"} {
		if b := hopBit([]byte(k)); b != 0 {
			t.Errorf("hopBit(%q) = %b, want 0", k, b)
		}
	}
}

// TestDelStable: removing a field keeps the lines of each other name in
// their order (fasthttp's own removal moves the last line into the place
// it empties), in a request's header and a response's, and allocates
// nothing when no name has two lines after the removed one.
func TestDelStable(t *testing.T) {
	var req fasthttp.RequestHeader
	if err := req.Read(bufio.NewReader(strings.NewReader("GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\nAccept: a\r\n" +
		"X-Forwarded-For: 1\r\nVia: 1\r\nAccept: b\r\nVia: 2\r\nX-Last: z\r\n\r\n"))); err != nil {
		t.Fatal(err)
	}
	delStable(&req, []byte("Connection"))
	delStable(&req, []byte("x-forwarded-for"))
	if got := fieldOrder(req.All()); !before(got, "Accept:a", "Accept:b") || !before(got, "Via:1", "Via:2") ||
		!strings.Contains(got, "X-Last") || strings.Contains(got, "Connection") || strings.Contains(got, "X-Forwarded-For") {
		t.Errorf("request fields after the removals: %s", got)
	}
	var resp fasthttp.ResponseHeader
	if err := resp.Read(bufio.NewReader(strings.NewReader("HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nLink: <a>\r\n" +
		"Keep-Alive: timeout=5\r\nLink: <b>\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nContent-Length: 0\r\n\r\n"))); err != nil {
		t.Fatal(err)
	}
	stripHopResponse(&resp)
	if got := fieldOrder(resp.All()); !before(got, "Link:<a>", "Link:<b>") || strings.Contains(got, "Keep-Alive") ||
		strings.Contains(got, "Connection") || !before(got, "Set-Cookie:a=1", "Set-Cookie:b=2") {
		t.Errorf("response fields after the hop-by-hop ones went: %s", got)
	}
	if racecheck.Enabled {
		return // sync.Pool and the detector's own allocations
	}
	var h fasthttp.ResponseHeader
	h.Set("Connection", "keep-alive")
	h.Set("X-A", "1")
	key := []byte("Connection")
	if n := testing.AllocsPerRun(100, func() {
		h.Set("Connection", "keep-alive")
		delStable(&h, key)
	}); n != 0 {
		t.Errorf("a removal allocates %v times", n)
	}
}

// fieldOrder lists a header's lines in order, with the value of each
// line of a name that comes twice.
func fieldOrder(all iter.Seq2[[]byte, []byte]) string {
	var names, out []string
	var values []string
	for k, v := range all {
		names, values = append(names, string(k)), append(values, string(v))
	}
	for i, n := range names {
		twice := false
		for j, m := range names {
			twice = twice || j != i && m == n
		}
		if twice {
			n += ":" + values[i]
		}
		if n != "Content-Length" && n != "Content-Type" {
			out = append(out, n)
		}
	}
	return strings.Join(out, " ")
}

// before reports whether s holds a and then b.
func before(s, a, b string) bool {
	i, j := strings.Index(s, a), strings.Index(s, b)
	return i >= 0 && j > i
}
