package admin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/internal/redisconn"
	"github.com/floodgate/floodgate/internal/regfile"
)

// Entry is one change in the audit log.
type Entry struct {
	// Time is when the change was made.
	Time time.Time `json:"time"`
	// Actor names the admin token that made it.
	Actor string `json:"actor"`
	// Action is what was done: key.create, key.revoke, key.rotate,
	// key.update, key.enable, key.disable, key.reset.
	Action string `json:"action"`
	// Target is the key changed.
	Target string `json:"target"`
	// Detail says what changed (never a secret).
	Detail map[string]any `json:"detail,omitempty"`
	// Instance names the process that made the change.
	Instance string `json:"instance,omitempty"`
}

// Query selects audit entries; zero fields select everything.
type Query struct {
	// Limit caps the entries returned, newest first (default 100).
	Limit int
	// Target and Action, when set, must match exactly.
	Target, Action string
	// Since, when set, drops older entries.
	Since time.Time
}

func (q *Query) match(e *Entry) bool {
	return (q.Target == "" || e.Target == q.Target) && (q.Action == "" || e.Action == q.Action) &&
		(q.Since.IsZero() || !e.Time.Before(q.Since))
}

// AuditLog keeps the audit entries, bounded: the oldest go first.
type AuditLog interface {
	Append(ctx context.Context, e Entry) error
	List(ctx context.Context, q Query) ([]Entry, error)
}

// DefaultAuditMax is how many entries an audit log keeps by default.
const DefaultAuditMax = 10000

// FileAudit keeps the audit log as JSON lines in a file, at most max
// entries (the file is compacted to the newest max lines when it holds
// twice as many). A line that cannot be read back is skipped and counted
// (Unreadable), never dropped by a compaction before its turn.
type FileAudit struct {
	path string
	max  int

	mu      sync.Mutex // guards lines, skipped, torn and the file
	lines   int        // lines in the file, -1 until counted
	skipped int        // lines the last List could not read
	// torn is set when the file may end within a line: an append cut
	// short (by a crash before this start, or a write that failed), so
	// that the next entry starts a line of its own instead of ending that
	// one, which would make both unreadable.
	torn bool
}

// NewFileAudit keeps up to max (0: DefaultAuditMax) entries in path.
func NewFileAudit(path string, max int) *FileAudit {
	if max <= 0 {
		max = DefaultAuditMax
	}
	return &FileAudit{path: path, max: max, lines: -1}
}

// MaxEntryBytes bounds an audit entry as written: a longer one has its
// long fields cut (see bound).
const MaxEntryBytes = 64 << 10

// maxFieldBytes bounds each string field of an entry that is too long, and
// each of its details (as JSON) before it is replaced by a digest.
const maxFieldBytes = 1 << 10

// encode is e as one JSON line's text, at most MaxEntryBytes long.
func encode(e Entry) ([]byte, error) {
	js, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("admin: audit: %w", err)
	}
	if len(js) <= MaxEntryBytes {
		return js, nil
	}
	js, err = json.Marshal(bound(e, len(js)))
	if err != nil {
		return nil, fmt.Errorf("admin: audit: %w", err)
	}
	return js, nil
}

// bound returns e, n bytes long as JSON, cut to fit MaxEntryBytes: each
// long string is cut with a marker, and each long detail is replaced by
// the size and SHA-256 of its JSON, so the entry still says who did what,
// and a detail can be matched against a copy of what was sent.
func bound(e Entry, n int) Entry {
	e.Actor, e.Action, e.Target, e.Instance = clip(e.Actor), clip(e.Action), clip(e.Target), clip(e.Instance)
	if e.Detail != nil {
		d := make(map[string]any, len(e.Detail))
		for k, v := range e.Detail {
			js, err := json.Marshal(v)
			if err != nil || len(js) > maxFieldBytes {
				sum := sha256.Sum256(js)
				v = map[string]any{"truncated": true, "bytes": len(js), "sha256": hex.EncodeToString(sum[:])}
			}
			d[clip(k)] = v
		}
		e.Detail = d
	}
	if js, err := json.Marshal(e); err != nil || len(js) > MaxEntryBytes {
		e.Detail = map[string]any{"truncated": true, "bytes": n}
	}
	return e
}

// clip cuts s to maxFieldBytes/8 bytes (every byte may take six as JSON)
// and marks the cut.
func clip(s string) string {
	const max = maxFieldBytes / 8
	if len(s) <= max {
		return s
	}
	return strings.ToValidUTF8(s[:max], "") + fmt.Sprintf("...[truncated, %d bytes]", len(s))
}

// Append adds e to the file.
func (a *FileAudit) Append(_ context.Context, e Entry) error {
	js, err := encode(e)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lines < 0 {
		lines, err := a.readLines()
		if err != nil {
			return err
		}
		a.lines = len(lines)
	}
	f, err := regfile.Append(a.path, 0o600)
	if err != nil {
		return fmt.Errorf("admin: audit: %w", err)
	}
	line := append(js, '\n')
	if a.torn {
		line = append([]byte{'\n'}, line...)
	}
	_, err = f.Write(line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		a.torn = true // some of the line may be written
		return fmt.Errorf("admin: audit: %w", err)
	}
	a.torn = false
	a.lines++
	if a.lines >= 2*a.max {
		return a.compact()
	}
	return nil
}

// compact keeps the newest max lines, as they are: a line that cannot be
// read back is kept as well (until it is among the oldest), never
// rewritten from what could be read. a.mu is held.
func (a *FileAudit) compact() error {
	lines, err := a.readLines()
	if err != nil {
		return err
	}
	if len(lines) > a.max {
		lines = lines[len(lines)-a.max:]
	}
	var b bytes.Buffer
	for _, l := range lines {
		b.Write(l)
		b.WriteByte('\n')
	}
	if err := regfile.WriteAtomic(a.path, b.Bytes(), 0o600); err != nil {
		return fmt.Errorf("admin: audit: %w", err)
	}
	a.lines, a.torn = len(lines), false
	return nil
}

// readLines reads the file's lines, oldest first, whatever their length;
// a torn last line is one too, and sets a.torn. a.mu is held.
func (a *FileAudit) readLines() ([][]byte, error) {
	data, err := regfile.Read(a.path, regfile.Own)
	if errors.Is(err, fs.ErrNotExist) {
		a.torn = false
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("admin: audit: %w", err)
	}
	a.torn = len(data) > 0 && data[len(data)-1] != '\n'
	var out [][]byte
	for len(data) > 0 {
		line, rest, _ := bytes.Cut(data, []byte{'\n'})
		if len(line) > 0 {
			out = append(out, line)
		}
		data = rest
	}
	return out, nil
}

// readAll reads every entry, oldest first, and counts the lines it
// skipped because they are not entries (a torn last line, a line from
// before entries were bounded that is too long to decode, a damaged one):
// a line that cannot be read never hides those after it. a.mu is held.
func (a *FileAudit) readAll() ([]Entry, int, error) {
	lines, err := a.readLines()
	if err != nil {
		return nil, 0, err
	}
	out := make([]Entry, 0, len(lines))
	skipped := 0
	for _, l := range lines {
		var e Entry
		if len(l) > maxReadBytes || json.Unmarshal(l, &e) != nil {
			skipped++
			continue
		}
		out = append(out, e)
	}
	return out, skipped, nil
}

// maxReadBytes is the longest line readAll decodes: far more than an entry
// written now can take (MaxEntryBytes), so that a line written before
// entries were bounded costs no more than this to skip.
const maxReadBytes = 1 << 20

// Unreadable returns how many lines of the file the last List skipped.
func (a *FileAudit) Unreadable() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.skipped
}

// List returns the entries q selects, newest first.
func (a *FileAudit) List(_ context.Context, q Query) ([]Entry, error) {
	a.mu.Lock()
	all, skipped, err := a.readAll()
	if err == nil {
		a.skipped = skipped
	}
	a.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if len(all) > a.max {
		all = all[len(all)-a.max:]
	}
	out := []Entry{}
	for i := len(all) - 1; i >= 0 && len(out) < q.limit(); i-- {
		if q.match(&all[i]) {
			out = append(out, all[i])
		}
	}
	return out, nil
}

func (q *Query) limit() int {
	if q.Limit <= 0 {
		return 100
	}
	return q.Limit
}

// redisAuditKey is the list of audit entries, newest first.
const redisAuditKey = redisconn.Prefix + "audit"

// RedisAudit keeps the audit log in a Redis list shared by every instance,
// trimmed to max entries.
type RedisAudit struct {
	c   rueidis.Client
	max int
}

// NewRedisAudit keeps up to max (0: DefaultAuditMax) entries in Redis.
func NewRedisAudit(c rueidis.Client, max int) *RedisAudit {
	if max <= 0 {
		max = DefaultAuditMax
	}
	return &RedisAudit{c: c, max: max}
}

// Append pushes e and trims the list.
func (a *RedisAudit) Append(ctx context.Context, e Entry) error {
	js, err := encode(e)
	if err != nil {
		return err
	}
	for _, r := range a.c.DoMulti(ctx,
		a.c.B().Lpush().Key(redisAuditKey).Element(string(js)).Build(),
		a.c.B().Ltrim().Key(redisAuditKey).Start(0).Stop(int64(a.max-1)).Build()) {
		if err := r.Error(); err != nil {
			return fmt.Errorf("admin: audit: redis: %w", err)
		}
	}
	return nil
}

// List returns the entries q selects, newest first.
func (a *RedisAudit) List(ctx context.Context, q Query) ([]Entry, error) {
	vals, err := a.c.Do(ctx, a.c.B().Lrange().Key(redisAuditKey).Start(0).Stop(int64(a.max-1)).Build()).AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("admin: audit: redis: %w", err)
	}
	out := []Entry{}
	for _, v := range vals {
		var e Entry
		if json.Unmarshal([]byte(v), &e) != nil || !q.match(&e) {
			continue
		}
		out = append(out, e)
		if len(out) == q.limit() {
			break
		}
	}
	return out, nil
}
