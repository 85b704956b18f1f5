package keystore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/internal/redisconn"
	"github.com/floodgate/floodgate/internal/regfile"
)

// Backend keeps the records. Version changes whenever a record does, in
// this process or another one sharing the backend.
type Backend interface {
	// Load returns every record and the version they are at.
	Load(ctx context.Context) ([]Record, string, error)
	// Swap writes r (adds or replaces the record named r.Name) if the
	// stored one is still old (nil: there is none), and returns the
	// versions before and after the write; otherwise it writes nothing and
	// returns ErrConflict.
	Swap(ctx context.Context, old *Record, r Record) (from, to string, err error)
	// Add writes r if no record is named r.Name and the backend holds
	// fewer than most records (most <= 0: no bound), counting those other
	// instances sharing it wrote, and returns the versions before and
	// after; otherwise it writes nothing and returns ErrConflict (a record
	// has the name) or ErrFull.
	Add(ctx context.Context, r Record, most int) (from, to string, err error)
	// Delete removes the record named old.Name if the stored one is still
	// old, and returns the versions before and after; otherwise it removes
	// nothing and returns ErrConflict.
	Delete(ctx context.Context, old Record) (from, to string, err error)
	// Version returns the current version, cheaply.
	Version(ctx context.Context) (string, error)
}

// ErrConflict reports that a record changed since it was read (Swap).
var ErrConflict = errors.New("keystore: the key changed meanwhile")

// sameRecord reports whether the stored record cur (nil: none) is old
// (nil: none), compared by their JSON so that a record read back equals
// the one written.
func sameRecord(cur, old *Record) (bool, error) {
	if cur == nil || old == nil {
		return cur == nil && old == nil, nil
	}
	a, err := json.Marshal(cur)
	if err != nil {
		return false, fmt.Errorf("keystore: %w", err)
	}
	b, err := json.Marshal(old)
	if err != nil {
		return false, fmt.Errorf("keystore: %w", err)
	}
	return bytes.Equal(a, b), nil
}

// FileBackend keeps the records in a JSON file, written by atomic rename.
// Its compare-and-swap holds within one process (every Store of the
// process sharing the FileBackend); two processes writing the same file
// are not guarded against each other.
type FileBackend struct {
	path   string
	mu     sync.Mutex // serialises reads and writes of the file; guards writes
	writes uint64     // the writes made through b, a part of the version
}

// NewFileBackend keeps the records in path (created on the first write).
func NewFileBackend(path string) *FileBackend { return &FileBackend{path: path} }

type fileData struct {
	Keys []Record `json:"keys"`
}

// Load reads the file; a missing file holds no keys.
func (b *FileBackend) Load(context.Context) ([]Record, string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.loadLocked()
}

// loadLocked is Load with b.mu held.
func (b *FileBackend) loadLocked() ([]Record, string, error) {
	data, err := regfile.Read(b.path, regfile.Own)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("keystore: %w", err)
	}
	var fd fileData
	if err := json.Unmarshal(data, &fd); err != nil {
		return nil, "", fmt.Errorf("keystore: %s: %w", b.path, err)
	}
	// A name listed twice (files merged or a record copied by hand) is
	// refused: one record would be served and the other changed, so a
	// revocation could miss the record a later start serves.
	seen := make(map[string]bool, len(fd.Keys))
	for _, r := range fd.Keys {
		if seen[r.Name] {
			return nil, "", fmt.Errorf("keystore: %s: key %q is listed twice", b.path, r.Name)
		}
		seen[r.Name] = true
	}
	v, err := b.versionLocked()
	return fd.Keys, v, err
}

// Swap rewrites the file with r added or replaced, if the file's record
// named r.Name is still old.
func (b *FileBackend) Swap(_ context.Context, old *Record, r Record) (from, to string, err error) {
	return b.write(r.Name, old, &r, 0)
}

// Add rewrites the file with r added, if no record is named r.Name and
// the file holds fewer than most records (most <= 0: no bound).
func (b *FileBackend) Add(_ context.Context, r Record, most int) (from, to string, err error) {
	return b.write(r.Name, nil, &r, most)
}

// Delete rewrites the file without the record named old.Name, if it is
// still old.
func (b *FileBackend) Delete(_ context.Context, old Record) (from, to string, err error) {
	return b.write(old.Name, &old, nil, 0)
}

// write rewrites the file with the record named name replaced by r (nil:
// removed), if it is still old; a record added (old nil) only while the
// file holds fewer than most (most <= 0: no bound).
func (b *FileBackend) write(name string, old, r *Record, most int) (from, to string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	recs, from, err := b.loadLocked()
	if err != nil {
		return "", "", err
	}
	at := -1
	var cur *Record
	for i := range recs {
		if recs[i].Name == name {
			cur, at = &recs[i], i
		}
	}
	if same, err := sameRecord(cur, old); err != nil {
		return "", "", err
	} else if !same {
		return "", "", ErrConflict
	}
	if cur == nil && most > 0 && len(recs) >= most {
		return "", "", ErrFull
	}
	switch {
	case r == nil:
		recs = append(recs[:at], recs[at+1:]...)
	case cur != nil:
		*cur = *r
	default:
		recs = append(recs, *r)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Name < recs[j].Name })
	data, err := json.MarshalIndent(fileData{Keys: recs}, "", "  ")
	if err != nil {
		return "", "", fmt.Errorf("keystore: %w", err)
	}
	if err := writeAtomic(b.path, append(data, '\n')); err != nil {
		return "", "", err
	}
	b.writes++
	to, err = b.versionLocked()
	return from, to, err
}

// Version is the file's size and modification time, and the count of
// writes made through b (two writes within one tick of the file system's
// clock may leave the same size and time).
func (b *FileBackend) Version(context.Context) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.versionLocked()
}

// versionLocked is Version with b.mu held.
func (b *FileBackend) versionLocked() (string, error) {
	st, err := os.Stat(b.path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("keystore: %w", err)
	}
	return strconv.FormatInt(st.Size(), 10) + "@" + strconv.FormatInt(st.ModTime().UnixNano(), 10) +
		"#" + strconv.FormatUint(b.writes, 10), nil
}

// writeAtomic replaces path with data, durably (a revocation confirmed
// stays revoked across a crash), 0600: the file lists key hashes.
func writeAtomic(path string, data []byte) error {
	if err := regfile.WriteAtomic(path, data, 0o600); err != nil {
		return fmt.Errorf("keystore: write %s: %w", path, err)
	}
	return nil
}

// Redis keys of the key store: the records, the count of changes, and
// the epoch of that count, the server's time when it was first needed. The
// epoch goes with the data: a Redis restarted empty, flushed, or an empty
// server in its place has none, and the next read or change sets another
// one, so that a count started again from zero is not taken for the one
// an instance has read. The prefix keeps them in one Cluster slot.
const (
	redisHash    = redisconn.Prefix + "keys"
	redisVersion = redisconn.Prefix + "keys:version"
	redisEpoch   = redisconn.Prefix + "keys:epoch"
	// RedisChannel carries the new version after each change.
	RedisChannel = redisconn.Prefix + "keys:changed"
)

// RedisBackend keeps the records in a Redis hash (one JSON value per key
// name), with a version counter and a channel announcing changes.
type RedisBackend struct {
	c rueidis.Client
}

// NewRedisBackend keeps the records in the Redis c talks to.
func NewRedisBackend(c rueidis.Client) *RedisBackend { return &RedisBackend{c: c} }

// Load reads every record, and sets the version's epoch when there is
// none, so that the version read now stays the one of these records.
func (b *RedisBackend) Load(ctx context.Context) ([]Record, string, error) {
	res := b.c.DoMulti(ctx, b.c.B().Eval().Script(redisconn.EpochScript).Numkeys(1).Key(redisEpoch).Build(),
		b.c.B().Mget().Key(redisEpoch, redisVersion).Build(), b.c.B().Hgetall().Key(redisHash).Build())
	if err := res[0].Error(); err != nil {
		return nil, "", fmt.Errorf("keystore: redis: epoch: %w", err)
	}
	v, err := redisconn.StampOf(res[1])
	if err != nil {
		return nil, "", fmt.Errorf("keystore: redis: %w", err)
	}
	m, err := res[2].AsStrMap()
	if err != nil {
		return nil, "", fmt.Errorf("keystore: redis: %w", err)
	}
	recs := make([]Record, 0, len(m))
	for name, js := range m {
		var r Record
		if err := json.Unmarshal([]byte(js), &r); err != nil {
			return nil, "", fmt.Errorf("keystore: redis: key %q: %w", name, err)
		}
		recs = append(recs, r)
	}
	return recs, v, nil
}

// swapScript writes ARGV[3] as the record ARGV[1] ("": removes it) if the
// stored one is still ARGV[2] ("": none), increments the version (KEYS[2],
// of the epoch KEYS[3], set here when there is none) and announces it: {1,
// epoch before, count before, epoch, count after}; otherwise {0, the
// stored record}. A record added (ARGV[2] "") is written only while the
// hash holds fewer than ARGV[5] records (0: no bound); otherwise {2}.
var swapScript = rueidis.NewLuaScript(`
local cur = redis.call('HGET', KEYS[1], ARGV[1]) or ''
if cur ~= ARGV[2] then
	return {0, cur}
end
local most = tonumber(ARGV[5])
if ARGV[2] == '' and ARGV[3] ~= '' and most > 0 and redis.call('HLEN', KEYS[1]) >= most then
	return {2}
end
local was = redis.call('GET', KEYS[3]) or ''
local from = redis.call('GET', KEYS[2]) or ''
` + redisconn.SetEpoch(3) + `
if ARGV[3] == '' then
	redis.call('HDEL', KEYS[1], ARGV[1])
else
	redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
end
local to = redis.call('INCR', KEYS[2])
redis.call('PUBLISH', ARGV[4], to)
return {1, was, from, redis.call('GET', KEYS[3]), tostring(to)}
`)

// Swap writes r, increments the version and announces it, if the stored
// record named r.Name is still old: one script, so that no write of
// another instance comes in between.
func (b *RedisBackend) Swap(ctx context.Context, old *Record, r Record) (from, to string, err error) {
	js, err := json.Marshal(r)
	if err != nil {
		return "", "", fmt.Errorf("keystore: %w", err)
	}
	return b.write(ctx, r.Name, old, string(js), 0)
}

// Add writes r, increments the version and announces it, if no record is
// named r.Name and the hash holds fewer than most records (most <= 0: no
// bound): one script, so that no instance adds a record in between.
func (b *RedisBackend) Add(ctx context.Context, r Record, most int) (from, to string, err error) {
	js, err := json.Marshal(r)
	if err != nil {
		return "", "", fmt.Errorf("keystore: %w", err)
	}
	return b.write(ctx, r.Name, nil, string(js), most)
}

// Delete removes the record named old.Name, increments the version and
// announces it, if the stored record is still old: one script.
func (b *RedisBackend) Delete(ctx context.Context, old Record) (from, to string, err error) {
	return b.write(ctx, old.Name, &old, "", 0)
}

// write stores js (the JSON of a record; "": none, removing it) as the
// record named name if the stored one is still old (swapScript); a record
// added (old nil) only while the hash holds fewer than most (most <= 0: no
// bound).
func (b *RedisBackend) write(ctx context.Context, name string, old *Record, js string, most int) (from, to string, err error) {
	want := ""
	if old != nil {
		w, err := json.Marshal(old)
		if err != nil {
			return "", "", fmt.Errorf("keystore: %w", err)
		}
		want = string(w)
	}
	// A second attempt when the stored record is old written differently
	// (another encoder, or by hand).
	for range 2 {
		res, err := swapScript.Exec(ctx, b.c, []string{redisHash, redisVersion, redisEpoch}, []string{name, want, js, RedisChannel, strconv.Itoa(max(most, 0))}).ToArray()
		if err != nil {
			return "", "", fmt.Errorf("keystore: redis: %w", err)
		}
		if len(res) == 1 {
			return "", "", ErrFull
		}
		if len(res) == 5 {
			var s [4]string
			for i := range s {
				if s[i], err = res[i+1].ToString(); err != nil {
					return "", "", fmt.Errorf("keystore: redis: swap: %w", err)
				}
			}
			return redisconn.Stamp(s[0], s[1]), redisconn.Stamp(s[2], s[3]), nil
		}
		if len(res) != 2 {
			return "", "", fmt.Errorf("keystore: redis: swap: %d replies", len(res))
		}
		stored, err := res[1].ToString()
		if err != nil {
			return "", "", fmt.Errorf("keystore: redis: %w", err)
		}
		if stored == "" || old == nil {
			return "", "", ErrConflict
		}
		var cur Record
		if err := json.Unmarshal([]byte(stored), &cur); err != nil {
			return "", "", fmt.Errorf("keystore: redis: key %q: %w", name, err)
		}
		if same, err := sameRecord(&cur, old); err != nil {
			return "", "", err
		} else if !same {
			return "", "", ErrConflict
		}
		want = stored
	}
	return "", "", ErrConflict
}

// Version reads the version: its epoch and its count ("EPOCH:COUNT").
func (b *RedisBackend) Version(ctx context.Context) (string, error) {
	v, err := redisconn.StampOf(b.c.Do(ctx, b.c.B().Mget().Key(redisEpoch, redisVersion).Build()))
	if err != nil {
		return "", fmt.Errorf("keystore: redis: %w", err)
	}
	return v, nil
}

// Subscribe calls changed for every announced change until ctx ends; it
// returns when the subscription fails (the caller's poll covers the gap).
func (b *RedisBackend) Subscribe(ctx context.Context, changed func()) error {
	err := b.c.Receive(ctx, b.c.B().Subscribe().Channel(RedisChannel).Build(), func(rueidis.PubSubMessage) { changed() })
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("keystore: redis: subscribe: %w", err)
	}
	return nil
}

// pollInterval is how often a Store looks at its backend's version by
// default.
const pollInterval = 500 * time.Millisecond
