package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/floodgate/floodgate/internal/watch"
	"github.com/floodgate/floodgate/internal/yamlfile"
)

// WatchOptions configure Watch. The zero value is usable.
type WatchOptions struct {
	// Interval is the time between two looks at the files. Zero means 1s.
	Interval time.Duration
	// Load is passed to Load.
	Load LoadOptions
	// Logger receives reloads and rejected files. Default: discard.
	Logger *slog.Logger
	// OnReload, when set, is called after every attempt to load changed
	// files, with nil on success.
	OnReload func(err error)
	// NoWake is passed to package internal/watch: the looks are the
	// regular ones only.
	NoWake bool
	// Now, when set, asks for the files to be read and loaded at once
	// (floodgate rls sends on it at SIGHUP), whatever the stability rule
	// says; unchanged files load nothing.
	Now <-chan struct{}
	// Started, when set, is called once the files are followed (see
	// package internal/watch, Options.Started).
	Started func()
}

// Watch follows paths (as given to Load) until ctx ends, by the rules of
// package internal/watch: every interval it lists and reads the files, and
// loads a version that differs from the running one and hands it to svc
// within milliseconds after a writer closed a file or one was renamed into
// place (inotify, on Linux: the events wake a look), else once two
// consecutive looks saw the same files with the same sizes, modification
// times and contents; never while a file is being written. That also follows the symbolic-link swaps with
// which Kubernetes updates mounted ConfigMaps, the way
// envoyproxy/ratelimit deployments usually ship their files. A configuration that does not load
// is logged once, as an error, and the running one stays. Counters of limits that did
// not change carry over. Logs name each version by the first 12
// hexadecimal digits of its SHA-256.
func Watch(ctx context.Context, svc *Service, paths []string, opts WatchOptions) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	report := func(err error) {
		if opts.OnReload != nil {
			opts.OnReload(err)
		}
	}
	watch.Run(ctx, watch.Options{
		Interval: opts.Interval,
		NoWake:   opts.NoWake,
		Now:      opts.Now,
		Started:  opts.Started,
		Files: func() ([]string, error) {
			files, errs := configFiles(paths, opts.Load)
			if len(errs) > 0 {
				return nil, invalid(errs)
			}
			if bad := sizeBound(paths, files, opts.Load); bad != nil {
				return nil, invalid(yamlfile.Errors{bad})
			}
			return files, nil
		},
		// Compare with the files the running configuration was loaded
		// from, so that a change made before Watch started is not missed.
		Current: svc.Config().version,
		Apply: func(v *watch.Version) {
			if v.Hash == svc.Config().version {
				return
			}
			err := checkBytes(paths, v, opts.Load)
			var cfg *Config
			if err == nil {
				cfg, err = build(v, opts.Load)
			}
			if err != nil {
				log.Error("rls: configuration not reloaded; the running one stays", "sha256", v.Short(), "err", err)
			} else {
				svc.SetConfig(cfg)
				log.Info("rls: configuration reloaded", "sha256", v.Short(), "domains", strings.Join(cfg.Domains(), ","))
			}
			report(err)
		},
		Fail: func(err error) {
			if !errors.Is(err, ErrConfig) {
				err = fmt.Errorf("%w: %w", ErrConfig, err)
			}
			log.Error("rls: configuration not reloaded; the running one stays", "err", err)
			report(err)
		},
	})
}
