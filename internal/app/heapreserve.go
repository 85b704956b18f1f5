package app

import (
	"log/slog"
	"sync"
)

// The heap reserve of floodgate rls (FLOODGATE_HEAP_RESERVE_MIB).
//
// The collector starts a cycle when the heap has grown by GOGC percent of
// what was live after the last one. The rate-limit service holds little
// (a few MiB: its configuration, the gRPC connections, the store's
// buffers) and allocates about 6 KB a decision, nearly all of it in
// grpc-go: at 35,000 decisions a second it collected 40 to 50 times a
// second, each cycle with its fixed costs (the pauses, the mark workers
// starting, the allocations' assists), about a tenth of its CPU. A
// reserve, a block of heap that the process holds and never touches,
// counts as live: the heap may grow by the reserve more before a cycle
// starts, so the cycles come several times less often. Its pages are
// never written, so it takes address space, not memory; what it costs in
// resident memory is the garbage it lets wait, at most its size.

// reserve is the process's one heap reserve: the rate-limit services that
// one process runs (as tests do) share it, and the last of them to stop
// lets it go.
var reserve struct {
	sync.Mutex
	owners int
	block  []byte
}

// holdHeapReserve holds a heap reserve of mib MiB until the returned
// function is called, unless mib is 0 or GOMEMLIMIT (getenv) is set: a
// reserve counts against the soft memory limit, which then governs the
// collector instead.
func holdHeapReserve(mib int, getenv func(string) string, log *slog.Logger) (release func()) {
	if mib <= 0 {
		return func() {}
	}
	if v := getenv("GOMEMLIMIT"); v != "" {
		log.Info("rls: no heap reserve: GOMEMLIMIT governs the collector", "GOMEMLIMIT", v)
		return func() {}
	}
	reserve.Lock()
	if reserve.owners == 0 || len(reserve.block) < mib<<20 {
		// Fresh pages from the system, never written: not resident.
		reserve.block = make([]byte, mib<<20)
	}
	reserve.owners++
	reserve.Unlock()
	log.Info("rls: heap reserve held (address space, not memory; FLOODGATE_HEAP_RESERVE_MIB)", "MiB", mib)
	var once sync.Once
	return func() {
		once.Do(func() {
			reserve.Lock()
			if reserve.owners--; reserve.owners == 0 {
				reserve.block = nil
			}
			reserve.Unlock()
		})
	}
}
