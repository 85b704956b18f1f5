package rls

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"
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
}

// Watch polls paths (as given to Load) every interval and, when the set of
// files or any file's size or modification time changes, loads them all
// again and hands the new configuration to svc. A configuration that does
// not load is logged and the running one stays. Counters of limits that
// did not change carry over. Watch returns when ctx ends.
//
// Replace files by renaming a complete file into place: a file caught
// half-written is read as it is (and read again once it changes). Polling
// also follows the symbolic-link swaps with which Kubernetes
// updates mounted ConfigMaps, the way envoyproxy/ratelimit deployments
// usually ship their files.
func Watch(ctx context.Context, svc *Service, paths []string, opts WatchOptions) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	every := opts.Interval
	if every <= 0 {
		every = time.Second
	}
	// Compare with the files the running configuration was loaded from,
	// so that a change made before Watch started is not missed.
	last := svc.Config().fp
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fp, err := fingerprint(paths, opts.Load)
		if err == nil && fp == last {
			continue
		}
		last = fp
		var cfg *Config
		if err == nil {
			cfg, err = Load(paths, opts.Load)
		}
		if err != nil {
			log.Warn("rls: configuration not reloaded; the running one stays", "err", err)
		} else {
			svc.SetConfig(cfg)
			log.Info("rls: configuration reloaded", "domains", strings.Join(cfg.Domains(), ","))
		}
		if opts.OnReload != nil {
			opts.OnReload(err)
		}
	}
}

// fingerprint names every configuration file with its size and time.
func fingerprint(paths []string, opts LoadOptions) (string, error) {
	files, err := configFiles(paths, opts)
	if err != nil {
		return "", err
	}
	return fingerprintFiles(files)
}

func fingerprintFiles(files []string) (string, error) {
	var b strings.Builder
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			return "", fmt.Errorf("%w: %w", ErrConfig, err)
		}
		fmt.Fprintf(&b, "%s\x00%d\x00%d\n", f, st.Size(), st.ModTime().UnixNano())
	}
	return b.String(), nil
}
