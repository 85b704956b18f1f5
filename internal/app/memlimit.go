package app

import (
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// The soft memory limit of floodgate serve (server.memory.soft_limit).
//
// Left to GOGC alone, the collector lets the heap grow to twice what is
// live before it collects: a store filled to server.memory.max_bytes by a
// flood of distinct keys, whose evicted keys and key pages are garbage,
// took the process's peak resident memory 1.84 to 1.99 times the cap past
// its baseline (scripts/bench-memory.sh, caps of 64 and 256 MiB). With soft_limit: auto (the default) serve sets the runtime's
// soft memory limit (debug.SetMemoryLimit) to the cap and a tenth of it
// for the store, plus what GOGC would give the rest of the process, and
// keeps it there as the rest grows and shrinks: the store's garbage is
// collected within a tenth of the cap, while the rest of the process (its
// connections, buffers and the runtime) is collected as GOGC says, so that
// many connections never push the heap against the limit. In a container
// (a cgroup with a memory limit) the limit never goes past nine tenths of
// the container's: grown past that by its connections, the process has
// the collector work to stay inside it rather than be killed by the
// kernel. GOMEMLIMIT in the environment takes precedence; soft_limit: off
// leaves the limit alone.

// SoftLimitFloor is the least that the soft memory limit allows the rest
// of the process beyond the store's share: the runtime's own structures
// and a collection cycle's allocations in a process that holds little
// else.
const SoftLimitFloor = 8 << 20

// softLimitEvery is how often the limit follows the process.
const softLimitEvery = time.Second

// containerEvery is how often the container's memory limit is read again,
// so that a pod resized in place (Kubernetes' resize of a running pod's
// resources) moves the ceiling without a restart.
var containerEvery = 10 * time.Second

// softMemoryLimit returns the soft memory limit for a process whose
// embedded store may hold capBytes and counts held bytes now, with
// heapLive bytes of heap live after the last collection, stackGlobals
// bytes of goroutine stacks and globals that the collector scans, and
// GOGC at gogc percent: capBytes and a tenth of it, plus what is live
// outside the store and gogc percent more of it (the heap GOGC would let
// that part grow to), at least SoftLimitFloor. The store's count bounds
// what it takes, so what is live outside it is never overestimated.
func softMemoryLimit(capBytes, held, heapLive, stackGlobals int64, gogc int64) int64 {
	if gogc < 0 {
		gogc = 100 // GOGC=off: the limit is the only trigger, give the rest the default's room
	}
	rest := max(heapLive-held, 0) + max(stackGlobals, 0)
	grown := satAdd(rest, satMul(rest, gogc)/100)
	return satAdd(satAdd(capBytes, capBytes/10), max(grown, SoftLimitFloor))
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func satMul(a, b int64) int64 {
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}

// processLimit is the runtime's soft memory limit, which belongs to the
// whole process: the serve instances that one process runs (as tests do)
// share it, and the last of them to stop puts back the limit found before
// the first started.
var processLimit struct {
	sync.Mutex
	owners int
	found  int64
}

// memLimit keeps the soft memory limit of one serve instance.
type memLimit struct {
	capBytes int64
	held     func() int64 // the embedded store's count of its bytes
	log      *slog.Logger
	samples  []metrics.Sample
	last     int64
	ceiling  int64 // the most the limit may be (0: none)
	capped   bool  // the ceiling held the limit at the last update
	noFit    bool  // the store's cap and its room alone pass the ceiling (told when it starts to)
	stop     chan struct{}
	done     chan struct{}

	// readContainer reads the container's memory limit (0: none); container
	// is the last value read, at readAt.
	readContainer func() int64
	container     int64
	readAt        time.Time
}

// StartMemLimit sets the process's soft memory limit as floodgate serve
// does, for embedded stores that may hold capBytes together and whose
// count held reports, and keeps it following the process until the
// returned function is called: floodgate replay's stores are kept as
// serve's are. mode is server.memory.soft_limit ("off" leaves the limit
// alone), and GOMEMLIMIT in the environment takes precedence.
func StartMemLimit(mode string, capBytes int64, held func() int64, log *slog.Logger) (stop func()) {
	return startMemLimit(mode, capBytes, held, os.Getenv,
		func() int64 { return containerMemoryMax(cgroupRoot, selfCgroupFile) }, log)
}

// startMemLimit sets the soft memory limit for a store capped at capBytes
// whose count held reports, and keeps it following the process until the
// returned function is called, unless mode is "off" or GOMEMLIMIT
// (getenv) is set: then it leaves the limit as it is. container reads the
// memory limit of the process's cgroup (containerMemoryMax; 0: none), at
// start and every containerEvery after: the soft limit stays within
// ceilingShare of it.
func startMemLimit(mode string, capBytes int64, held func() int64, getenv func(string) string, container func() int64, log *slog.Logger) (stop func()) {
	if mode == "off" {
		log.Info("soft memory limit off (server.memory.soft_limit)")
		return func() {}
	}
	if v := getenv("GOMEMLIMIT"); v != "" {
		log.Info("soft memory limit set by GOMEMLIMIT", "GOMEMLIMIT", v, "bytes", debug.SetMemoryLimit(-1))
		return func() {}
	}
	m := &memLimit{capBytes: capBytes, held: held, log: log, stop: make(chan struct{}), done: make(chan struct{}),
		readContainer: container, readAt: time.Now(),
		samples: []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"},
			{Name: "/gc/scan/globals:bytes"}, {Name: "/gc/gogc:percent"}}}
	m.setContainer(container())
	processLimit.Lock()
	if processLimit.owners == 0 {
		processLimit.found = debug.SetMemoryLimit(-1)
	}
	processLimit.owners++
	processLimit.Unlock()
	m.update()
	log.Info("soft memory limit", "bytes", m.last, "max_bytes", capBytes, "container_limit", m.container)
	go m.run()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(m.stop)
			<-m.done
			processLimit.Lock()
			if processLimit.owners--; processLimit.owners == 0 {
				debug.SetMemoryLimit(processLimit.found)
			}
			processLimit.Unlock()
		})
	}
}

func (m *memLimit) run() {
	defer close(m.done)
	t := time.NewTicker(softLimitEvery)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.update()
		}
	}
}

// setContainer takes v as the container's memory limit: the ceiling is
// ceilingShare of it, and a store whose cap and room alone no longer fit
// under it is told once, when that begins.
func (m *memLimit) setContainer(v int64) {
	m.container = max(v, 0)
	m.ceiling = int64(float64(m.container) * ceilingShare)
	noFit := m.ceiling > 0 && softMemoryLimit(m.capBytes, 0, 0, 0, 100) > m.ceiling
	if noFit && !m.noFit {
		m.log.Warn("server.memory.max_bytes does not fit the container's memory limit: the store's cap, a tenth of it and 8 MiB for the rest of the process are more than nine tenths of it; the collector will run often and the kernel may kill the process when the store fills. Raise the container's limit or lower max_bytes",
			"max_bytes", m.capBytes, "container_limit", m.container)
	}
	m.noFit = noFit
}

// update sets the limit from the latest collection's figures, and from
// the container's memory limit, read again every containerEvery.
func (m *memLimit) update() {
	if now := time.Now(); now.Sub(m.readAt) >= containerEvery {
		m.readAt = now
		if v := max(m.readContainer(), 0); v != m.container {
			m.log.Info("the container's memory limit changed; the soft memory limit follows it", "container_limit", v, "was", m.container)
			m.setContainer(v)
		}
	}
	metrics.Read(m.samples)
	u := func(i int) int64 {
		if m.samples[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return int64(min(m.samples[i].Value.Uint64(), math.MaxInt64))
	}
	live, stacks, globals := u(0), u(1), u(2)
	gogc := int64(100)
	if v := m.samples[3].Value; v.Kind() == metrics.KindUint64 {
		// GOGC=off reads as -1 made unsigned.
		gogc = int64(int32(v.Uint64()))
	}
	limit := softMemoryLimit(m.capBytes, m.held(), live, stacks+globals, gogc)
	capped := m.ceiling > 0 && limit > m.ceiling
	if capped {
		limit = m.ceiling
		if !m.capped && !m.noFit {
			m.log.Warn("soft memory limit held at nine tenths of the container's memory limit: the process holds more than the store's share and its room beside it (connections, buffers); the collector now works to keep it inside",
				"bytes", limit, "wanted", softMemoryLimit(m.capBytes, m.held(), live, stacks+globals, gogc))
		}
	}
	m.capped = capped
	if limit != m.last {
		processLimit.Lock()
		debug.SetMemoryLimit(limit)
		processLimit.Unlock()
		m.last = limit
	}
}
