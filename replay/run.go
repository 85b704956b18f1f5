package replay

import (
	"context"
	"errors"
	"fmt"
	"runtime/metrics"
	"time"

	"github.com/floodgate/floodgate/policy"
)

// Defaults for the zero Options.
const (
	DefaultWindow    = 10 * time.Second
	DefaultTolerance = 2 * time.Millisecond
	DefaultTop       = 10
)

// DefaultDeniedStatuses are the statuses that mean "refused by a limit" in
// a log that does not say: 429, and 503 (NGINX's limit_req_status by
// default).
var DefaultDeniedStatuses = []int{429, 503}

// Options configure a replay. Policy and Logs are required.
type Options struct {
	// Policy decides the requests; PolicyName names it in the report.
	Policy     *policy.Policy
	PolicyName string
	// Compare, when set, decides the same requests too, and the report
	// lists those it decides differently (Report.Compare).
	Compare     *policy.Policy
	CompareName string
	// Logs are the log files, in any order (gzipped ones are read as
	// they are): several instances' logs, or rotated files.
	Logs []string
	// Format is auto (default), json, nginx, envoy or csv; LogFormat the
	// NGINX log_format or Envoy format string of a log that does not use
	// a predefined one.
	Format    string
	LogFormat string
	// DeniedStatuses are the statuses that mean "refused by a limit" in
	// logs without a decision field (default DefaultDeniedStatuses).
	DeniedStatuses []int
	// Window is how far out of order a log's lines may be (they are
	// written as requests end): the longest request (default
	// DefaultWindow).
	Window time.Duration
	// Tolerance is how far a logged time may be from the instant the live
	// limit decided (default DefaultTolerance, or the log's resolution if
	// coarser).
	Tolerance time.Duration
	// Top is the number of clients and keys listed (default DefaultTop).
	Top int
	// Progress, when set, is called about twice a second with how far the
	// replay got.
	Progress func(Progress)
	// OnFlip, when set, is called with every request the two policies
	// decide differently.
	OnFlip func(*Flip)
	// MemoryLimit, when set, is called once the replay's embedded stores
	// are made, with the policy file's server.memory.soft_limit, the bytes
	// the stores may hold together (each policy's max_bytes) and a
	// function that counts what they hold; the function it returns is
	// called when the replay ends. floodgate replay sets the process's
	// soft memory limit with it, as floodgate serve does, so that the
	// garbage of evicted counters is collected before the process grows
	// past the cap and a tenth.
	MemoryLimit func(mode string, capBytes int64, held func() int64) (stop func())
}

// Progress says how far a replay got.
type Progress struct {
	// Read and Size are the bytes of the logs read so far and in all
	// (of the files as stored: gzipped ones compressed).
	Read, Size int64
	// Requests counts the requests replayed.
	Requests int64
	// Elapsed is the time since the replay started.
	Elapsed time.Duration
}

// Run replays the logs through the policy (and the other one, if any) and
// reports what it found.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Policy == nil {
		return nil, errors.New("replay: a policy is required")
	}
	if len(o.Logs) == 0 {
		return nil, errors.New("replay: no log to replay")
	}
	if o.DeniedStatuses == nil {
		o.DeniedStatuses = DefaultDeniedStatuses
	}
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.Tolerance <= 0 {
		o.Tolerance = DefaultTolerance
	}
	if o.Top <= 0 {
		o.Top = DefaultTop
	}
	started := time.Now()

	ro := readOptions{format: o.Format, logFormat: o.LogFormat, denied: o.DeniedStatuses}
	var srcs []*source
	defer func() {
		for _, s := range srcs {
			s.halt()
		}
	}()
	names := make([]string, len(o.Logs))
	for i, name := range o.Logs {
		s, br, err := openSource(name, i, ro)
		if err != nil {
			return nil, err
		}
		srcs = append(srcs, s)
		names[i] = name
		go s.run(br)
	}

	main, err := NewReplayer(o.Policy)
	if err != nil {
		return nil, err
	}
	defer main.Close()
	t := newTally(o.Policy, o.PolicyName)
	var other *Replayer
	var ot *tally
	var cp *comparer
	if o.Compare != nil {
		if other, err = NewReplayer(o.Compare); err != nil {
			return nil, err
		}
		defer other.Close()
		ot = newTally(o.Compare, o.CompareName)
		cp = newComparer(o.CompareName, names, o.Policy.Server().IPv6Prefix)
	}

	if o.MemoryLimit != nil {
		capBytes, held := main.capBytes(), main.storeBytes
		if other != nil {
			capBytes += other.capBytes()
			held = func() int64 { return main.storeBytes() + other.storeBytes() }
		}
		defer o.MemoryLimit(o.Policy.Server().Memory.SoftLimit, capBytes, held)()
	}

	m := newMerger(ctx, srcs, o.Window)
	// With decisions in the log, both policies are checked against it:
	// each decides a boundary the way the log does (see checker.check),
	// so that a policy compared with itself flips nothing.
	var ck, ock *checker
	var peakHeap uint64
	heap := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	lastProgress := started
	var rec Record
	for n := int64(1); ; n++ {
		ok, err := m.next(&rec)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		if rec.Logged != LoggedUnknown && ck == nil {
			tol := o.Tolerance
			for _, s := range srcs {
				tol = max(tol, s.resolution())
			}
			ck = newChecker(tol, names)
			if other != nil {
				ock = newChecker(tol, names)
			}
		}
		main.prepare(&rec)
		var out *Outcome
		if ck != nil {
			out = ck.check(main, &rec)
		} else {
			out = main.decide(&rec)
		}
		t.add(&rec, out)
		if other != nil {
			var ob *Outcome
			if ock != nil {
				other.prepare(&rec)
				ob = ock.check(other, &rec)
			} else {
				ob = other.Decide(&rec)
			}
			ot.add(&rec, ob)
			if f := cp.add(&rec, out, ob); f != nil && o.OnFlip != nil {
				o.OnFlip(f)
			}
		}
		if n&0xffff == 0 {
			metrics.Read(heap)
			if heap[0].Value.Kind() == metrics.KindUint64 {
				peakHeap = max(peakHeap, heap[0].Value.Uint64())
			}
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("replay: %w", err)
			}
		}
		if n&0x3fff == 0 && o.Progress != nil {
			if now := time.Now(); now.Sub(lastProgress) >= 500*time.Millisecond {
				lastProgress = now
				o.Progress(progressOf(srcs, n, now.Sub(started)))
			}
		}
	}
	metrics.Read(heap)
	if heap[0].Value.Kind() == metrics.KindUint64 {
		peakHeap = max(peakHeap, heap[0].Value.Uint64())
	}
	r := t.finish(o.Top)
	for _, s := range srcs {
		s.mu.Lock()
		r.Logs = append(r.Logs, LogSummary{Name: s.name, Format: s.format, Lines: s.lines.Load(), Skipped: s.skipped,
			Samples: append([]string(nil), s.samples...), Resolution: Duration(s.resolution())})
		s.mu.Unlock()
	}
	if ck != nil {
		r.Agreement = ck.a
	}
	if cp != nil {
		c := cp.finish()
		c.Limits = ot.finish(o.Top).Limits
		r.Compare = c
	}
	r.Late, r.MaxLate = m.late, Duration(m.maxLate)
	r.Resources = Resources{Elapsed: Duration(time.Since(started)), PeakKeys: main.PeakKeys(), PeakHeld: m.maxHeld, PeakHeapBytes: peakHeap}
	if o.Progress != nil {
		o.Progress(progressOf(srcs, r.Requests, time.Since(started)))
	}
	return r, nil
}

// Records reads the logs as Run does (Options.Logs, Format, LogFormat,
// DeniedStatuses and Window) and calls fn with every record in order of
// arrival; fn must not keep the record. An error of fn stops the reading
// and is returned.
func Records(ctx context.Context, o Options, fn func(*Record) error) error {
	if o.DeniedStatuses == nil {
		o.DeniedStatuses = DefaultDeniedStatuses
	}
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	ro := readOptions{format: o.Format, logFormat: o.LogFormat, denied: o.DeniedStatuses}
	var srcs []*source
	defer func() {
		for _, s := range srcs {
			s.halt()
		}
	}()
	for i, name := range o.Logs {
		s, br, err := openSource(name, i, ro)
		if err != nil {
			return err
		}
		srcs = append(srcs, s)
		go s.run(br)
	}
	m := newMerger(ctx, srcs, o.Window)
	var rec Record
	for n := 0; ; n++ {
		ok, err := m.next(&rec)
		if err != nil || !ok {
			return err
		}
		if err := fn(&rec); err != nil {
			return err
		}
		if n&0xffff == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("replay: %w", err)
			}
		}
	}
}

func progressOf(srcs []*source, n int64, elapsed time.Duration) Progress {
	p := Progress{Requests: n, Elapsed: elapsed}
	for _, s := range srcs {
		p.Read += s.read.Load()
		p.Size += s.size
	}
	return p
}
