package policy

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate/config"
)

// DefaultPollInterval is how often a Reloader looks at its file.
const DefaultPollInterval = time.Second

// ReloaderOptions configures a Reloader. Only Path is required.
type ReloaderOptions struct {
	// Path is the policy file.
	Path string
	// Interval is how often Run looks for a changed file (default 1s).
	Interval time.Duration
	// Logger receives reloads and rejected files (default: discard).
	Logger *slog.Logger
	// OnReload, if set, is called with each newly applied policy.
	OnReload func(*Policy)
	// OnReject, if set, is called with the error of each rejected file
	// (a config.Errors for an invalid one): a hook for metrics.
	OnReject func(error)
}

// Reloader holds the current policy of a file and replaces it when the file
// changes: a valid new version is compiled (keeping the rules of unchanged
// limits) and swapped in atomically; an invalid one is logged, counted and
// ignored, and the running policy stays. Its methods are safe for
// concurrent use.
type Reloader struct {
	o   ReloaderOptions
	log *slog.Logger
	cur atomic.Pointer[Policy]

	mu       sync.Mutex // serialises loads; guards seen
	seen     [sha256.Size]byte
	reloads  atomic.Uint64
	rejected atomic.Uint64
}

// NewReloader loads and compiles the file; it fails if the file is invalid.
func NewReloader(o ReloaderOptions) (*Reloader, error) {
	if o.Path == "" {
		return nil, fmt.Errorf("policy: reloader needs a path")
	}
	if o.Interval <= 0 {
		o.Interval = DefaultPollInterval
	}
	r := &Reloader{o: o, log: o.Logger}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	data, err := os.ReadFile(o.Path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	p, err := compileData(o.Path, data, nil)
	if err != nil {
		return nil, err
	}
	r.seen = stamp(data, p)
	p.hash = r.seen
	r.cur.Store(p)
	return r, nil
}

func compileData(path string, data []byte, prev *Policy) (*Policy, error) {
	f, err := config.Parse(path, data)
	if err != nil {
		return nil, err
	}
	return Compile(f, prev)
}

// Policy returns the current policy. It never returns nil.
func (r *Reloader) Policy() *Policy { return r.cur.Load() }

// Reloads counts the new versions applied since the start.
func (r *Reloader) Reloads() uint64 { return r.reloads.Load() }

// Rejected counts the versions refused because they were invalid (or
// unreadable) since the start.
func (r *Reloader) Rejected() uint64 { return r.rejected.Load() }

// Reload reads the file now (on SIGHUP) and applies it if it is valid and
// differs from the running version (a changed JWT key file counts as a
// change). It returns the file's problems when
// it is invalid; the running policy then stays.
func (r *Reloader) Reload() error {
	return r.load(true)
}

// load reads the file; force re-reports a version already rejected.
func (r *Reloader) load(force bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	data, err := os.ReadFile(r.o.Path)
	if err != nil {
		err = fmt.Errorf("policy: reload: %w", err)
		r.reject(err)
		return err
	}
	sum := stamp(data, r.cur.Load())
	if sum == r.cur.Load().hash || (sum == r.seen && !force) {
		r.seen = sum
		return nil // the running version, or an invalid one already reported
	}
	r.seen = sum
	p, err := compileData(r.o.Path, data, r.cur.Load())
	if err != nil {
		r.reject(err)
		return err
	}
	p.hash = stamp(data, p)
	r.seen = p.hash
	r.cur.Store(p)
	r.reloads.Add(1)
	r.log.Info("policy: reloaded", "file", filepath.Base(r.o.Path), "limits", len(p.Limits()))
	if r.o.OnReload != nil {
		r.o.OnReload(p)
	}
	return nil
}

func (r *Reloader) reject(err error) {
	r.rejected.Add(1)
	var errs config.Errors
	if errors.As(err, &errs) {
		r.log.Error("policy: invalid file, keeping the running policy", "file", r.o.Path, "problems", len(errs))
		for _, e := range errs {
			r.log.Error("policy: problem", "at", e.Error())
		}
	} else {
		r.log.Error("policy: reload failed, keeping the running policy", "file", r.o.Path, "err", err)
	}
	if r.o.OnReject != nil {
		r.o.OnReject(err)
	}
}

// stamp identifies a version: the file's bytes and those of the files it
// names (the JWT key or key set of p), so that a rotated key is a new
// version too. An unreadable dependency counts as empty; compiling the file
// then reports it.
func stamp(data []byte, p *Policy) [sha256.Size]byte {
	h := sha256.New()
	h.Write(data)
	if p != nil {
		if j := p.file.Server.User.JWT; j != nil {
			for _, dep := range []string{j.KeyPath, j.JWKSPath} {
				if dep == "" {
					continue
				}
				b, _ := os.ReadFile(dep)
				fmt.Fprintf(h, "\x00%s\x00%d\x00", dep, len(b))
				h.Write(b)
			}
		}
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// Run polls the file every Interval until ctx ends, applying each new
// valid version and rejecting each new invalid one once.
func (r *Reloader) Run(ctx context.Context) {
	t := time.NewTicker(r.o.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = r.load(false)
		}
	}
}
