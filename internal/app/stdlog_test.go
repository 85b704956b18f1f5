package app

import (
	"bytes"
	"encoding/json"
	"log"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestStdLogLinesAreHeldBackAndCut: lines of the log package that a peer
// can cause (net/http's transport logs an upstream's unasked bytes) reach
// the process's log as warnings of its own format, one a second however
// many come, the next saying how many were held back, each cut to 256
// bytes.
func TestStdLogLinesAreHeldBackAndCut(t *testing.T) {
	var out bytes.Buffer
	now := time.Unix(1_700_000_000, 0)
	w := newStdLogWriter(slog.New(slog.NewJSONHandler(&out, nil)), func() time.Time { return now })
	l := log.New(w, "", 0)
	long := strings.Repeat("x", 10_000)
	for range 1000 {
		l.Printf("Unsolicited response received on idle HTTP channel starting with %q", long)
	}
	now = now.Add(time.Second)
	l.Print("one more")

	var lines []map[string]any
	for _, s := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatalf("not a line of the logger's format: %q", s)
		}
		lines = append(lines, m)
	}
	if len(lines) != 2 {
		t.Fatalf("%d lines logged, want 2 (one a second): %s", len(lines), out.String())
	}
	if lines[0]["level"] != "WARN" || len(lines[0]["line"].(string)) > stdLogMaxBytes || lines[0]["cut_at"] != float64(stdLogMaxBytes) {
		t.Errorf("the first line: %v", lines[0])
	}
	if lines[1]["line"] != "one more" || lines[1]["held_back"] != float64(999) {
		t.Errorf("the second line: %v", lines[1])
	}
}
