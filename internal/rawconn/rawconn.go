// Package rawconn reads and writes stream sockets (TCP, Unix) with raw
// system calls, which do not tell Go's scheduler that a call is under way.
//
// A socket of Go's net package is non-blocking, so each such call returns
// at once (EAGAIN when there is nothing to read or no room to write, and
// then the goroutine waits in Go's netpoller, under the connection's
// deadlines, as net.Conn's Read and Write do). A thread that the kernel
// preempts in an announced call (a write that wakes its reader on the same
// CPU, often) has its P taken by the runtime's monitor and handed to
// another thread, and must find a P again when it resumes: on two cores
// shared with other processes that cost about a tenth of the CPU of a
// gateway's refusal, which raw calls do not pay. The price is that the
// goroutines queued on a preempted thread's P wait for it, unless another
// P is idle and takes them: a higher p99 at moderate load on shared cores
// (docs/engines.md, run 16).
//
// The race detector counts the syscall package's reads and writes as
// synchronizing with one another; it does not see these calls, so tests
// that hand state between goroutines through a socket read here need
// synchronization of their own.
//
// Raw calls are made on Linux; elsewhere Of returns nil, and a Conn reads
// and writes through its connection.
package rawconn

import "net"

// Plain is a connection wrapper that reads and writes the connection it
// wraps unchanged, as a limit on open connections does: its socket may be
// read and written directly.
type Plain interface {
	PlainConn() net.Conn
}

// Conn is a connection read and written with raw system calls when it is
// a plain TCP or Unix stream connection (Of), and through its own Read
// and Write otherwise; its other methods are its own. As any net.Conn,
// it may be read and written by several goroutines at once; each read and
// each write is whole.
type Conn struct {
	net.Conn
	io *IO
}

// Wrap returns c as a Conn.
func Wrap(c net.Conn) *Conn { return &Conn{Conn: c, io: Of(c)} }

// Raw returns the raw reader and writer, nil when c is read and written
// through its own methods.
func (c *Conn) Raw() *IO { return c.io }

// Read reads as net.Conn's Read does.
func (c *Conn) Read(b []byte) (int, error) {
	if c.io != nil {
		return c.io.Read(b)
	}
	return c.Conn.Read(b)
}

// Write writes as net.Conn's Write does.
func (c *Conn) Write(b []byte) (int, error) {
	if c.io != nil {
		return c.io.Write(b)
	}
	return c.Conn.Write(b)
}

// PlainConn returns the connection it wraps: its bytes pass unchanged.
func (c *Conn) PlainConn() net.Conn { return c.Conn }
