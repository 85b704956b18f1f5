package accesslog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Defaults for the zero Options.
const (
	DefaultMaxSize       = 100 << 20
	DefaultMaxFiles      = 5
	DefaultBufferSize    = 4 << 20
	DefaultFlushInterval = 100 * time.Millisecond
)

// Options configure a Logger. Either Path or Out is required.
type Options struct {
	// Path is the log file, appended to and rotated by size.
	Path string
	// Out is written to when Path is empty (standard output, say); it is
	// never rotated.
	Out io.Writer
	// Format is the layout of the lines (default FormatJSON).
	Format Format
	// MaxSize is the size in bytes past which the file is rotated (0:
	// DefaultMaxSize; negative: never).
	MaxSize int64
	// MaxFiles is the number of rotated files kept, FILE.1 the newest
	// (0: DefaultMaxFiles).
	MaxFiles int
	// BufferSize is how many bytes of records wait in memory for the
	// writer; records beyond it are dropped and counted (0:
	// DefaultBufferSize).
	BufferSize int
	// FlushInterval is how often the buffer is written out at the latest
	// (0: DefaultFlushInterval).
	FlushInterval time.Duration
	// Logger receives write and rotation errors, at most one a second
	// (default: discard).
	Logger *slog.Logger
}

// Stats are a Logger's counters.
type Stats struct {
	// Records counts the records written out (or waiting to be).
	Records uint64
	// Dropped counts the records dropped because the buffer was full.
	Dropped uint64
	// Rotations counts the files rotated.
	Rotations uint64
	// Errors counts failed writes and rotations.
	Errors uint64
}

// Logger writes an access log without making requests wait on the disk.
// It is safe for concurrent use.
type Logger struct {
	opts   Options
	format func([]byte, *Record) []byte
	log    *slog.Logger

	mu      sync.Mutex // guards buf and closed
	buf     []byte
	closed  bool
	flushAt int

	kick chan struct{}
	stop chan struct{}
	done chan struct{}

	scratch sync.Pool // *[]byte

	// Written by the writer goroutine only.
	file     *os.File
	size     int64
	rotates  bool // file is a regular file: rotated by size
	torn     bool // the file ends within a line a failed write began
	lastWarn time.Time

	// open is file, for Close to end a write that waits on a reader;
	// abandon, set by Close, drops what is left unwritten.
	open    atomic.Pointer[os.File]
	abandon atomic.Bool

	records, dropped, rotations, errs atomic.Uint64
}

// New opens the log (creating the file if needed) and starts its writer.
func New(o Options) (*Logger, error) {
	if o.Path == "" && o.Out == nil {
		return nil, errors.New("accesslog: a path or a writer is required")
	}
	if o.MaxSize == 0 {
		o.MaxSize = DefaultMaxSize
	}
	if o.MaxFiles <= 0 {
		o.MaxFiles = DefaultMaxFiles
	}
	if o.BufferSize <= 0 {
		o.BufferSize = DefaultBufferSize
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = DefaultFlushInterval
	}
	l := &Logger{opts: o, log: o.Logger, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	switch o.Format {
	case FormatJSON:
		l.format = AppendJSON
	case FormatCombined:
		l.format = AppendCombined
	default:
		return nil, fmt.Errorf("accesslog: unknown format %d", o.Format)
	}
	// Wake the writer when a quarter of the buffer is waiting, so that a
	// burst seldom fills it before a write.
	l.flushAt = max(o.BufferSize/4, 1)
	l.scratch.New = func() any { b := make([]byte, 0, 512); return &b }
	if o.Path != "" {
		if err := l.openFile(); err != nil {
			return nil, err
		}
	}
	go l.run()
	return l, nil
}

// Log formats r and queues it for writing. It never waits for the disk:
// when the buffer is full the record is dropped and counted. Log after
// Close drops the record.
func (l *Logger) Log(r *Record) {
	bp := l.scratch.Get().(*[]byte)
	line := l.format((*bp)[:0], r)
	l.mu.Lock()
	if l.closed || len(l.buf)+len(line) > l.opts.BufferSize {
		l.mu.Unlock()
		l.dropped.Add(1)
	} else {
		l.buf = append(l.buf, line...)
		wake := len(l.buf) >= l.flushAt
		l.mu.Unlock()
		l.records.Add(1)
		if wake {
			select {
			case l.kick <- struct{}{}:
			default:
			}
		}
	}
	if cap(line) <= 64<<10 {
		*bp = line[:0]
		l.scratch.Put(bp)
	}
}

// Stats returns the logger's counters.
func (l *Logger) Stats() Stats {
	return Stats{Records: l.records.Load(), Dropped: l.dropped.Load(), Rotations: l.rotations.Load(), Errors: l.errs.Load()}
}

// CloseWait is how long Close waits for the writer to write out what is
// buffered: a log that is a pipe (a named pipe, or standard output given
// as /dev/stdout) whose reader stopped reading makes the write wait, and
// past this Close ends it, dropping what was left, so that a gateway
// always stops.
const CloseWait = 5 * time.Second

// Close writes out what is buffered, closes the file and stops the
// writer, in CloseWait at most. It is safe to call twice.
func (l *Logger) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		<-l.done
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	close(l.stop)
	select {
	case <-l.done:
	case <-time.After(CloseWait):
		// Closing a pipe ends the write that waits on it (the file was
		// opened non-blocking, so the runtime's poller holds the wait),
		// and the writer drops the rest.
		l.abandon.Store(true)
		for {
			// Again until the writer is done: it may have opened the
			// file again just before it saw abandon.
			if f := l.open.Load(); f != nil {
				f.Close()
			}
			select {
			case <-l.done:
				return fmt.Errorf("accesslog: close: the log took no more lines for %v (a pipe whose reader stopped, a stalled disk); the rest were dropped", CloseWait)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	if l.file != nil {
		if err := l.file.Close(); err != nil {
			return fmt.Errorf("accesslog: close: %w", err)
		}
	}
	return nil
}

// run is the writer: it swaps the buffer for an empty one and writes it
// out, every FlushInterval or when Log says it is filling, until Close.
func (l *Logger) run() {
	defer close(l.done)
	t := time.NewTicker(l.opts.FlushInterval)
	defer t.Stop()
	var spare []byte
	for {
		stopping := false
		select {
		case <-l.kick:
		case <-t.C:
		case <-l.stop:
			stopping = true
		}
		l.mu.Lock()
		out := l.buf
		l.buf = spare[:0]
		l.mu.Unlock()
		if len(out) > 0 {
			l.write(out)
		}
		spare = out
		if cap(spare) > 4*l.opts.BufferSize {
			spare = nil
		}
		if stopping {
			return
		}
	}
}

// write writes whole lines out, rotating the file first when they would
// take it past MaxSize.
func (l *Logger) write(b []byte) {
	if l.abandon.Load() {
		return
	}
	if l.opts.Path == "" {
		if _, err := l.opts.Out.Write(b); err != nil {
			l.fail("write", err)
		}
		return
	}
	if l.rotates && l.opts.MaxSize > 0 && l.size > 0 && l.size+int64(len(b)) > l.opts.MaxSize {
		if err := l.rotate(); err != nil {
			l.fail("rotate", err)
		}
	}
	if l.file == nil {
		if err := l.openFile(); err != nil {
			l.fail("open", err)
			return
		}
	}
	if l.torn {
		// The last write ended within a line that could not be cut off:
		// end it, so that the next record is a line of its own.
		if _, err := l.file.Write([]byte{'\n'}); err != nil {
			l.fail("write", err)
			l.file.Close()
			l.file = nil
			l.open.Store(nil)
			return
		}
		l.size++
		l.torn = false
	}
	n, err := l.file.Write(b)
	l.size += int64(n)
	if err != nil {
		l.fail("write", err)
		if n > 0 {
			l.cutTorn(b[:n])
		}
		// Opened again at the next write: a pipe's new reader, a disk
		// with room again.
		l.file.Close()
		l.file = nil
		l.open.Store(nil)
	}
}

// cutTorn removes what a failed write left of a line it did not finish
// (a full disk takes part of a write), so that the file holds whole
// lines only and the next record does not run on from that part. A file
// that cannot be cut (a pipe, a device) ends the part with a newline at
// the next write instead.
func (l *Logger) cutTorn(written []byte) {
	torn := int64(len(written) - (bytes.LastIndexByte(written, '\n') + 1))
	if torn == 0 {
		return
	}
	if l.rotates {
		if fi, err := l.file.Stat(); err == nil && fi.Size() >= torn {
			if err := l.file.Truncate(fi.Size() - torn); err == nil {
				l.size = fi.Size() - torn
				return
			}
		}
	}
	l.torn = true
}

// openFile opens (or creates) the log file for appending. It does not
// block: a named pipe with no reader is an error (ENXIO), tried again at
// the next write. Only a regular file is rotated: a pipe or a device
// (/dev/stdout) is written to as it is, never renamed.
func (l *Logger) openFile() error {
	f, err := os.OpenFile(l.opts.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NONBLOCK, 0o640)
	if errors.Is(err, syscall.ENXIO) {
		return fmt.Errorf("accesslog: %w (a named pipe that no process reads)", err)
	}
	if err != nil {
		return fmt.Errorf("accesslog: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("accesslog: %w", err)
	}
	l.file, l.size, l.rotates = f, fi.Size(), fi.Mode().IsRegular()
	l.open.Store(f)
	return nil
}

// rotate renames FILE to FILE.1 (shifting the older ones up and removing
// the one past MaxFiles) and opens a new FILE. Only the rotated files
// that exist, FILE.1 up to the first one missing, are shifted: a rotation
// takes as many renames as there are files to keep, however large
// MaxFiles is.
func (l *Logger) rotate() error {
	if l.file != nil {
		l.file.Close()
		l.file = nil
		l.open.Store(nil)
	}
	p := l.opts.Path
	name := func(i int) string { return p + "." + strconv.Itoa(i) }
	n := 0 // FILE.1 ... FILE.n exist
	for n < l.opts.MaxFiles {
		if _, err := os.Lstat(name(n + 1)); errors.Is(err, os.ErrNotExist) {
			break
		} else if err != nil {
			return fmt.Errorf("accesslog: %w", err)
		}
		n++
	}
	if n == l.opts.MaxFiles {
		if err := os.Remove(name(n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("accesslog: %w", err)
		}
		n--
	}
	for i := n; i >= 1; i-- {
		if err := os.Rename(name(i), name(i+1)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("accesslog: %w", err)
		}
	}
	if err := os.Rename(p, name(1)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("accesslog: %w", err)
	}
	l.rotations.Add(1)
	l.torn = false
	return l.openFile()
}

// fail counts an error and logs it, at most once a second.
func (l *Logger) fail(what string, err error) {
	l.errs.Add(1)
	if now := time.Now(); now.Sub(l.lastWarn) >= time.Second {
		l.lastWarn = now
		l.log.Warn("accesslog: "+what, "err", err, "path", l.opts.Path)
	}
}
