package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
	"github.com/floodgate/floodgate/store/redisstore"
)

// openRLSStore opens the store the settings name: the memory store, or
// Redis (two of them with REDIS_PERSECOND), with a memory store for the
// limits that fall back to a local share when Redis fails.
func openRLSStore(e *rlsEnv, log *slog.Logger) (store, local limiter.Store, closeAll func() error, err error) {
	if e.backend == "memory" {
		ms, err := memstore.New(memstore.Options{Logger: log})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("rls: %w", err)
		}
		return ms, nil, ms.Close, nil
	}
	var closers []func()
	closeAll = func() error {
		for _, c := range closers {
			c()
		}
		return nil
	}
	main, c, err := openRedis(&e.redis, e.prefix, log)
	if err != nil {
		return nil, nil, nil, err
	}
	closers = append(closers, c)
	store = main
	if e.perSecond != nil {
		ps, c, err := openRedis(e.perSecond, e.prefix, log)
		if err != nil {
			closeAll()
			return nil, nil, nil, fmt.Errorf("rls: REDIS_PERSECOND: %w", err)
		}
		closers = append(closers, c)
		store = &perSecondSplit{second: ps, other: main}
	}
	ls, err := memstore.New(memstore.Options{Logger: log})
	if err != nil {
		closeAll()
		return nil, nil, nil, fmt.Errorf("rls: %w", err)
	}
	closers = append(closers, func() { ls.Close() })
	return store, ls, closeAll, nil
}

// openRedis connects to one Redis deployment as envoyproxy/ratelimit's
// settings describe it.
func openRedis(re *redisEnv, prefix string, log *slog.Logger) (limiter.Store, func(), error) {
	var tc *tls.Config
	if re.tls {
		var err error
		if tc, err = redisTLS(re); err != nil {
			return nil, nil, err
		}
	}
	user, pass := "", re.auth
	if u, p, ok := strings.Cut(re.auth, ":"); ok {
		user, pass = u, p
	}
	opts := redisstore.Options{Prefix: prefix, DialTimeout: re.timeout, WriteTimeout: re.timeout, TLSConfig: tc,
		MaxFlushDelay: re.window, Logger: log}
	if re.sentinelAuth != "" {
		opts.SentinelUsername, opts.SentinelPassword = "", re.sentinelAuth
		if u, p, ok := strings.Cut(re.sentinelAuth, ":"); ok {
			opts.SentinelUsername, opts.SentinelPassword = u, p
		}
	}
	if re.socket == "unix" && re.typ == "single" {
		// A Unix socket: Floodgate's store URLs name TCP addresses, so the
		// client is made here.
		c, err := rueidis.NewClient(rueidis.ClientOption{
			InitAddress: []string{re.url}, Username: user, Password: pass, TLSConfig: tc,
			DisableCache: true, DisableRetry: true, ForceSingleClient: true, ClientName: "floodgate",
			ConnWriteTimeout: re.timeout, Dialer: net.Dialer{Timeout: re.timeout},
			DialCtxFn: func(ctx context.Context, dst string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
				return d.DialContext(ctx, "unix", dst)
			},
		})
		if err != nil {
			return nil, nil, fmt.Errorf("rls: redis unix socket %s: %w", re.url, err)
		}
		st := redisstore.NewFromClient(c, opts)
		return st, func() { st.Close(); c.Close() }, nil
	}
	u, err := redisURL(re, user, pass)
	if err != nil {
		return nil, nil, err
	}
	opts.URL = u
	st, err := redisstore.New(opts)
	if err != nil {
		return nil, nil, fmt.Errorf("rls: %w", err)
	}
	return st, func() { st.Close() }, nil
}

// redisURL turns REDIS_URL and REDIS_TYPE into a store URL: host:port for
// a single instance (or a redis:// URL, kept as given), "master,h1:p1,..."
// for sentinels, "h1:p1,h2:p2,..." for a cluster.
func redisURL(re *redisEnv, user, pass string) (string, error) {
	if strings.Contains(re.url, "://") {
		return re.url, nil
	}
	userinfo := ""
	if pass != "" {
		userinfo = url.PathEscape(user) + ":" + url.PathEscape(pass) + "@"
	}
	scheme := "redis"
	if re.tls {
		scheme = "rediss"
	}
	hosts := strings.Split(re.url, ",")
	switch re.typ {
	case "sentinel":
		if len(hosts) < 2 {
			return "", fmt.Errorf("rls: REDIS_URL=%q: a sentinel URL is the master's name then the sentinels, separated by commas", re.url)
		}
		return scheme + "+sentinel://" + userinfo + strings.Join(hosts[1:], ",") + "/" + hosts[0], nil
	case "cluster":
		return scheme + "+cluster://" + userinfo + re.url, nil
	}
	if len(hosts) != 1 {
		return "", fmt.Errorf("rls: REDIS_URL=%q: a single instance has one address", re.url)
	}
	return scheme + "://" + userinfo + re.url, nil
}

// redisTLS is the client TLS configuration of REDIS_TLS_*.
func redisTLS(re *redisEnv) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if re.cert != "" || re.key != "" {
		pair, err := tls.LoadX509KeyPair(re.cert, re.key)
		if err != nil {
			return nil, fmt.Errorf("rls: REDIS_TLS_CLIENT_CERT/KEY: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	if re.ca != "" {
		pem, err := os.ReadFile(re.ca)
		if err != nil {
			return nil, fmt.Errorf("rls: REDIS_TLS_CACERT: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("rls: REDIS_TLS_CACERT: no certificate in %s", re.ca)
		}
	}
	if re.skipVerify {
		// Skip the host name only: the chain is still checked.
		roots := tc.RootCAs
		tc.InsecureSkipVerify = true
		tc.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("rls: redis: no server certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
			return err
		}
	}
	return tc, nil
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
		for j := range oth {
			if !oout[j].Allowed && !oth[j].Rule.Shadow() {
				speek = true
				break
			}
		}
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
