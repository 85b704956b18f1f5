// Package leaktest fails a test binary that leaves goroutines behind once
// its tests have finished (go.uber.org/goleak). The goroutines of
// dependencies that outlive what started them by design are listed here,
// once, each with its reason.
package leaktest

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// ignored are the goroutines of dependencies that are not leaks of ours.
var ignored = []goleak.Option{
	// fasthttp keeps the Date header of its servers fresh from one
	// goroutine per process, started with the first server and never
	// stopped.
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
	// A fasthttp server's worker pool looks at its stop channel only
	// between sleeps of MaxIdleWorkerDuration (10 s by default), so its
	// cleaner ends that long after the server has shut down.
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
	// A fasthttp.HostClient's cleaner sleeps until the next idle
	// connection is due to close, and ends only then when
	// CloseIdleConnections has closed them all before.
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
	// When a Redis Cluster's slots move, rueidis closes the connections
	// to the nodes it no longer needs five seconds later, from a goroutine
	// of their own, to let the commands under way on them finish.
	goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
	// After a Cluster node fails, rueidis reloads the slot map once a
	// random wait of up to a second has passed, from a goroutine that
	// sleeps through that wait even when the client was closed meanwhile.
	goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"),
	// A MOVED reply that names the node a command was sent to (a slot
	// moved while the client's map was stale) makes rueidis dial that node
	// again and close the old connection five seconds later, from a
	// goroutine that sleeps through them.
	goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient).redirectOrNew.func1"),
}

// VerifyTestMain runs the tests of m and fails the run when goroutines
// other than the ignored ones are left behind. A package's TestMain is
// then:
//
//	func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }
func VerifyTestMain(m *testing.M) {
	goleak.VerifyTestMain(m, ignored...)
}

// Exit ends a TestMain that stops shared servers after the tests and
// only then looks for leaks: it exits with code, the result of m.Run, or
// with 1 when the tests passed but left goroutines other than the ignored
// ones behind.
func Exit(code int) {
	if code == 0 {
		if err := goleak.Find(ignored...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
