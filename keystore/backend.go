package keystore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/internal/redisconn"
)

// Backend keeps the records. Version changes whenever a record does, in
// this process or another one sharing the backend.
type Backend interface {
	// Load returns every record and the version they are at.
	Load(ctx context.Context) ([]Record, string, error)
	// Save writes (adds or replaces) one record.
	Save(ctx context.Context, r Record) error
	// Version returns the current version, cheaply.
	Version(ctx context.Context) (string, error)
}

// FileBackend keeps the records in a JSON file, written by atomic rename.
type FileBackend struct {
	path string
	mu   sync.Mutex // serialises writes of the file
}

// NewFileBackend keeps the records in path (created on the first write).
func NewFileBackend(path string) *FileBackend { return &FileBackend{path: path} }

type fileData struct {
	Keys []Record `json:"keys"`
}

// Load reads the file; a missing file holds no keys.
func (b *FileBackend) Load(ctx context.Context) ([]Record, string, error) {
	data, err := os.ReadFile(b.path)
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
	v, err := b.Version(ctx)
	return fd.Keys, v, err
}

// Save rewrites the file with r added or replaced.
func (b *FileBackend) Save(ctx context.Context, r Record) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	recs, _, err := b.Load(ctx)
	if err != nil {
		return err
	}
	replaced := false
	for i := range recs {
		if recs[i].Name == r.Name {
			recs[i], replaced = r, true
		}
	}
	if !replaced {
		recs = append(recs, r)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Name < recs[j].Name })
	data, err := json.MarshalIndent(fileData{Keys: recs}, "", "  ")
	if err != nil {
		return fmt.Errorf("keystore: %w", err)
	}
	return writeAtomic(b.path, append(data, '\n'))
}

// Version is the file's size and modification time.
func (b *FileBackend) Version(context.Context) (string, error) {
	st, err := os.Stat(b.path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("keystore: %w", err)
	}
	return strconv.FormatInt(st.Size(), 10) + "@" + strconv.FormatInt(st.ModTime().UnixNano(), 10), nil
}

// writeAtomic replaces path with data (0600: the file lists key hashes).
func writeAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("keystore: %w", err)
	}
	_, werr := f.Write(data)
	if serr := f.Sync(); werr == nil {
		werr = serr
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(f.Name(), 0o600)
	}
	if werr == nil {
		werr = os.Rename(f.Name(), path)
	}
	if werr != nil {
		os.Remove(f.Name())
		return fmt.Errorf("keystore: write %s: %w", path, werr)
	}
	return nil
}

// Redis keys of the key store.
const (
	redisHash    = redisconn.Prefix + "keys"
	redisVersion = redisconn.Prefix + "keys:version"
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

// Load reads every record.
func (b *RedisBackend) Load(ctx context.Context) ([]Record, string, error) {
	res := b.c.DoMulti(ctx, b.c.B().Get().Key(redisVersion).Build(), b.c.B().Hgetall().Key(redisHash).Build())
	v, err := res[0].ToString()
	if err != nil && !rueidis.IsRedisNil(err) {
		return nil, "", fmt.Errorf("keystore: redis: %w", err)
	}
	m, err := res[1].AsStrMap()
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

// Save writes r, increments the version and announces it.
func (b *RedisBackend) Save(ctx context.Context, r Record) error {
	js, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("keystore: %w", err)
	}
	res := b.c.DoMulti(ctx,
		b.c.B().Hset().Key(redisHash).FieldValue().FieldValue(r.Name, string(js)).Build(),
		b.c.B().Incr().Key(redisVersion).Build())
	for _, x := range res {
		if err := x.Error(); err != nil {
			return fmt.Errorf("keystore: redis: %w", err)
		}
	}
	v, _ := res[1].AsInt64()
	if err := b.c.Do(ctx, b.c.B().Publish().Channel(RedisChannel).Message(strconv.FormatInt(v, 10)).Build()).Error(); err != nil {
		return fmt.Errorf("keystore: redis: publish: %w", err)
	}
	return nil
}

// Version reads the version counter.
func (b *RedisBackend) Version(ctx context.Context) (string, error) {
	v, err := redisconn.Version(ctx, b.c, redisVersion)
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
