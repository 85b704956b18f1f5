package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store"
)

// openRLSStore opens the store the settings name: the memory store, or
// Redis (two of them with REDIS_PERSECOND), with a memory store for the
// limits that fall back to a local share when Redis fails.
func openRLSStore(ctx context.Context, e *rlsEnv, log *slog.Logger) (main, local limiter.Store, closeAll func() error, err error) {
	if e.backend == "memory" {
		ms, c, err := store.Open(ctx, "memory", store.Options{Logger: log})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("rls: %w", err)
		}
		return ms, nil, c.Close, nil
	}
	var closers []io.Closer
	closeAll = func() error {
		for _, c := range closers {
			c.Close()
		}
		return nil
	}
	main, c, err := openRedis(ctx, &e.redis, e.prefix, log)
	if err != nil {
		return nil, nil, nil, err
	}
	closers = append(closers, c)
	if e.perSecond != nil {
		ps, c, err := openRedis(ctx, e.perSecond, e.prefix, log)
		if err != nil {
			closeAll()
			return nil, nil, nil, fmt.Errorf("rls: REDIS_PERSECOND: %w", err)
		}
		closers = append(closers, c)
		main = &perSecondSplit{second: ps, other: main}
	}
	ls, lc, err := store.Open(ctx, "memory", store.Options{Logger: log})
	if err != nil {
		closeAll()
		return nil, nil, nil, fmt.Errorf("rls: %w", err)
	}
	closers = append(closers, lc)
	return main, ls, closeAll, nil
}

// openRedis connects to one Redis deployment as envoyproxy/ratelimit's
// settings describe it.
func openRedis(ctx context.Context, re *redisEnv, prefix string, log *slog.Logger) (limiter.Store, io.Closer, error) {
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
	opts := store.Options{Prefix: prefix, DialTimeout: re.timeout, WriteTimeout: re.timeout, TLS: tc,
		MaxFlushDelay: re.window, Logger: log}
	if re.sentinelAuth != "" {
		opts.SentinelUsername, opts.SentinelPassword = "", re.sentinelAuth
		if u, p, ok := strings.Cut(re.sentinelAuth, ":"); ok {
			opts.SentinelUsername, opts.SentinelPassword = u, p
		}
	}
	u, err := redisURL(re, user, pass)
	if err != nil {
		return nil, nil, err
	}
	st, c, err := store.Open(ctx, u, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("rls: %w", err)
	}
	return st, c, nil
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
	if re.socket == "unix" && re.typ == "single" {
		path, err := filepath.Abs(re.url)
		if err != nil {
			return "", fmt.Errorf("rls: REDIS_URL=%q: %w", re.url, err)
		}
		return "redis+unix://" + userinfo + path, nil
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

func (s *perSecondSplit) Apply(ctx context.Context, op limiter.Op, hits []limiter.Hit, out []floodgate.Decision) error {
	n := 0
	for i := range hits {
		if perSecond(&hits[i]) {
			n++
		}
	}
	switch n {
	case 0:
		return s.other.Apply(ctx, op, hits, out)
	case len(hits):
		return s.second.Apply(ctx, op, hits, out)
	}
	var sec, oth []limiter.Hit
	var si, oi []int
	for i := range hits {
		if perSecond(&hits[i]) {
			sec, si = append(sec, hits[i]), append(si, i)
		} else {
			oth, oi = append(oth, hits[i]), append(oi, i)
		}
	}
	oout, sout := make([]floodgate.Decision, len(oth)), make([]floodgate.Decision, len(sec))
	if err := s.other.Apply(ctx, op, oth, oout); err != nil {
		return err
	}
	sop := op
	if op == limiter.Charge {
		for j := range oth {
			if !oout[j].Allowed && !oth[j].Rule.Shadow() {
				sop = limiter.Peek
				break
			}
		}
	}
	if err := s.second.Apply(ctx, sop, sec, sout); err != nil {
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
