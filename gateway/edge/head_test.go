package edge

import "testing"

// TestHeadEnd: the end of an answer's head is its first empty line,
// whatever ends its lines, and only a head of CRLFs alone is left to
// fasthttp as it is; the rest is rewritten with CRLFs. The same ends are
// found when the bytes come one at a time, each looked at once.
func TestHeadEnd(t *testing.T) {
	for _, c := range []struct {
		in   string
		end  int
		crlf bool
		out  string // withCRLF of the head, when it is not CRLF alone
	}{
		{"HTTP/1.1 200 OK\r\nA: b\r\n\r\nbody", 25, true, ""},
		{"HTTP/1.1 200 OK\r\n\r\n", 19, true, ""},
		{"HTTP/1.1 200 OK\nA: b\n\nbody", 22, false, "HTTP/1.1 200 OK\r\nA: b\r\n\r\n"},
		{"HTTP/1.1 200 OK\r\nA: b\r\n\nbody", 24, false, "HTTP/1.1 200 OK\r\nA: b\r\n\r\n"},
		{"HTTP/1.1 200 OK\nA: b\n\r\nbody", 23, false, "HTTP/1.1 200 OK\r\nA: b\r\n\r\n"},
		{"HTTP/1.1 200 OK\nA: b\r\n\r\nbody", 24, false, "HTTP/1.1 200 OK\r\nA: b\r\n\r\n"},
		// A CRLF CRLF in the body after a head that ends in LF: not the end.
		{"HTTP/1.1 200 OK\nA: b\n\nx\r\n\r\ny", 22, false, "HTTP/1.1 200 OK\r\nA: b\r\n\r\n"},
		// Not there yet.
		{"HTTP/1.1 200 OK\nA: b\n", 0, false, ""},
		{"HTTP/1.1 200 OK\r\nA: b\r\n\r", 0, false, ""},
		{"", 0, false, ""},
		// An empty line first is not a head's end here (fasthttp decides).
		{"\nHTTP/1.1 200 OK\n\n", 18, false, "\r\nHTTP/1.1 200 OK\r\n\r\n"},
	} {
		var s headScan
		end, crlf := s.end([]byte(c.in))
		if end != c.end || crlf != c.crlf {
			t.Errorf("end(%q) = %d, %v; want %d, %v", c.in, end, crlf, c.end, c.crlf)
			continue
		}
		var trickle headScan
		for n := 0; n <= len(c.in); n++ {
			e, cr := trickle.end([]byte(c.in[:n]))
			if e > 0 || n == len(c.in) {
				if e != c.end || cr != c.crlf {
					t.Errorf("end(%q) a byte at a time = %d, %v at %d bytes; want %d, %v", c.in, e, cr, n, c.end, c.crlf)
				}
				break
			}
		}
		if end > 0 && !crlf {
			out := withCRLF([]byte(c.in[:end]))
			var again headScan
			if e, crlf := again.end(out); string(out) != c.out || e != len(out) || !crlf {
				t.Errorf("withCRLF(%q) = %q; want %q", c.in[:end], out, c.out)
			}
		}
	}
}
