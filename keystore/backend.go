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
	"strings"
	"sync"
	"time"
	"unicode/utf8"

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
	// Changes returns what changed since the version since: the records
	// changed (as they are now), the names of those removed, and the
	// version they are at; nothing when the version is still since. full
	// says that the backend cannot tell every change since that version
	// (it keeps no log of them, its log does not reach back that far, or
	// the version is of another epoch): read every record (Load).
	Changes(ctx context.Context, since string) (changed []Record, gone []string, version string, full bool, err error)
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

// FileBackend keeps the records in a JSON file, written by atomic rename;
// a file that is a symbolic link is written where the link leads, and the
// link stays.
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
		return nil, "", fmt.Errorf("keystore: %s: %w", placeJSON(b.path, data, err), err)
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

// placeJSON returns path with the line and column (in characters) of the
// byte at which decoding data failed ("keys.json:7:15": a syntax error's
// offending byte, a value of the wrong type's last), when err says where,
// and path alone otherwise.
func placeJSON(path string, data []byte, err error) string {
	var off int64
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		off = syn.Offset
	case errors.As(err, &typ):
		off = typ.Offset
	default:
		return path
	}
	// Offset counts the bytes read when decoding failed, the byte that
	// failed it included.
	before := data[:min(max(off-1, 0), int64(len(data)))]
	line := bytes.Count(before, []byte{'\n'}) + 1
	col := utf8.RuneCount(before[bytes.LastIndexByte(before, '\n')+1:]) + 1
	return fmt.Sprintf("%s:%d:%d", path, line, col)
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

// Changes reports a full read when the file's version is not since: the
// file is read whole anyway.
func (b *FileBackend) Changes(ctx context.Context, since string) (changed []Record, gone []string, version string, full bool, err error) {
	v, err := b.Version(ctx)
	if err != nil {
		return nil, nil, "", false, err
	}
	return nil, nil, v, v != since, nil
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
// stays revoked across a crash), 0600: the file lists key hashes. A link
// at path is followed (regfile.WriteAtomic).
func writeAtomic(path string, data []byte) error {
	if err := regfile.WriteAtomic(path, data, 0o600); err != nil {
		return fmt.Errorf("keystore: write %s: %w", path, err)
	}
	return nil
}

// Redis keys of the key store: the records, the count of changes, the
// epoch of that count, and the log of the latest changes. The epoch is
// the server's time when the count was first needed; it goes with the
// data: a Redis restarted empty, flushed, or an empty server in its place
// has none, and the next read or change sets another one, so that a count
// started again from zero is not taken for the one an instance has read.
// The log is a sorted set of "COUNT:TAG:NAME", one member per change
// scored by the count it made, its oldest trimmed past changeLog members,
// so that an instance a few changes behind reads only the records that
// changed (RedisBackend.Changes) instead of every record. The tag is the
// server's time of the change, kept for the last one too and part of the
// version: a failover that lost the last changes, after which other
// changes make the count again, is told from the changes an instance
// read. The prefix keeps them in one Cluster slot.
const (
	redisHash    = redisconn.Prefix + "keys"
	redisVersion = redisconn.Prefix + "keys:version"
	redisEpoch   = redisconn.Prefix + "keys:epoch"
	redisChanges = redisconn.Prefix + "keys:changes"
	redisTag     = redisconn.Prefix + "keys:tag"
	// RedisChannel carries the new version after each change.
	RedisChannel = redisconn.Prefix + "keys:changed"
)

// changeLog is how many changes the log keeps: an instance further behind
// reads every record again.
const changeLog = 1000

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
		b.c.B().Mget().Key(redisEpoch, redisVersion, redisTag).Build(), b.c.B().Hgetall().Key(redisHash).Build())
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
// of the epoch KEYS[3], set here when there is none), tags the change with
// the server's time (KEYS[5]), logs it in KEYS[4] and announces it on the
// channel ARGV[4]: {1, epoch before, count before, tag before, epoch,
// count after, tag}; otherwise {0, the stored record}. A record added (ARGV[2] "") is written only while the
// hash holds fewer than ARGV[5] records (0: no bound); otherwise {2}.
var swapScript = rueidis.NewLuaScript(strings.ReplaceAll(`
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
local fromTag = redis.call('GET', KEYS[5]) or ''
`+redisconn.SetEpoch(3)+`
if ARGV[3] == '' then
	redis.call('HDEL', KEYS[1], ARGV[1])
else
	redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
end
local to = redis.call('INCR', KEYS[2])
local t = redis.call('TIME')
local tag = `+redisconn.MicrosOf("t")+`
redis.call('SET', KEYS[5], tag)
redis.call('ZADD', KEYS[4], to, to .. ':' .. tag .. ':' .. ARGV[1])
local logged = redis.call('ZCARD', KEYS[4])
if logged > CAP then
	redis.call('ZREMRANGEBYRANK', KEYS[4], 0, logged - CAP - 1)
end
redis.call('PUBLISH', ARGV[4], to)
return {1, was, from, fromTag, redis.call('GET', KEYS[3]), tostring(to), tag}
`, "CAP", strconv.Itoa(changeLog)))

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
		res, err := swapScript.Exec(ctx, b.c, []string{redisHash, redisVersion, redisEpoch, redisChanges, redisTag},
			[]string{name, want, js, RedisChannel, strconv.Itoa(max(most, 0))}).ToArray()
		if err != nil {
			return "", "", fmt.Errorf("keystore: redis: %w", err)
		}
		if len(res) == 1 {
			return "", "", ErrFull
		}
		if len(res) == 7 {
			var s [6]string
			for i := range s {
				if s[i], err = res[i+1].ToString(); err != nil {
					return "", "", fmt.Errorf("keystore: redis: swap: %w", err)
				}
			}
			return redisconn.TaggedStamp(s[0], s[1], s[2]), redisconn.TaggedStamp(s[3], s[4], s[5]), nil
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

// Version reads the version: its epoch, its count and the tag of the
// change that made the count ("EPOCH:COUNT:TAG").
func (b *RedisBackend) Version(ctx context.Context) (string, error) {
	v, err := redisconn.StampOf(b.c.Do(ctx, b.c.B().Mget().Key(redisEpoch, redisVersion, redisTag).Build()))
	if err != nil {
		return "", fmt.Errorf("keystore: redis: %w", err)
	}
	return v, nil
}

// changesScript reads what changed since the count ARGV[1] of the epoch
// ARGV[2], made by the change tagged ARGV[3]. KEYS: the version, its
// epoch, the log, the records, the tag of the last change. It returns
// {count, epoch, tag, 1} when the log cannot tell every change since then,
// else {count, epoch, tag, 0, name, record or false, ...}: each name
// changed once, with its record as it is now (false: removed). The log
// cannot tell when the epoch is another (a Redis emptied, whose count may
// have gone back and past the one asked for since), when the change that
// made the count asked for is not the one logged at it (a failover that
// lost the last changes, the count then made again by others), when the
// count went back, when it moved more than the log holds, and when the
// log holds fewer changes than the count moved: trimmed, or a change made
// without it (an instance of an earlier version during a rolling
// upgrade).
var changesScript = rueidis.NewLuaScript(strings.ReplaceAll(`
local v = tonumber(redis.call('GET', KEYS[1]) or '0')
local e = redis.call('GET', KEYS[2]) or ''
local tag = redis.call('GET', KEYS[5]) or ''
local since = tonumber(ARGV[1])
if e ~= ARGV[2] or not since or since > v or v - since > CAP then
	return {v, e, tag, 1}
end
if v == since then
	if tag ~= ARGV[3] then
		return {v, e, tag, 1}
	end
	return {v, e, tag, 0}
end
if since > 0 then
	local at = redis.call('ZRANGEBYSCORE', KEYS[3], since, since)
	if #at ~= 1 or string.match(at[1], '^%d+:(%d+):') ~= ARGV[3] then
		return {v, e, tag, 1}
	end
end
local log = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. ARGV[1], v)
if #log ~= v - since then
	return {v, e, tag, 1}
end
local out = {v, e, tag, 0}
local names, seen = {}, {}
for _, m in ipairs(log) do
	local name = string.match(m, '^%d+:%d+:(.*)$')
	if not name then
		return {v, e, tag, 1}
	end
	if not seen[name] then
		seen[name] = true
		names[#names + 1] = name
	end
end
local recs = redis.call('HMGET', KEYS[4], unpack(names))
for i, name in ipairs(names) do
	out[#out + 1] = name
	out[#out + 1] = recs[i]
end
return out
`, "CAP", strconv.Itoa(changeLog)))

// Changes reads the records changed since the version since, when the
// log of changes reaches back that far in the same epoch and still holds
// the change since was made by: one script, which reads only those
// records (HMGET), so that an instance a few changes behind does not read
// every key. Otherwise full is true.
func (b *RedisBackend) Changes(ctx context.Context, since string) (changed []Record, gone []string, version string, full bool, err error) {
	parts := strings.SplitN(since, ":", 3)
	if len(parts) != 3 {
		return nil, nil, "", true, nil
	}
	res, err := changesScript.Exec(ctx, b.c, []string{redisVersion, redisEpoch, redisChanges, redisHash, redisTag},
		[]string{parts[1], parts[0], parts[2]}).ToArray()
	if err != nil {
		return nil, nil, "", false, fmt.Errorf("keystore: redis: changes: %w", err)
	}
	if len(res) < 4 || len(res)%2 == 1 {
		return nil, nil, "", false, fmt.Errorf("keystore: redis: changes: %d values", len(res))
	}
	v, err := res[0].AsInt64()
	if err != nil {
		return nil, nil, "", false, fmt.Errorf("keystore: redis: changes: %w", err)
	}
	var e, tag string
	for i, to := range []*string{&e, &tag} {
		if *to, err = res[1+i].ToString(); err != nil {
			return nil, nil, "", false, fmt.Errorf("keystore: redis: changes: %w", err)
		}
	}
	version = redisconn.TaggedStamp(e, strconv.FormatInt(v, 10), tag)
	if f, err := res[3].AsInt64(); err != nil {
		return nil, nil, "", false, fmt.Errorf("keystore: redis: changes: %w", err)
	} else if f == 1 {
		return nil, nil, version, true, nil
	}
	for i := 4; i+1 < len(res); i += 2 {
		name, err := res[i].ToString()
		if err != nil {
			return nil, nil, "", false, fmt.Errorf("keystore: redis: changes: %w", err)
		}
		js, err := res[i+1].ToString()
		if rueidis.IsRedisNil(err) {
			gone = append(gone, name)
			continue
		}
		if err != nil {
			return nil, nil, "", false, fmt.Errorf("keystore: redis: changes: %w", err)
		}
		var r Record
		if err := json.Unmarshal([]byte(js), &r); err != nil {
			return nil, nil, "", false, fmt.Errorf("keystore: redis: key %q: %w", name, err)
		}
		changed = append(changed, r)
	}
	return changed, gone, version, false, nil
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
