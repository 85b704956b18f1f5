package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"sync"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/internal/lograte"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memstore"
)

// Source is where a Guard's policy comes from: File or Limits.
type Source struct {
	path   string  // File
	limits []Limit // Limits
	inCode bool
}

// File is the policy file at path, in the format of "floodgate serve"
// (package config): the Guard applies each new valid version of it.
func File(path string) Source { return Source{path: path} }

// Limits is a policy of the given limits, written in code. Each applies to
// every request unless its Methods or Paths say otherwise, and they are
// checked together, in this order, charged only if all allow.
func Limits(limits ...Limit) Source { return Source{limits: limits, inCode: true} }

// Metrics receives what a Guard decides: the engine's decisions
// (limiter.Observer) and the gateway's own answers and queues
// (gateway.Observer). A *metrics.Metrics is one.
type Metrics interface {
	limiter.Observer
	gateway.Observer
}

// Options configure a Guard. The zero value counts in memory, logs
// nothing and follows a policy file, looking at it every second.
type Options struct {
	// Logger receives reloads, rejected versions of the policy file and
	// the errors of the engine and the store (default: discard). Some are
	// written once a request (a refund that fails while the store is out
	// of reach): the Guard holds back its lines past ten of one message a
	// second, the next one saying how many were held back
	// (lograte.Handler); the Logger's other lines are left alone.
	Logger *slog.Logger
	// Metrics, when set, is told every decision and every answer of the
	// Guard's own.
	Metrics Metrics
	// ReloadInterval is how often a policy file is looked at for a new
	// version (default policy.DefaultPollInterval, one second; negative:
	// never, the policy is read once).
	ReloadInterval time.Duration

	// Store, when set, is the store the limits are counted in, instead of
	// the one the policy names; the Guard does not close it.
	Store limiter.Store
	// StoreURL, when set, replaces the policy's server.store: "memory",
	// or a Redis URL for OpenStore.
	StoreURL string
	// OpenStore opens the store of a URL other than "memory" (a Redis
	// URL); redisguard.Open is one. Without it, a policy that names Redis
	// is an error.
	OpenStore func(StoreConfig) (limiter.Store, func() error, error)
}

// StoreConfig is what OpenStore is asked to open.
type StoreConfig struct {
	// URL names the store, as server.store does (redis://…, rediss://…,
	// redis+cluster://…, redis+sentinel://…).
	URL string
	// RefuseEvictable asks for an error when the store may evict the
	// limiter's keys (server.redis_eviction: refuse).
	RefuseEvictable bool
	// Logger is the Guard's logger: Options.Logger, its lines held back
	// as the Guard's are.
	Logger *slog.Logger
}

// Guard enforces a policy on the requests of a service. It is safe for
// concurrent use; Close releases it.
type Guard struct {
	src     gateway.PolicySource
	gw      *gateway.Gateway
	engine  *limiter.Limiter
	log     *slog.Logger
	closers []func() error // the stores the Guard opened, in order

	stopWatch context.CancelFunc
	watching  sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
}

// New builds a Guard for the policy src gives: the policy, the store, the
// engine and the gateway's admission flow. It fails when the policy is
// invalid (a config.Errors value holds every problem) or the store cannot
// be opened.
func New(src Source, o Options) (*Guard, error) {
	g := &Guard{log: slog.New(slog.DiscardHandler)}
	if o.Logger != nil {
		g.log = slog.New(lograte.NewHandler(o.Logger.Handler(), lograte.HandlerOptions{}))
	}
	var reloader *policy.Reloader
	var pol *policy.Policy
	switch {
	case src.path != "":
		r, err := policy.NewReloader(policy.ReloaderOptions{Path: src.path, Interval: o.ReloadInterval, Logger: g.log,
			Check: serveOnly})
		if err != nil {
			return nil, fmt.Errorf("guard: %w", err)
		}
		reloader, pol, g.src = r, r.Policy(), r
	case src.inCode:
		p, err := compileLimits(src.limits)
		if err != nil {
			return nil, err
		}
		pol, g.src = p, gateway.Fixed(p)
	default:
		return nil, errors.New("guard: no policy: give New a File or Limits")
	}
	srv := pol.Server()
	store, local, err := g.openStores(src, srv, o)
	if err != nil {
		return nil, err
	}
	var observer limiter.Observer
	var events gateway.Observer
	var onBadToken func(string)
	if o.Metrics != nil {
		observer, events = o.Metrics, o.Metrics
		if m, ok := o.Metrics.(interface{ InvalidToken(reason string) }); ok {
			onBadToken = m.InvalidToken
		}
	}
	eo := gateway.EngineOptions(srv)
	eo.Local, eo.Observer, eo.Logger = local, observer, g.log
	g.engine = limiter.New(store, eo)
	matcher, err := gateway.NewPolicyMatcher(g.src, gateway.PolicyMatcherOptions{OnInvalidToken: onBadToken, Logger: g.log})
	if err != nil {
		g.closeStores()
		return nil, fmt.Errorf("guard: %w", err)
	}
	g.gw, err = gateway.New(gateway.Options{
		Matcher:        matcher,
		Engine:         g.engine,
		Fields:         gateway.FieldOptions(srv.Headers),
		Observer:       events,
		Logger:         g.log,
		MethodOverride: gateway.MethodOverrideOf(srv.MethodOverride),
		Upstream: gateway.TransportOptions{
			DrainTimeout: srv.Upstream.DrainTimeout,
			DrainBytes:   srv.Upstream.DrainBytes,
		},
	})
	if err != nil {
		g.closeStores()
		return nil, fmt.Errorf("guard: %w", err)
	}
	if reloader != nil && o.ReloadInterval >= 0 {
		ctx, cancel := context.WithCancel(context.Background())
		g.stopWatch = cancel
		g.watching.Go(func() { reloader.Run(ctx) })
	}
	return g, nil
}

// serveOnly refuses a policy whose server section holds what floodgate
// serve applies before any limit and a Guard does not: allow and deny
// lists (server.access) and the penalty box's rules (server.bans). A
// Guard given them would let through the addresses the file denies and
// the keys it bans; refused, the file names them (a config.Errors, one
// problem per field, at its line).
func serveOnly(p *policy.Policy) error {
	f := p.File()
	srv := &f.Server
	var es config.Errors
	add := func(field, what string) {
		pos := f.Position(field)
		es = append(es, &config.Error{File: f.Path, Line: pos.Line, Column: pos.Column, Field: field,
			Msg: what + " are applied by floodgate serve, not by a Guard: remove them from a Guard's policy, or serve the requests with floodgate serve"})
	}
	if len(srv.Access.Deny) > 0 || len(srv.Access.Allow) > 0 {
		add("server.access", "allow and deny lists")
	}
	if len(srv.Bans) > 0 {
		add("server.bans", "the penalty box's rules")
	}
	if es == nil {
		return nil
	}
	return es
}

// openStores opens the store the policy names (or o's), and the local
// fallback store of on_failure: local when that store is not in memory.
func (g *Guard) openStores(src Source, srv *config.Server, o Options) (store, local limiter.Store, err error) {
	mem := memstore.Options{MaxBytes: srv.Memory.MaxBytes, Logger: g.log}
	if o.Store != nil {
		if local, err = g.openMemory(mem); err != nil {
			return nil, nil, err
		}
		return o.Store, local, nil
	}
	url := srv.Store
	if o.StoreURL != "" {
		url = o.StoreURL
	}
	if url == "" || url == config.DefaultStore {
		if srv.StateFile != "" && src.path != "" {
			mem.StatePath = srv.StateFile
			if !filepath.IsAbs(mem.StatePath) {
				mem.StatePath = filepath.Join(filepath.Dir(src.path), mem.StatePath)
			}
		}
		store, err = g.openMemory(mem)
		if err == nil && mem.StatePath != "" {
			if st := store.(*memstore.Store).Stats(); st.LoadError != nil {
				g.log.Warn("guard: state file not loaded", "path", mem.StatePath, "err", st.LoadError)
			}
		}
		return store, nil, err
	}
	if o.OpenStore == nil {
		return nil, nil, fmt.Errorf("guard: the store is %s: set Options.OpenStore (redisguard.Open) to open it, or Options.Store", redact(url))
	}
	s, closeStore, err := o.OpenStore(StoreConfig{URL: url, RefuseEvictable: srv.RedisEviction == config.RedisEvictionRefuse, Logger: g.log})
	if err != nil {
		return nil, nil, fmt.Errorf("guard: %w", err)
	}
	if closeStore != nil {
		g.closers = append(g.closers, closeStore)
	}
	if local, err = g.openMemory(mem); err != nil {
		g.closeStores()
		return nil, nil, err
	}
	return s, local, nil
}

// openMemory opens a memory store that Close closes.
func (g *Guard) openMemory(o memstore.Options) (limiter.Store, error) {
	ms, err := memstore.New(o)
	if err != nil {
		g.closeStores()
		return nil, fmt.Errorf("guard: %w", err)
	}
	g.closers = append(g.closers, ms.Close)
	return ms, nil
}

// redact drops the password of a store URL, for messages.
func redact(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return "the store URL"
}

// Middleware returns next wrapped by the Guard: a request over a limit is
// answered by the Guard (429, or 403 and 401 for a missing or unknown API
// key and a bad token on the routes that say so); the others reach next,
// after their wait in a leaky queue, with the RateLimit fields already set
// on the response.
func (g *Guard) Middleware(next http.Handler) http.Handler { return g.gw.Middleware(next) }

// Policy returns the policy in force.
func (g *Guard) Policy() *policy.Policy { return g.src.Policy() }

// Gateway returns the Guard's gateway, for a front end of another
// protocol (package guard/grpcguard) that drives the same admission flow.
func (g *Guard) Gateway() *gateway.Gateway { return g.gw }

// Close stops following the policy file and closes the stores the Guard
// opened; the memory store writes its state file then. Requests still in
// flight must be over. Close returns the first error, and the same on
// later calls.
func (g *Guard) Close() error {
	g.closeOnce.Do(func() {
		if g.stopWatch != nil {
			g.stopWatch()
			g.watching.Wait()
		}
		g.closeErr = g.closeStores()
	})
	return g.closeErr
}

// closeStores closes the stores opened so far, the last first.
func (g *Guard) closeStores() error {
	var first error
	for i := len(g.closers) - 1; i >= 0; i-- {
		if err := g.closers[i](); err != nil && first == nil {
			first = fmt.Errorf("guard: close store: %w", err)
		}
	}
	g.closers = nil
	return first
}
