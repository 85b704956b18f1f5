package plainhead_test

import (
	"fmt"

	"github.com/floodgate/floodgate/internal/plainhead"
)

func ExampleRead() {
	var h plainhead.Header
	head := []byte("GET /students/9?x=1 HTTP/1.1\r\nHost: api.example:8080\r\nX-Api-Key:  key-1 \r\nConnection: close\r\n\r\n")
	r, ok := plainhead.Read(head, &h)
	fmt.Println(ok, string(r.Target), r.Host, r.Close)
	fmt.Printf("%q %d\n", h.Get("x-api-key"), h.Lines("X-API-KEY"))

	_, ok = plainhead.Read([]byte("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n"), &h)
	fmt.Println(ok)
	// Output:
	// true /students/9?x=1 api.example:8080 true
	// "key-1" 1
	// false
}

func ExampleHeader_Field() {
	var h plainhead.Header
	head := []byte("GET / HTTP/1.1\r\nHost: a\r\nx-tab:\tv \r\nAccept: */*\r\n\r\n")
	if _, ok := plainhead.Read(head, &h); !ok {
		return
	}
	for i := range h.Len() {
		name, value, line := h.Field(i)
		fmt.Printf("%s=%q %q\n", name, value, line)
	}
	// Output:
	// Host="a" "Host: a\r\n"
	// x-tab="v" "x-tab:\tv \r\n"
	// Accept="*/*" "Accept: */*\r\n"
}

func ExampleFieldLine() {
	b := []byte("Content-Type:  text/plain \r\nContent-Length: 5\r\n\r\n")
	n, nameEnd, valueStart, valueEnd, ok := plainhead.FieldLine(b)
	fmt.Println(ok, n, string(b[:nameEnd]), string(b[valueStart:valueEnd]))
	_, _, _, _, ok = plainhead.FieldLine([]byte("X Bad: v\r\n"))
	fmt.Println(ok)
	// Output:
	// true 28 Content-Type text/plain
	// false
}
