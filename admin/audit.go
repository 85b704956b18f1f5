package admin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/internal/redisconn"
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
// entries (the file is compacted when it holds twice as many).
type FileAudit struct {
	path string
	max  int

	mu    sync.Mutex // guards lines and the file
	lines int        // entries in the file, -1 until counted
}

// NewFileAudit keeps up to max (0: DefaultAuditMax) entries in path.
func NewFileAudit(path string, max int) *FileAudit {
	if max <= 0 {
		max = DefaultAuditMax
	}
	return &FileAudit{path: path, max: max, lines: -1}
}

// Append adds e to the file.
func (a *FileAudit) Append(_ context.Context, e Entry) error {
	js, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("admin: audit: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lines < 0 {
		all, err := a.readAll()
		if err != nil {
			return err
		}
		a.lines = len(all)
	}
	f, err := os.OpenFile(a.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("admin: audit: %w", err)
	}
	_, err = f.Write(append(js, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("admin: audit: %w", err)
	}
	a.lines++
	if a.lines >= 2*a.max {
		return a.compact()
	}
	return nil
}

// compact keeps the newest max entries. a.mu is held.
func (a *FileAudit) compact() error {
	all, err := a.readAll()
	if err != nil {
		return err
	}
	if len(all) > a.max {
		all = all[len(all)-a.max:]
	}
	var b bytes.Buffer
	for _, e := range all {
		js, _ := json.Marshal(e)
		b.Write(js)
		b.WriteByte('\n')
	}
	tmp := a.path + ".tmp"
	if err := os.WriteFile(tmp, b.Bytes(), 0o600); err != nil {
		return fmt.Errorf("admin: audit: %w", err)
	}
	if err := os.Rename(tmp, a.path); err != nil {
		return fmt.Errorf("admin: audit: %w", err)
	}
	a.lines = len(all)
	return nil
}

// readAll reads every entry, oldest first; a torn last line is skipped.
func (a *FileAudit) readAll() ([]Entry, error) {
	data, err := os.ReadFile(a.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("admin: audit: %w", err)
	}
	var out []Entry
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var e Entry
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			out = append(out, e)
		}
	}
	return out, nil
}

// List returns the entries q selects, newest first.
func (a *FileAudit) List(_ context.Context, q Query) ([]Entry, error) {
	a.mu.Lock()
	all, err := a.readAll()
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
	js, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("admin: audit: %w", err)
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
