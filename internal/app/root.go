package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/internal/lograte"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/metrics"
)

// root is what every process that decides is made of, whichever source its
// settings came from: the logger, the metrics, the tracing, the stores,
// the engine and Envoy's rate-limit service when it serves one.
type root struct {
	name     string // the command: it starts the errors and the lines on stdout
	log      *slog.Logger
	set      *Settings
	registry *prometheus.Registry
	metrics  *metrics.Metrics
	tracing  *tracing
	stores   *stores
	engine   *limiter.Limiter
	rls      *rlsService
	errc     chan error          // errors that end serving
	getenv   func(string) string // the environment (os.Getenv)
}

// newRoot opens the tracing (from the OTEL_* variables getenv reads), the
// metrics and the stores.
func newRoot(ctx context.Context, name string, set *Settings, getenv func(string) string, log *slog.Logger) (*root, error) {
	r := &root{name: name, log: log, set: set, errc: make(chan error, 8)}
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	r.getenv = getenv
	var err error
	if r.tracing, err = newTracing(ctx, getenv); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if r.metrics, r.registry, err = newMetrics(); err != nil {
		return nil, fmt.Errorf("%s: metrics: %w", name, err)
	}
	if r.stores, err = openStores(ctx, set.Store, log); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return r, nil
}

// startEngine makes the engine over the stores, observed by obs (the
// metrics when nil), and exports its state and the stores' in the
// metrics.
func (r *root) startEngine(obs limiter.Observer) error {
	if obs == nil {
		obs = r.metrics
	}
	e := r.set.Engine
	r.engine = limiter.New(r.stores.main, limiter.Options{
		Timeout:     e.Timeout,
		HardTimeout: e.HardTimeout,
		MaxKeyBytes: e.MaxKeyBytes,
		Instances:   e.Instances,
		Local:       r.stores.local,
		Observer:    obs,
		Logger:      r.log,
	})
	if err := register(r.registry, stateMetrics(r.engine, r.stores.main, r.stores.local)); err != nil {
		return fmt.Errorf("%s: metrics: %w", r.name, err)
	}
	return nil
}

// shutdown flushes what the engine and the tracing hold (within ctx):
// the leased units go back to the store for the other instances, the
// spans not yet exported are sent.
func (r *root) shutdown(ctx context.Context) {
	if r.engine != nil {
		if err := r.engine.ReturnLeases(ctx); err != nil {
			r.log.Warn("returning leased units", "err", err)
		}
	}
	if err := r.tracing.shutdown(ctx); err != nil {
		r.log.Warn("flushing the traces", "err", err)
	}
}

// closeStores closes the stores (the memory store writes its state file).
func (r *root) closeStores() error {
	if err := r.stores.close(); err != nil {
		r.log.Error("closing the store", "err", err)
		return fmt.Errorf("%s: %w", r.name, err)
	}
	return nil
}

// NewLogger returns the logger of a process: text or JSON lines on w at
// level. Lines above debug are held back past ten of one message a second
// (lograte.Handler): many are caused by clients, one a request.
func NewLogger(w io.Writer, json bool, level slog.Level) *slog.Logger {
	o := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(w, o)
	if json {
		h = slog.NewJSONHandler(w, o)
	}
	return slog.New(lograte.NewHandler(h, lograte.HandlerOptions{}))
}

// displayAddr turns a listener's address into one a client can use: an
// unspecified host becomes 127.0.0.1.
func displayAddr(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
