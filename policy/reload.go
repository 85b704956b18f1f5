package policy

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/internal/watch"
	"github.com/floodgate/floodgate/internal/yamlfile"
)

// DefaultPollInterval is how often a Reloader looks at its file.
const DefaultPollInterval = watch.DefaultInterval

// ReloaderOptions configures a Reloader. Only Path is required.
type ReloaderOptions struct {
	// Path is the policy file.
	Path string
	// Interval is how often Run looks for a changed file (default 1s).
	Interval time.Duration
	// NoWake keeps Run to those looks: the file system's events do not
	// wake it (see package internal/watch).
	NoWake bool
	// Logger receives reloads and rejected files (default: discard).
	Logger *slog.Logger
	// OnReload, if set, is called with each newly applied policy.
	OnReload func(*Policy)
	// OnReject, if set, is called with the error of each rejected file
	// (a config.Errors for an invalid one): a hook for metrics.
	OnReject func(error)
	// Check, if set, is asked about each version once it compiles, the
	// first one included: an error refuses the version as an invalid file
	// would be refused (NewReloader fails with it; a later version is
	// rejected, counted and logged, and the running policy stays). It
	// lets a program refuse what it cannot apply.
	Check func(*Policy) error
}

// Reloader holds the current policy of a file and replaces it when the file
// changes: a valid new version is compiled (keeping the rules of unchanged
// limits) and swapped in atomically; an invalid one is logged, counted and
// ignored, and the running policy stays. A version is the file's bytes and
// those of the JWT key file or key set it names; logs name it by the first
// 12 hexadecimal digits of its SHA-256. Its methods are safe for concurrent
// use.
type Reloader struct {
	o   ReloaderOptions
	log *slog.Logger
	cur atomic.Pointer[Policy]

	mu       sync.Mutex // serialises loads; guards seen
	seen     [sha256.Size]byte
	reloads  atomic.Uint64
	rejected atomic.Uint64
	// pending holds the files a rejected version names that the running
	// policy does not (config.DependentFiles), for Run to follow: the
	// version is tried again when one of them arrives or changes.
	pending atomic.Pointer[[]string]
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
	data, err := readFile(o.Path, "policy")
	if err != nil {
		return nil, err
	}
	p, err := compileData(o.Path, data, nil)
	if err == nil && o.Check != nil {
		err = o.Check(p)
	}
	if err != nil {
		return nil, err
	}
	p.hash = stamp(o.Path, data)
	r.seen = p.hash
	p.dynamic = &keyHook{}
	r.cur.Store(p)
	return r, nil
}

// readFile reads the policy file (yamlfile.ReadFile): a path that is not
// a regular file or a file too large is refused, without blocking, as an
// invalid file (a config.Errors); other errors get prefix.
func readFile(path, prefix string) ([]byte, error) {
	data, err := yamlfile.ReadFile(path)
	var errs config.Errors
	if err != nil && !errors.As(err, &errs) {
		err = fmt.Errorf("%s: %w", prefix, err)
	}
	return data, err
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

// Reload reads the file now (on SIGHUP) and applies it at once if it is
// valid and differs from the running version (a changed JWT key file counts
// as a change). It returns the file's problems when it is invalid; the
// running policy then stays.
func (r *Reloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	data, err := readFile(r.o.Path, "policy: reload")
	if err != nil {
		r.reject(err, [sha256.Size]byte{})
		return err
	}
	return r.load(data, true)
}

// load compiles data, the file's contents, and applies it; force re-reports
// a version already rejected. r.mu must be held.
func (r *Reloader) load(data []byte, force bool) error {
	sum := stamp(r.o.Path, data)
	if sum == r.cur.Load().hash || (sum == r.seen && !force) {
		r.seen = sum
		return nil // the running version, or an invalid one already reported
	}
	r.seen = sum
	p, err := compileData(r.o.Path, data, r.cur.Load())
	if err == nil && r.o.Check != nil {
		err = r.o.Check(p)
	}
	if err != nil {
		r.pend(data)
		r.reject(err, sum)
		return err
	}
	p.hash = sum
	r.pending.Store(nil)
	r.cur.Store(p)
	r.reloads.Add(1)
	r.log.Info("policy: reloaded", "file", filepath.Base(r.o.Path), "sha256", watch.Short(p.hash),
		"limits", len(p.Limits()))
	if r.o.OnReload != nil {
		r.o.OnReload(p)
	}
	return nil
}

// reject counts and logs a version that cannot be applied; sum names it
// (zero when the file could not be read).
func (r *Reloader) reject(err error, sum [sha256.Size]byte) {
	r.rejected.Add(1)
	attrs := []any{"file", r.o.Path}
	if sum != ([sha256.Size]byte{}) {
		attrs = append(attrs, "sha256", watch.Short(sum))
	}
	var errs config.Errors
	if errors.As(err, &errs) {
		r.log.Error("policy: invalid file, keeping the running policy", append(attrs, "problems", len(errs))...)
		for _, e := range errs {
			r.log.Error("policy: problem", "at", e.Error())
		}
	} else {
		r.log.Error("policy: reload failed, keeping the running policy", append(attrs, "err", err)...)
	}
	if r.o.OnReject != nil {
		r.o.OnReject(err)
	}
}

// pend records the files that data, a version rejected, names beyond
// those of the running policy.
func (r *Reloader) pend(data []byte) {
	running := deps(r.o.Path, r.cur.Load())
	var extra []string
	for _, f := range config.DependentFiles(r.o.Path, data) {
		if !slices.Contains(running, f) && !slices.Contains(extra, f) {
			extra = append(extra, f)
		}
	}
	r.pending.Store(&extra)
}

// follow returns the files Run looks at: those of the running policy,
// then those of a rejected version that exist (one that is missing is
// not an error: it is what the version waits for).
func (r *Reloader) follow() []string {
	files := deps(r.o.Path, r.cur.Load())
	if pending := r.pending.Load(); pending != nil {
		for _, f := range *pending {
			if _, err := os.Stat(f); err == nil && !slices.Contains(files, f) {
				files = append(files, f)
			}
		}
	}
	return files
}

// deps returns the files a version of the policy file consists of: the
// file itself, then the JWT key file or key set that p names.
func deps(path string, p *Policy) []string {
	files := []string{path}
	if p != nil {
		if j := p.file.Server.User.JWT; j != nil {
			for _, dep := range []string{j.KeyPath, j.JWKSPath} {
				if dep != "" {
					files = append(files, dep)
				}
			}
		}
	}
	return files
}

// stamp identifies a version: the hash (watch.Hash) of the file's bytes and
// of those of the files they name (config.DependentFiles), so that a
// rotated key, or a key file that a rejected version waited for, is a new
// version too. An unreadable dependency counts as empty; compiling the
// file then reports it.
func stamp(path string, data []byte) [sha256.Size]byte {
	files := []watch.File{{Path: path, Data: data}}
	for _, dep := range config.DependentFiles(path, data) {
		b, _ := yamlfile.ReadFile(dep)
		files = append(files, watch.File{Path: dep, Data: b})
	}
	return watch.Hash(files)
}

// Run follows the file until ctx ends, by the rules of package
// internal/watch: every Interval it reads the file and the key files the
// running policy names (and those a rejected version names, once they
// exist: a version that waited for its key file is applied when it
// arrives), and applies a new valid version or rejects a new
// invalid one, once: within milliseconds when a writer closed a file or
// one was renamed into place (on Linux, the events wake a look), else once
// two consecutive looks saw
// the same bytes, sizes and times; never while a file is being written.
// Reload, for SIGHUP, does not wait.
func (r *Reloader) Run(ctx context.Context) { r.run(ctx, nil) }

// Start runs Run in a goroutine of its own and returns once it follows
// the files (or ctx ends): a change written after Start returns is seen
// by the file system's events, so a file still being written then is
// never applied half written. A service starts it before it says it is
// ready.
func (r *Reloader) Start(ctx context.Context) {
	started := make(chan struct{})
	go r.run(ctx, func() { close(started) })
	select {
	case <-started:
	case <-ctx.Done():
	}
}

func (r *Reloader) run(ctx context.Context, started func()) {
	watch.Run(ctx, watch.Options{
		Started:  started,
		Interval: r.o.Interval,
		NoWake:   r.o.NoWake,
		Files:    func() ([]string, error) { return r.follow(), nil },
		Current:  r.cur.Load().hash,
		Apply: func(v *watch.Version) {
			data, _ := v.Data(r.o.Path)
			r.mu.Lock()
			defer r.mu.Unlock()
			_ = r.load(data, false)
		},
		Fail: func(err error) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.reject(fmt.Errorf("policy: %w", err), [sha256.Size]byte{})
		},
	})
}
