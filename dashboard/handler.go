package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"
)

//go:embed web
var webFS embed.FS

// Quota is one API key's use of its quota.
type Quota struct {
	Key      string    `json:"key"`
	Plan     string    `json:"plan"`
	Source   string    `json:"source"`
	Limit    string    `json:"limit"`
	Used     int64     `json:"used"`
	Capacity int64     `json:"capacity"`
	Percent  float64   `json:"percent"`
	ResetsAt time.Time `json:"resets_at"`
}

// Reload is one reload of the policy file, applied or rejected.
type Reload struct {
	Time    time.Time `json:"time"`
	Version string    `json:"version,omitempty"`
	OK      bool      `json:"ok"`
	Error   string    `json:"error,omitempty"`
}

// Options configures the dashboard's handler. Recorder and Info are
// required.
type Options struct {
	// Recorder holds this instance's counts.
	Recorder *Recorder
	// Share, when set, adds the other instances' counts.
	Share *Share
	// Info describes this instance.
	Info func() Instance
	// Quotas lists the API keys' quota use (it is called at most once a
	// second).
	Quotas func(ctx context.Context) ([]Quota, error)
	// Reloads returns the reload history, newest first.
	Reloads func() []Reload
	// Authorize, when set, must accept every data request; the page and
	// its assets are public (they hold no data).
	Authorize func(r *http.Request) bool
	// Logger receives failures (default: discard).
	Logger *slog.Logger
}

// ContentSecurityPolicy is the policy the dashboard's page is written for:
// its scripts, styles and data come from its own origin only (no inline
// script or style attribute, no eval), its one image is the empty icon
// (data:), it has no plugins, no <base> and posts no form, and no page may
// frame it. The admin listener sends it with every answer.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the dashboard under /ui/.
type Handler struct {
	o   Options
	log *slog.Logger
	mux *http.ServeMux

	mu       sync.Mutex // guards the quota cache
	quotas   []Quota
	quotaErr error
	quotaAt  time.Time
}

// NewHandler builds the dashboard's handler.
func NewHandler(o Options) *Handler {
	h := &Handler{o: o, log: o.Logger, mux: http.NewServeMux()}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	sub, _ := fs.Sub(webFS, "web")
	static := http.StripPrefix("/ui/", http.FileServerFS(sub))
	h.mux.Handle("GET /ui/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", ContentSecurityPolicy)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		static.ServeHTTP(w, r)
	}))
	h.mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	h.mux.Handle("GET /ui/api/overview", h.data(h.overview))
	h.mux.Handle("GET /ui/api/quotas", h.data(h.quotaView))
	return h
}

// ServeHTTP serves the dashboard.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

func (h *Handler) data(f func(r *http.Request) (any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if h.o.Authorize != nil && !h.o.Authorize(r) {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"a valid bearer token is required"}` + "\n"))
			return
		}
		v, err := f(r)
		var bad requestError
		if errors.As(err, &bad) {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": bad.Error()})
			return
		}
		if err != nil {
			h.log.Warn("dashboard: data", "path", r.URL.Path, "err", err)
			w.WriteHeader(http.StatusInternalServerError)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
			return
		}
		_ = json.NewEncoder(w).Encode(v)
	})
}

// requestError is a data request's fault, answered 400 with its text.
type requestError string

// Error returns the text of e.
func (e requestError) Error() string { return string(e) }

// overview answers the traffic, refusals, top-keys and health panels;
// ?since=S
// returns only the seconds after S (the page asks for the last hour once,
// then for what is new).
func (h *Handler) overview(r *http.Request) (any, error) {
	rec := h.o.Recorder
	now := rec.Now()
	since := now - Window
	if s := r.URL.Query().Get("since"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			if len(s) > 32 {
				s = s[:32] + "…"
			}
			return nil, requestError("dashboard: since: " + strconv.Quote(s) + " is not a Unix second")
		}
		if v > since {
			since = min(v, now)
		}
	}
	// The current second is still being counted: send up to the last
	// complete one.
	until := now - 1
	since = min(since, until)
	series := rec.Counts(since, until)
	top := rec.Hitters().Top(20)
	instances := []Instance{h.o.Info()}
	if h.o.Share != nil {
		h.o.Share.addRemote(series, since, until)
		top = MergeHitters(20, top, h.o.Share.Top())
		if in := h.o.Share.Instances(); len(in) > 0 {
			in[0] = instances[0]
			instances = in
		}
	}
	names := make([]string, 0, len(series))
	for n := range series {
		if n != "all" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var reloads []Reload
	if h.o.Reloads != nil {
		reloads = h.o.Reloads()
	}
	return map[string]any{
		"from":      since + 1,
		"until":     until,
		"limits":    names,
		"series":    series,
		"health":    rec.HealthPoints(since, until),
		"top":       top,
		"instances": instances,
		"reloads":   reloads,
		"overload":  rec.OverloadPoints(since, until),
		"refused":   rec.RefusalPoints(since, until),
	}, nil
}

// quotaTimeout bounds a read of the keys' quotas.
const quotaTimeout = 10 * time.Second

// quotaView answers the quota panel: every key's use, and the keys
// nearest their quota.
func (h *Handler) quotaView(r *http.Request) (any, error) {
	h.mu.Lock()
	if time.Since(h.quotaAt) >= time.Second && h.o.Quotas != nil {
		// The answer is kept for every client asking in the next second:
		// the one that asked may leave without ending the read for them.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), quotaTimeout)
		h.quotas, h.quotaErr = h.o.Quotas(ctx)
		cancel()
		h.quotaAt = time.Now()
	}
	qs, err := h.quotas, h.quotaErr
	h.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if qs == nil {
		qs = []Quota{}
	}
	nearest := append([]Quota(nil), qs...)
	sort.SliceStable(nearest, func(i, j int) bool { return nearest[i].Percent > nearest[j].Percent })
	if len(nearest) > 5 {
		nearest = nearest[:5]
	}
	return map[string]any{"keys": qs, "nearest": nearest}, nil
}
