package redisstore

import (
	"strings"
	"testing"
)

// TestRespCount: whole values are counted however the stream is cut, a
// top-level push is not, and what the count cannot follow makes it lost.
func TestRespCount(t *testing.T) {
	values := []string{"+OK\r\n", "-ERR no such thing\r\n", ":-12\r\n", "$5\r\nhel\nl\r\n", "$-1\r\n", "$0\r\n\r\n",
		"*2\r\n$1\r\na\r\n:2\r\n", "*-1\r\n", "*0\r\n", "%2\r\n+k\r\n*1\r\n:1\r\n+v\r\n%0\r\n", "_\r\n", ",1.5\r\n",
		"#t\r\n", "(1234567890123\r\n", "=7\r\ntxt:abc\r\n", "~1\r\n*1\r\n*1\r\n$2\r\n\r\n\r\n", "!3\r\nerr\r\n"}
	stream := strings.Join(values, "")
	push := ">2\r\n+invalidate\r\n*1\r\n$1\r\nk\r\n"
	withPush := values[0] + push + strings.Join(values[1:], "")
	for _, tc := range []struct {
		name, stream string
	}{{"replies", stream}, {"with a push", withPush}} {
		want := int64(len(values))
		var one respCount
		for i := range len(tc.stream) {
			one.feed([]byte{tc.stream[i]})
		}
		if one.n != want || one.lost || one.state != respType || len(one.open) != 0 {
			t.Fatalf("%s, a byte at a time: %d values (lost %v), want %d", tc.name, one.n, one.lost, want)
		}
		for i := 0; i <= len(tc.stream); i++ {
			for j := i; j <= len(tc.stream); j += 7 {
				var c respCount
				c.feed([]byte(tc.stream[:i]))
				c.feed([]byte(tc.stream[i:j]))
				if got := c.feed([]byte(tc.stream[j:])); got != want || c.lost {
					t.Fatalf("%s cut at %d and %d: %d values (lost %v), want %d", tc.name, i, j, got, c.lost, want)
				}
			}
		}
	}
	// A command as clients write it: an array of bulk strings.
	var cmd respCount
	if n := cmd.feed([]byte("*3\r\n$7\r\nEVALSHA\r\n$3\r\nabc\r\n$1\r\n0\r\n*1\r\n$4\r\nPING\r\n")); n != 2 {
		t.Fatalf("two commands: %d", n)
	}
	// Half a value is not counted.
	var half respCount
	if n := half.feed([]byte("*2\r\n:1\r\n")); n != 0 || half.lost {
		t.Fatalf("half an array: %d values, lost %v", n, half.lost)
	}
	for _, bad := range []string{"|1\r\n+a\r\n+b\r\n+OK\r\n", "*?\r\n:1\r\n.\r\n", "$x\r\n", "?\r\n"} {
		var c respCount
		c.feed([]byte(bad))
		if !c.lost {
			t.Fatalf("%q: not lost", bad)
		}
		if n := c.feed([]byte("+OK\r\n")); n != 0 {
			t.Fatalf("%q: counts on after losing the stream: %d", bad, n)
		}
	}
}
