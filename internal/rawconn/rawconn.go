// Package rawconn reads and writes TCP connections' sockets with raw
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
// Raw calls are made on Linux; elsewhere Of returns nil.
package rawconn

import "net"

// Plain is a connection wrapper that reads and writes the connection it
// wraps unchanged, as a limit on open connections does: its socket may be
// read and written directly.
type Plain interface {
	PlainConn() net.Conn
}
