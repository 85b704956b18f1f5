package replay

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate/accesslog"
)

// Log formats Options.Format names.
const (
	FormatAuto  = "auto"
	FormatJSON  = "json"
	FormatNginx = "nginx"
	FormatEnvoy = "envoy"
	FormatCSV   = "csv"
)

// lineParser reads one line of a log into a record.
type lineParser interface {
	// parse fills rec from line; errSkip for a line without a request.
	parse(line []byte, rec *Record) error
	// resolution is the precision of the times read so far.
	resolution() time.Duration
}

// batchSize is the number of records a reader hands over at once, or
// fewer when their lines add up to batchBytes: the batches read ahead
// hold records, and the records the strings of their lines, so that long
// lines (a client's long paths) do not multiply what is read ahead.
const (
	batchSize  = 1024
	batchBytes = 1 << 20
)

// batch is a run of records read from one source.
type batch struct {
	recs []Record
	err  error // a read error: the source ends with it
}

// maxLine is the longest line read (the size of a reader's buffer): a
// longer one is skipped as unreadable, so that a log without line breaks
// (a corrupt or decompressed file) cannot take memory without bound.
const maxLine = 1 << 20

// errLongLine marks a line longer than maxLine.
var errLongLine = errors.New("line longer than 1 MiB")

// maxSamples bounds the examples of unreadable lines a report keeps, and
// maxSampleBytes what each shows of why (which may quote the line).
const (
	maxSamples     = 5
	maxSampleBytes = 512
)

// source is one log being read, by a goroutine of its own.
type source struct {
	name   string
	index  int
	format string
	parser lineParser

	file  *os.File
	size  int64
	read  atomic.Int64 // bytes of the file read
	lines atomic.Int64
	out   chan *batch
	free  chan *batch
	stop  chan struct{}

	mu      sync.Mutex // guards skipped and samples
	skipped int64
	samples []string

	// res is the parser's resolution as of the last batch handed over.
	res atomic.Int64

	maxSeen int64 // the latest arrival seen (by the merger)
	done    bool
	// The merger's reading of the log's time: the latest end of a request
	// merged, and the lines held as possibly ahead of it, the latest
	// ending at aheadEnd (see merger.take).
	base     int64
	based    bool
	ahead    []Record
	aheadEnd int64
}

// resolution is the precision of the times read so far.
func (s *source) resolution() time.Duration { return time.Duration(s.res.Load()) }

// countingReader counts the bytes read from a file, for progress.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// readOptions say how to read logs.
type readOptions struct {
	format    string
	logFormat string
	denied    []int
}

// openSource opens a log, gunzipping it if it is gzipped, and works out
// its format from its first line when it is not given.
func openSource(name string, index int, o readOptions) (*source, *bufio.Reader, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, nil, fmt.Errorf("replay: %w", err)
	}
	s := &source{name: name, index: index, file: f, out: make(chan *batch, 4), free: make(chan *batch, 6), stop: make(chan struct{})}
	if fi, err := f.Stat(); err == nil {
		s.size = fi.Size()
	}
	var r io.Reader = countingReader{f, &s.read}
	br := bufio.NewReaderSize(r, maxLine)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("replay: %s: %w", name, err)
		}
		br = bufio.NewReaderSize(zr, maxLine)
	}
	first, err := firstLine(br)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("replay: %s: %w", name, err)
	}
	in := newInterner()
	format := o.format
	if format == "" || format == FormatAuto {
		format = detect(name, first, o.logFormat)
	}
	switch format {
	case FormatJSON:
		s.parser = newJSONParser(in)
	case FormatCSV:
		header, err := br.ReadSlice('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			f.Close()
			return nil, nil, fmt.Errorf("replay: %s: %w", name, err)
		}
		s.lines.Add(1)
		s.parser, err = newCSVParser(bytes.TrimRight(header, "\r\n"), o.denied, in)
		if err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("%w (in %s)", err, name)
		}
	case FormatNginx, FormatEnvoy:
		lf := o.logFormat
		if lf == "" {
			lf = guessTemplate(format, first, o.denied)
		}
		var t *logTemplate
		if strings.Contains(lf, "$") || (format == FormatNginx && !strings.Contains(lf, "%")) {
			t, err = compileNginx(lf, o.denied, in)
		} else {
			t, err = compileEnvoy(lf, o.denied, in)
		}
		if err != nil {
			f.Close()
			return nil, nil, err
		}
		s.parser = t
		if o.logFormat == "" && isOwnCombined(lf) {
			s.parser, err = newOwnCombined(t, lf, o.denied, in)
			if err != nil {
				f.Close()
				return nil, nil, err
			}
		}
		format = t.name
	default:
		f.Close()
		return nil, nil, fmt.Errorf("replay: unknown log format %q (want auto, json, nginx, envoy or csv)", format)
	}
	s.format = format
	return s, br, nil
}

// firstLine returns the first non-empty line without consuming it.
func firstLine(br *bufio.Reader) ([]byte, error) {
	for n := 4096; ; n *= 4 {
		b, err := br.Peek(n)
		for len(b) > 0 {
			line := b
			if i := bytes.IndexByte(b, '\n'); i >= 0 {
				line, b = b[:i], b[i+1:]
			} else if err == nil {
				break // the line goes on past what was peeked
			} else {
				b = nil
			}
			if len(bytes.TrimSpace(line)) > 0 {
				return bytes.TrimRight(line, "\r"), nil
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, bufio.ErrBufferFull) {
				if errors.Is(err, bufio.ErrBufferFull) {
					return nil, errors.New("the first line is longer than 1 MiB")
				}
				return nil, nil // empty log
			}
			return nil, err
		}
	}
}

// detect works out a log's format from its name and first line.
func detect(name string, first []byte, logFormat string) string {
	switch {
	case logFormat != "" && strings.Contains(logFormat, "$"):
		return FormatNginx
	case logFormat != "" && strings.Contains(logFormat, "%"):
		return FormatEnvoy
	case len(first) > 0 && first[0] == '{':
		return FormatJSON
	case strings.HasSuffix(strings.TrimSuffix(name, ".gz"), ".csv"):
		return FormatCSV
	case len(first) > 21 && first[0] == '[' && first[5] == '-' && bytes.Contains(first, []byte(`] "`)):
		return FormatEnvoy
	}
	if _, err := newCSVParser(first, nil, newInterner()); err == nil && bytes.IndexByte(first, ',') > 0 {
		return FormatCSV
	}
	return FormatNginx
}

// guessTemplate picks the predefined format that reads the first line:
// Floodgate's combined, NGINX's main or combined, Envoy's default.
func guessTemplate(format string, first []byte, denied []int) string {
	if format == FormatEnvoy {
		return EnvoyDefault
	}
	for _, lf := range []string{accesslog.CombinedLogFormat, accesslog.CombinedLogFormatV2, accesslog.CombinedLogFormatV1, NginxMain, NginxCombined} {
		t, err := compileNginx(lf, denied, newInterner())
		if err != nil {
			continue
		}
		var rec Record
		if first == nil || t.parse(first, &rec) == nil {
			return lf
		}
	}
	return NginxCombined
}

// run reads the source to its end, a batch at a time, then closes out.
func (s *source) run(br *bufio.Reader) {
	defer close(s.out)
	defer s.file.Close()
	b := s.newBatch()
	size := 0 // the bytes of the lines of b
	line := s.lines.Load()
	fails := 0
	long := false // the line being read is longer than maxLine: its rest is dropped
	for {
		chunk, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = true
			continue
		}
		if long || len(chunk) > 0 {
			line++
			size += len(chunk)
			chunk = bytes.TrimRight(chunk, "\r\n")
			b.recs = append(b.recs, Record{Source: s.index, Line: line})
			rec := &b.recs[len(b.recs)-1]
			perr := errLongLine
			if !long {
				if perr = s.parser.parse(chunk, rec); perr == nil {
					perr = checkRange(rec)
				}
			}
			long = false
			if perr != nil {
				b.recs = b.recs[:len(b.recs)-1]
				if !errors.Is(perr, errSkip) {
					s.skip(line, perr)
					fails++
					if fails == 100 && line <= 100 {
						s.send(&batch{err: fmt.Errorf("replay: %s does not read as %s: the first 100 lines failed, as line 1 (%s)",
							s.name, s.format, s.samples[0])})
						return
					}
				}
			}
			if len(b.recs) == batchSize || size >= batchBytes && len(b.recs) > 0 {
				if !s.send(b) {
					return
				}
				b, size = s.newBatch(), 0
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				b.err = fmt.Errorf("replay: %s: %w", s.name, err)
			}
			break
		}
	}
	s.lines.Store(line)
	if len(b.recs) > 0 || b.err != nil {
		s.send(b)
	}
}

func (s *source) newBatch() *batch {
	select {
	case b := <-s.free:
		b.recs, b.err = b.recs[:0], nil
		return b
	default:
		return &batch{recs: make([]Record, 0, batchSize)}
	}
}

// recycle hands a used batch back to the reader, its records cleared
// so that a batch waiting to be reused holds no line's strings.
func (s *source) recycle(b *batch) {
	clear(b.recs)
	select {
	case s.free <- b:
	default:
	}
}

// halt stops the reading: the reader returns at its next batch, and a
// read under way (of a pipe that stalls) ends with the file closed.
func (s *source) halt() {
	close(s.stop)
	s.file.Close()
}

// send hands a batch over; false when the replay stopped.
func (s *source) send(b *batch) bool {
	s.lines.Store(b.lastLine(s.lines.Load()))
	s.res.Store(int64(s.parser.resolution()))
	select {
	case s.out <- b:
		return true
	case <-s.stop:
		return false
	}
}

func (b *batch) lastLine(def int64) int64 {
	if n := len(b.recs); n > 0 {
		return b.recs[n-1].Line
	}
	return def
}

// skip counts an unreadable line and keeps the first few.
func (s *source) skip(line int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.skipped++
	if len(s.samples) < maxSamples {
		s.samples = append(s.samples, fmt.Sprintf("%s:%d: %s", s.name, line, clip(err.Error(), maxSampleBytes)))
	}
}
