package app

import (
	"log"
	"log/slog"
	"strings"
	"time"

	"github.com/floodgate/floodgate/internal/lograte"
)

// stdLogMaxBytes bounds the text kept of a line of the log package.
const stdLogMaxBytes = 256

// StdLog routes what the standard library's log package prints into l:
// net/http's transport prints there, for one, the bytes an upstream sent
// on an idle connection, which a client can make an upstream send. Each
// line becomes a warning of l's own format, at most one a second (the
// next that passes says how many were held back), its text cut to 256
// bytes: a peer can neither flood the log with them nor write its bytes
// into it at length. It changes the process's log package, so only the
// command calls it, never a program that embeds the gateway.
func StdLog(l *slog.Logger) {
	log.SetFlags(0)
	log.SetPrefix("")
	log.SetOutput(newStdLogWriter(l, time.Now))
}

// stdLogWriter is the log package's output under StdLog.
type stdLogWriter struct {
	l    *slog.Logger
	now  func() time.Time
	gate lograte.Gate
}

func newStdLogWriter(l *slog.Logger, now func() time.Time) *stdLogWriter {
	return &stdLogWriter{l: l, now: now}
}

// Write logs one line of the log package (it writes a line per call).
func (w *stdLogWriter) Write(p []byte) (int, error) {
	held, ok := w.gate.Pass(w.now())
	if !ok {
		return len(p), nil
	}
	line := p
	cut := len(line) > stdLogMaxBytes
	if cut {
		line = line[:stdLogMaxBytes]
	}
	args := []any{"line", strings.TrimRight(strings.ToValidUTF8(string(line), "\uFFFD"), "\n")}
	if cut {
		args = append(args, "cut_at", stdLogMaxBytes)
	}
	if held > 0 {
		args = append(args, "held_back", held)
	}
	w.l.Warn("go library", args...)
	return len(p), nil
}
