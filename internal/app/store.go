package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memstore"
)

// stores are the stores of a process: the main one (two joined by
// perSecondSplit with Store.PerSecond) and, for a shared store, a memory
// store for the limits that fall back to a local share when it fails.
type stores struct {
	main, local limiter.Store
	closers     []io.Closer
}

// openStores opens the stores s names.
func openStores(ctx context.Context, s Store, log *slog.Logger) (_ *stores, err error) {
	st := &stores{}
	defer func() {
		if err != nil {
			st.close()
		}
	}()
	o := s.Options
	o.Logger = log
	main, c, err := store.Open(ctx, s.URL, o)
	if err != nil {
		return nil, err
	}
	st.main, st.closers = main, append(st.closers, c)
	if ms, ok := main.(*memstore.Store); ok {
		if stat := ms.Stats(); stat.LoadError != nil {
			log.Warn("state file not loaded", "path", o.StatePath, "err", stat.LoadError)
		} else if stat.Loaded > 0 {
			log.Info("state file loaded", "path", o.StatePath, "keys", stat.Loaded)
		}
		return st, nil
	}
	if ps := s.PerSecond; ps != nil {
		po := ps.Options
		po.Logger = log
		second, c, err := store.Open(ctx, ps.URL, po)
		if err != nil {
			return nil, fmt.Errorf("REDIS_PERSECOND: %w", err)
		}
		st.closers = append(st.closers, c)
		st.main = &perSecondSplit{second: second, other: main}
	}
	// The local fallback is bounded whatever the main store's options
	// say: Redis down, every distinct key lands here.
	localMax := o.MaxBytes
	if localMax <= 0 {
		localMax = config.DefaultMemoryMaxBytes
	}
	local, c, err := store.Open(ctx, "memory", store.Options{MaxBytes: localMax, Logger: log})
	if err != nil {
		return nil, err
	}
	st.local, st.closers = local, append(st.closers, c)
	return st, nil
}

// close closes the stores (the memory store writes its state file) and
// returns the first error.
func (st *stores) close() error {
	var first error
	for _, c := range st.closers {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	st.closers = nil
	return first
}

// perSecondSplit sends the hits of per-second limits to one store and the
// others to another, as envoyproxy/ratelimit does with REDIS_PERSECOND. A
// request that has hits in both is not atomic: the other store decides
// first, and only if it allows is the per-second store charged, so a
// per-second denial after that leaves the other limits charged for that
// one request.
type perSecondSplit struct {
	second, other limiter.Store
}

// perSecond reports whether a hit's limit counts per second.
func perSecond(h *limiter.Hit) bool {
	l := h.Rule.Limit()
	return l.Window == time.Second || l.Per == time.Second
}

// Decide decides the hits of each store in it; the per-second store is
// only looked at when the other one's decisions already refuse the request.
func (s *perSecondSplit) Decide(ctx context.Context, hits []limiter.Hit, peek bool, out []floodgate.Decision) error {
	n := 0
	for i := range hits {
		if perSecond(&hits[i]) {
			n++
		}
	}
	switch n {
	case 0:
		return s.other.Decide(ctx, hits, peek, out)
	case len(hits):
		return s.second.Decide(ctx, hits, peek, out)
	}
	sec, si, oth, oi := split(hits)
	oout, sout := make([]floodgate.Decision, len(oth)), make([]floodgate.Decision, len(sec))
	if err := s.other.Decide(ctx, oth, peek, oout); err != nil {
		return err
	}
	speek := peek
	if !peek {
		var v limiter.Verdict
		for j := range oth {
			v.Add(&oth[j], oout[j].Allowed)
		}
		speek = v.Refused()
	}
	if err := s.second.Decide(ctx, sec, speek, sout); err != nil {
		return err
	}
	for j, i := range oi {
		out[i] = oout[j]
	}
	for j, i := range si {
		out[i] = sout[j]
	}
	return nil
}

// split returns the per-second hits and the others, with their indexes.
func split(hits []limiter.Hit) (sec []limiter.Hit, si []int, oth []limiter.Hit, oi []int) {
	for i := range hits {
		if perSecond(&hits[i]) {
			sec, si = append(sec, hits[i]), append(si, i)
		} else {
			oth, oi = append(oth, hits[i]), append(oi, i)
		}
	}
	return sec, si, oth, oi
}

// Release hands each store the leases of its hits.
func (s *perSecondSplit) Release(ctx context.Context, hits []limiter.Hit) error {
	sec, _, oth, _ := split(hits)
	for _, p := range [2]struct {
		st   limiter.Store
		hits []limiter.Hit
	}{{s.other, oth}, {s.second, sec}} {
		if r, ok := p.st.(limiter.Releaser); ok && len(p.hits) > 0 {
			if err := r.Release(ctx, p.hits); err != nil {
				return err
			}
		}
	}
	return nil
}

// Refund hands each store the refunds of its hits.
func (s *perSecondSplit) Refund(ctx context.Context, hits []limiter.Hit) error {
	sec, _, oth, _ := split(hits)
	for _, p := range [2]struct {
		st   limiter.Store
		hits []limiter.Hit
	}{{s.other, oth}, {s.second, sec}} {
		if r, ok := p.st.(limiter.Refunder); ok && len(p.hits) > 0 {
			if err := r.Refund(ctx, p.hits); err != nil {
				return err
			}
		}
	}
	return nil
}
