package console

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/access"
	"github.com/floodgate/floodgate/admin"
	"github.com/floodgate/floodgate/alarm"
	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/dashboard"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/internal/hostcheck"
	"github.com/floodgate/floodgate/keystore"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/penalty"
	"github.com/floodgate/floodgate/policy"
)

// Console is the operator's side of floodgate serve: the API keys managed
// at run time, the admin API, the dashboard and the quota alarms.
type Console struct {
	log      *slog.Logger
	srv      *config.Server
	reloader *policy.Reloader
	cfgPath  string
	instance string
	started  time.Time

	keys  *keystore.Store
	audit admin.AuditLog
	reg   prometheus.Registerer // Options.Registerer, for the admin API's metrics
	rec   *dashboard.Recorder
	// overload samples the routes' overload control (SampleOverload).
	overload atomic.Pointer[func(each func(route string, limit int, latency time.Duration))]
	share    *dashboard.Share
	alarms   *alarm.Alarms
	lists    *access.Lists // the allow and deny lists
	box      *penalty.Box  // the penalty box

	api   *admin.API
	dash  *dashboard.Handler
	stats func() limiter.Stats

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex // guards reloads
	reloads []dashboard.Reload
}

// maxReloads is how many reloads the dashboard lists.
const maxReloads = 20

// Options configure a Console.
type Options struct {
	// ConfigPath is the policy file's path; relative paths are relative to
	// it.
	ConfigPath string
	// StatePath is the memory store's state file ("" for none): the key
	// file and the audit log are named after it.
	StatePath string
	// Server holds the settings the process started with.
	Server *config.Server
	// Reloader is the policy in force.
	Reloader *policy.Reloader
	// Store is the store of the counters: a RedisStore keeps the console's
	// shared state in its Redis, through its client; any other store in
	// files.
	Store limiter.Store
	// Registerer receives the alarms' metrics.
	Registerer prometheus.Registerer
	// Logger receives the console's warnings.
	Logger *slog.Logger
}

// RedisStore is a store on Redis that lends the console its client (the
// console's one port to Redis): package redisstore's Store.
type RedisStore interface {
	Client() rueidis.Client
}

// redisPoll is how often the keys' version is read in Redis: ten small
// reads a second per instance, in place of change notices.
const redisPoll = 100 * time.Millisecond

// pollOnly is a key backend without its change notices: the keys are
// polled by their version (see the package documentation).
type pollOnly struct{ keystore.Backend }

// New opens the key store (in the store's Redis, or in a file beside the
// state file) and makes the dashboard's recorder and the alarms, which
// observe the engine's decisions.
func New(o Options) (*Console, error) {
	srv, log := o.Server, o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Console{log: log, srv: srv, reloader: o.Reloader, cfgPath: o.ConfigPath, instance: instanceID(), started: time.Now().UTC()}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.rec = dashboard.NewRecorder(time.Now().Unix())
	var backend keystore.Backend
	var dedup alarm.Deduper
	var poll time.Duration // the keystore's default on files
	loadLater := false     // a bad keys file stops the start; a Redis down does not
	var accessBackend access.Backend
	var banBackend penalty.Backend
	if rs, ok := o.Store.(RedisStore); ok {
		poll, loadLater = redisPoll, true
		rc := rs.Client()
		accessBackend, banBackend = access.NewRedis(rc), penalty.NewRedis(rc, 0)
		backend = pollOnly{keystore.NewRedisBackend(rc)}
		c.audit = admin.NewRedisAudit(rc, 0)
		dedup = alarm.NewRedisDedup(rc)
		c.share = dashboard.NewShare(rc, c.instance, c.rec, c.info, log)
	} else {
		keysPath := KeysFile(o.ConfigPath, o.StatePath, srv)
		backend = keystore.NewFileBackend(keysPath)
		c.audit = admin.NewFileAudit(strings.TrimSuffix(keysPath, ".keys.json")+".audit.jsonl", 0)
		dedup = alarm.NewLocalDedup()
	}
	reloader := o.Reloader
	reg := o.Registerer
	c.reg = reg
	c.lists = access.New(&reloader.Policy().Server().Access, accessBackend, redisPoll, log)
	var err error
	if c.box, err = penalty.New(reloader.Policy().Server().Bans, penalty.Options{Backend: banBackend, Registerer: reg,
		Logger: log, Poll: redisPoll}); err != nil {
		c.lists.Close()
		c.cancel()
		return nil, fmt.Errorf("console: %w", err)
	}
	ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
	defer cancel()
	if c.keys, err = keystore.New(ctx, keystore.Options{Backend: backend, Policy: reloader.Policy, Logger: log, PollInterval: poll,
		LoadLater: loadLater}); err != nil {
		c.Close()
		return nil, fmt.Errorf("console: %w", err)
	}
	reloader.SetKeySource(c.keys)
	if c.alarms, err = alarm.New(alarm.Options{Dedup: dedup, Logger: log, Registerer: reg, Instance: c.instance}); err != nil {
		c.Close()
		return nil, fmt.Errorf("console: %w", err)
	}
	if err := c.alarms.SetPolicy(reloader.Policy(), c.alarmPlans(reloader.Policy())); err != nil {
		log.Error("alarm webhooks refused", "err", err)
	}
	return c, nil
}

// StateFile is the memory store's state file of the policy at cfgPath, or
// "": a relative one is relative to the policy file, like its other paths.
func StateFile(cfgPath string, srv *config.Server) string {
	p := srv.StateFile
	if p != "" && !filepath.IsAbs(p) {
		p = filepath.Join(filepath.Dir(cfgPath), p)
	}
	return p
}

// KeysFile is the file the console keeps the API keys made through the
// admin API in, on the memory store: server.admin.keys_file, else beside
// the state file (or the policy file).
func KeysFile(cfgPath, statePath string, srv *config.Server) string {
	if srv.Admin.KeysFile != "" {
		return relTo(cfgPath, srv.Admin.KeysFile)
	}
	return consoleBase(cfgPath, statePath) + ".keys.json"
}

// consoleBase is the path the console's files are named after: the state
// file's, or the policy file's when there is none.
func consoleBase(cfgPath, statePath string) string {
	if statePath != "" {
		return statePath
	}
	return strings.TrimSuffix(cfgPath, filepath.Ext(cfgPath))
}

func relTo(cfgPath, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(filepath.Dir(cfgPath), p)
}

// instanceID names this process: host, pid and a random suffix.
func instanceID() string {
	host, _ := os.Hostname()
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Observer is every observer of the engine's decisions: m (the metrics),
// the dashboard's recorder and the alarms.
func (c *Console) Observer(m limiter.Observer) limiter.Observer {
	return observers{m, c.rec, c.alarms}
}

// Refusals is the gateway's RefusalObserver: the dashboard's recorder
// charts the answers refused before any limit, per route.
func (c *Console) Refusals() gateway.RefusalObserver { return c.rec }

// observers tells each of its observers about every decision.
type observers []limiter.Observer

// ObserveDecision calls each observer in turn.
func (o observers) ObserveDecision(req *limiter.Request, res *limiter.Result) {
	for _, x := range o {
		x.ObserveDecision(req, res)
	}
}

// Attach builds the admin API and the dashboard on the engine and starts
// the console's background work.
func (c *Console) Attach(eng limiter.Engine, stats func() limiter.Stats) error {
	c.stats = stats
	tokens := adminTokens(c.srv.Admin.Tokens)
	var err error
	c.api, err = admin.New(admin.Options{Tokens: tokens, Keys: c.keys, Audit: c.audit, Policy: c.reloader.Policy,
		Engine: eng, Instance: c.instance, Logger: c.log, Bans: c.box, Access: c.lists, Registerer: c.reg})
	if err != nil {
		return fmt.Errorf("console: %w", err)
	}
	// The tokens follow reloads (Reloaded). The dashboard's data takes
	// one while any is listed; a listener that started with tokens (it
	// may be beyond loopback) keeps asking for one when a reload takes
	// every token out, and then answers no one.
	started := len(tokens) > 0
	authorize := func(r *http.Request) bool {
		if !started && !c.api.HasTokens() {
			return true
		}
		_, ok := c.api.Authenticate(r)
		return ok
	}
	c.dash = dashboard.NewHandler(dashboard.Options{Recorder: c.rec, Share: c.share, Info: c.info,
		Quotas: c.quotas, Reloads: c.reloadHistory, Authorize: authorize, Logger: c.log})
	c.goRun(c.keys.Run)
	c.goRun(c.alarms.Run)
	c.goRun(c.tick)
	if c.share != nil {
		c.goRun(c.share.Run)
	}
	return nil
}

func (c *Console) goRun(f func(context.Context)) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f(c.ctx)
	}()
}

// tick advances the recorder's clock and rotates the heavy hitters.
func (c *Console) tick(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			c.rec.Tick(now.Unix())
			if sample := c.overload.Load(); sample != nil {
				(*sample)(c.rec.RecordOverload)
			}
			c.rec.Hitters().Rotate(now)
		}
	}
}

// adminTokens are the admin API's tokens of server.admin.tokens.
func adminTokens(list []config.Token) []admin.Token {
	var tokens []admin.Token
	for _, t := range list {
		var tk admin.Token
		b, _ := hex.DecodeString(t.SHA256)
		copy(tk.SHA256[:], b)
		tk.Name = t.Name
		tokens = append(tokens, tk)
	}
	return tokens
}

// Routes adds the admin API and the dashboard to the admin listener's mux.
func (c *Console) Routes(mux *http.ServeMux) {
	if c.api == nil {
		return
	}
	mux.Handle("/api/", c.api)
	mux.Handle("/ui", c.dash)
	mux.Handle("/ui/", c.dash)
}

// Authenticate reports whether r carries an admin token of those in
// force; with no admin API (before Attach) or no tokens, nothing does.
func (c *Console) Authenticate(r *http.Request) bool {
	if c.api == nil || !c.api.HasTokens() {
		return false
	}
	_, ok := c.api.Authenticate(r)
	return ok
}

// HasTokens reports whether an admin token is in force: server.admin.tokens
// as the last reload applied it.
func (c *Console) HasTokens() bool { return c.api != nil && c.api.HasTokens() }

// info describes this instance for the dashboard.
func (c *Console) info() dashboard.Instance {
	now := c.rec.Now()
	in := dashboard.Instance{ID: c.instance, Version: c.reloader.Policy().Version(), Store: c.srv.StoreKind(),
		Breaker: "closed", Health: c.rec.HealthOver(now-61, now-1), Reloads: c.reloader.Reloads(),
		Rejected: c.reloader.Rejected(), Started: c.started, Seen: time.Now().UTC()}
	if c.stats != nil && c.stats().BreakerOpen {
		in.Breaker = "open"
	}
	return in
}

// maxQuotaKeys caps the keys whose quotas the dashboard reads at a time.
const maxQuotaKeys = 500

// quotas reads every active key's quota with a peek.
func (c *Console) quotas(ctx context.Context) ([]dashboard.Quota, error) {
	var out []dashboard.Quota
	for _, kv := range c.api.Keys() {
		if kv.State != "active" {
			continue
		}
		if len(out) == maxQuotaKeys {
			break
		}
		k, err := c.api.Resolve(kv.Name)
		if err != nil {
			continue
		}
		_, q := k.Limits()
		if q == nil {
			continue
		}
		u, err := c.api.Peek(ctx, q, k.Counter())
		if err != nil {
			return nil, err
		}
		pct := 0.0
		if u.Capacity > 0 {
			pct = float64(u.Used) * 100 / float64(u.Capacity)
		}
		out = append(out, dashboard.Quota{Key: kv.Name, Plan: kv.Plan, Source: kv.Source, Limit: q.Name,
			Used: u.Used, Capacity: u.Capacity, Percent: pct, ResetsAt: u.ResetsAt})
	}
	return out, nil
}

// alarmPlans reads the plans' alarm settings (and their secrets).
func (c *Console) alarmPlans(p *policy.Policy) map[string]alarm.Plan {
	out := map[string]alarm.Plan{}
	for _, cp := range p.File().Plans {
		if cp.Alarms == nil {
			continue
		}
		pl := alarm.Plan{Thresholds: cp.Alarms.Thresholds, Webhook: cp.Alarms.Webhook, AllowLinkLocal: cp.Alarms.AllowLinkLocal}
		if cp.Alarms.SecretPath != "" {
			b, err := config.ReadSecret(cp.Alarms.SecretPath)
			if err != nil {
				c.log.Error("alarm secret unreadable; the plan's webhook is off", "plan", cp.Name, "err", err)
				pl.Webhook = ""
			}
			pl.Secret = b
		}
		out[cp.Name] = pl
	}
	return out
}

// Reloaded follows a new policy: admin tokens, alarms, keys, and the
// reload history.
func (c *Console) Reloaded(p *policy.Policy) {
	if c.api != nil {
		c.api.SetTokens(adminTokens(p.Server().Admin.Tokens))
	}
	if err := c.alarms.SetPolicy(p, c.alarmPlans(p)); err != nil {
		c.log.Error("alarm webhooks refused", "err", err)
	}
	c.keys.Follow() // no I/O: a stalled Redis holds neither this reload nor the next
	c.lists.SetFile(&p.Server().Access)
	c.box.SetRules(p.Server().Bans)
	c.addReload(dashboard.Reload{Time: time.Now().UTC(), Version: p.Version(), OK: true})
}

// Rejected records a rejected version of the policy file.
func (c *Console) Rejected(err error) {
	msg := err.Error()
	var errs config.Errors
	if errors.As(err, &errs) && len(errs) > 0 {
		msg = errs[0].Error()
		if len(errs) > 1 {
			msg += " (and " + strconv.Itoa(len(errs)-1) + " more)"
		}
	}
	c.addReload(dashboard.Reload{Time: time.Now().UTC(), OK: false, Error: msg})
}

func (c *Console) addReload(r dashboard.Reload) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reloads = append([]dashboard.Reload{r}, c.reloads...)
	if len(c.reloads) > maxReloads {
		c.reloads = c.reloads[:maxReloads]
	}
}

func (c *Console) reloadHistory() []dashboard.Reload {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]dashboard.Reload(nil), c.reloads...)
}

// Close stops the background work. The store's client stays open: it is
// the store's.
func (c *Console) Close() {
	c.cancel()
	c.wg.Wait()
	if c.lists != nil {
		c.lists.Close()
	}
	if c.box != nil {
		c.box.Close()
	}
}

// AdminHosts serves next only to requests that name the admin listener by
// an IP address, localhost (or a name under .localhost), or one of the
// names in server.admin.hosts: a request naming another host is answered
// 421 with the reason (hostcheck.Handler). A browser sends the name it
// resolved, so a page of another site whose name was made to point at the
// listener (DNS rebinding) cannot read /metrics, the dashboard or anything
// else there.
//
// Every answer, the 421 included, carries the admin listener's security
// headers (webHeaders).
func AdminHosts(names []string, next http.Handler) http.Handler {
	return webHeaders(hostcheck.Handler(hostcheck.Options{Listener: "admin", Setting: "server.admin.hosts", Names: names}, next))
}

// webHeaders sets, on every answer of next, what keeps a browser from
// doing with the admin listener's answers what its own page does not: the
// dashboard's Content-Security-Policy (scripts and styles of its own
// origin only, nothing inline, no framing), no sniffing of types, no
// framing by older browsers (X-Frame-Options), no Referer sent from the
// page, no copy kept by a browser or a proxy (Cache-Control: no-store: the
// answers hold keys, secrets and usage), and no reading by a page of
// another origin (Cross-Origin-Resource-Policy).
func webHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", dashboard.ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

// SampleOverload makes the dashboard sample the routes' overload control
// every tick: sample calls each with a route's cap and its adaptive
// limit's latency.
func (c *Console) SampleOverload(sample func(each func(route string, limit int, latency time.Duration))) {
	c.overload.Store(&sample)
}
