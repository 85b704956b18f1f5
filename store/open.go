package store

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/storeurl"
	"github.com/floodgate/floodgate/limiter"
)

// Options configure the store Open opens. Each store reads the fields
// that concern it and ignores the others; the zero value gives every
// store's defaults.
type Options struct {
	// Logger receives the store's warnings (default: discard).
	Logger *slog.Logger

	// MaxBytes caps the memory of the embedded store's keys (0: no cap).
	MaxBytes int64
	// StatePath is the embedded store's state file ("": none).
	StatePath string
	// SnapshotInterval is how often the embedded store writes its state
	// file (0: its default; negative: only when it closes).
	SnapshotInterval time.Duration
	// ExactClock makes the embedded store read the system clocks at every
	// decision instead of its cached clock.
	ExactClock bool

	// Prefix starts every Redis key (default "fg:").
	Prefix string
	// TLS is the client TLS configuration of the rediss schemes (default:
	// the system roots).
	TLS *tls.Config
	// DialTimeout and WriteTimeout bound connecting to Redis and writing
	// to a connection (default 1s each).
	DialTimeout, WriteTimeout time.Duration
	// Network, "tcp4" or "tcp6", connects to Redis over that family of
	// addresses only ("": either).
	Network string
	// SentinelUsername and SentinelPassword authenticate to the sentinels.
	SentinelUsername, SentinelPassword string
	// MaxFlushDelay, MaxBatch, BatchesInFlight and PipelineMultiplex tune
	// the Redis store's pipeline and batches (see redisstore.Options).
	MaxFlushDelay                                time.Duration
	MaxBatch, BatchesInFlight, PipelineMultiplex int
	// RefuseEvictable makes opening fail when a Redis server may evict the
	// limiter's keys.
	RefuseEvictable bool
}

// Driver opens the stores of one scheme.
type Driver struct {
	// Check reports whether a URL of the scheme can be opened, without
	// connecting to anything.
	Check func(url string) error
	// Open opens the store; closing the io.Closer releases it.
	Open func(ctx context.Context, url string, o Options) (limiter.Store, io.Closer, error)
	// CheckLimit, when set, reports a limit the store cannot decide
	// exactly, as a *floodgate.ParamError; package config tells it at the
	// limit's field in a file whose store is of the scheme.
	CheckLimit func(l *floodgate.Limit) error
}

var (
	mu      sync.RWMutex // guards drivers
	drivers = map[string]Driver{}
)

// Register makes the stores of scheme open with d. It is called from the
// stores' init functions; registering a scheme twice, or a driver without
// Check or Open, is a programming error and panics, as database/sql's
// Register does.
func Register(scheme string, d Driver) {
	if d.Check == nil || d.Open == nil {
		panic("store: Register " + scheme + ": a driver needs Check and Open")
	}
	if err := storeurl.Register(scheme, d.Check); err != nil {
		panic(err.Error())
	}
	if d.CheckLimit != nil {
		storeurl.RegisterLimitCheck(scheme, d.CheckLimit)
	}
	mu.Lock()
	defer mu.Unlock()
	drivers[scheme] = d
}

// ErrUnknownScheme is returned for a URL whose scheme no store registered.
var ErrUnknownScheme = errors.New("store: unknown scheme")

// Check reports whether url names a store of a registered scheme that its
// driver accepts, without opening it.
func Check(url string) error {
	if err := storeurl.Check(url); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// Open opens the store url names. Its errors show no more of a URL of an
// unknown scheme than the scheme, and nothing of a value that is not a URL
// (it may be a password given where the URL was meant).
func Open(ctx context.Context, url string, o Options) (limiter.Store, io.Closer, error) {
	scheme := storeurl.Scheme(url)
	mu.RLock()
	d, ok := drivers[scheme]
	mu.RUnlock()
	if !ok {
		return nil, nil, fmt.Errorf("%w %s (this program opens %v)", ErrUnknownScheme, storeurl.SchemeShown(url), storeurl.Schemes())
	}
	if err := d.Check(url); err != nil {
		return nil, nil, err
	}
	// The drivers' errors name their package already.
	return d.Open(ctx, url, o)
}

// Schemes returns the registered schemes, sorted.
func Schemes() []string { return storeurl.Schemes() }

// CloserFunc turns a function into an io.Closer.
type CloserFunc func() error

// Close calls f.
func (f CloserFunc) Close() error { return f() }
