// Package dashboard is the operator's live view of floodgate serve, at the
// admin listener's /ui: decisions and 429s per limit over the last hour at
// one-second resolution, the answers refused before any limit (401, 403
// and the penalty box's 429) per route, the keys limited most, quota use
// per API key, store health, each route's overload control (its cap and
// its upstream's latency, sampled every tick), the policy's version and
// its reloads. The page shows the last 5 minutes, 15 minutes or hour of
// them, zooms into a stretch dragged across a chart, and orders the
// panels by their refusals, most refused first.
//
// Recorder is a limiter.Observer: every decision adds to fixed rings of
// 3,600 one-second slots per limit (atomic adds, no locks, no allocation),
// and every 429 to a bounded heavy-hitters sketch (Space-Saving). Its
// memory is bounded: at most MaxSeries limits have their own series at
// once (the rest share "other"), and the sketch keeps a fixed number of
// keys. A limit's series that counted nothing for an hour (Window) is
// freed, so that limits renamed or removed by reloads give their room to
// the limits in use; a rule that still keeps a freed series gets a live
// one on its next decision.
// As a gateway.RefusalObserver it also counts each route's answers refused
// before any limit in rings of the same kind; at most MaxSeries routes get
// their own, the rest share "other". These are this instance's alone.
//
// With several instances on Redis, Share publishes each instance's last
// seconds and top keys to the store once a second and merges the others',
// so that every instance's dashboard shows the whole deployment; its cost
// is a handful of commands per instance per second, whatever the traffic.
// The other instances' limits are bounded the same way: at most MaxSeries
// at once, a name the others counted nothing in for an hour freed.
//
// The page and its chart library (uPlot, from npm) are embedded in the
// binary: no CDN, nothing to install. scripts/vendor-ui.sh fetches the
// library again into web/vendor. The page runs under ContentSecurityPolicy
// (its own scripts and styles, nothing inline) and puts what its feeds
// carry, keys that clients chose among it, in the page as text only, with
// the characters that cannot be seen or that reorder text written out.
package dashboard
