package rawconn_test

import (
	"fmt"
	"net"

	"github.com/floodgate/floodgate/internal/rawconn"
)

// Read a TCP connection with raw system calls (on Linux): its deadlines
// and errors are those of net.Conn.
func ExampleOf() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write([]byte("hello"))
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	read := c.Read
	if raw := rawconn.Of(c); raw != nil {
		read = raw.Read
	}
	b := make([]byte, 16)
	n, err := read(b)
	fmt.Printf("%s %v\n", b[:n], err)
	// Output: hello <nil>
}
