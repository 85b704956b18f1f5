package h2guard

import (
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"
)

// smallReads is a dialer whose connections' receive buffers hold the
// least the kernel allows (some 2 KiB) from the first: their window is
// small.
var smallReads = &net.Dialer{Control: func(network, address string, c syscall.RawConn) error {
	var err error
	if cerr := c.Control(func(fd uintptr) {
		err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1)
	}); cerr != nil {
		return cerr
	}
	return err
}}

// smallSends is a listener whose connections' send buffers hold the least
// the kernel allows (some 4 KiB): the server's answers to a client that
// reads nothing soon wait, a few hundred refusals of DATA frames at most.
type smallSends struct{ net.Listener }

func (l smallSends) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(1)
	}
	return c, err
}

// TestClientsThatReadNothingAreCut: a client that floods and reads
// nothing of the server's answers, which soon wait in a full socket, is
// cut and counted under the kind of its frames all the same, as one that
// reads them is. Before, a flood of DATA frames on a closed stream was
// charged only as the server wrote its refusals: net/http read on,
// queued 10,000 refusals it could not write, and closed the connection
// itself, no cut counted; a loaded server, whose writes lag its reads, did
// so too now and then. And a client cut while the server's write to it
// waited was neither counted nor closed until it went away.
func TestClientsThatReadNothingAreCut(t *testing.T) {
	hold := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) })
	for kind, send := range floods {
		t.Run(kind, func(t *testing.T) {
			cuts := &Cuts{}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			h := dialH2With(t, serveOn(t, smallSends{ln}, hold, nil, cuts), smallReads)
			if err := h.request(1, "/", false); err != nil {
				t.Fatal(err)
			}
			// Until the flood is sent, or the server closes the
			// connection, or, had it stopped reading, a minute passed.
			_ = h.c.SetWriteDeadline(time.Now().Add(time.Minute))
			for i := 0; i < 100000 && send(h, i) == nil; i++ {
			}
			want := floodKinds[kind]
			count(t, cuts, want, 1)
			for k := range NumKinds {
				if n := cuts.Count(k); k != want && n != 0 {
					t.Errorf("%d counted as cut by %s frames too", n, k)
				}
			}
		})
	}
}
