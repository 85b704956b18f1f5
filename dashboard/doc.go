// Package dashboard is the operator's live view of floodgate serve, at the
// admin listener's /ui: decisions and 429s per limit over the last hour at
// one-second resolution, the keys limited most, quota use per API key,
// store health, each route's overload control (its cap and its
// upstream's latency, sampled every tick), the policy's version and its
// reloads.
//
// Recorder is a limiter.Observer: every decision adds to fixed rings of
// 3,600 one-second slots per limit (atomic adds, no locks, no allocation),
// and every 429 to a bounded heavy-hitters sketch (Space-Saving). Its
// memory is bounded: at most MaxSeries limits get their own series
// (the rest share "other"), and the sketch keeps a fixed number of keys.
//
// With several instances on Redis, Share publishes each instance's last
// seconds and top keys to the store once a second and merges the others',
// so that every instance's dashboard shows the whole deployment; its cost
// is a handful of commands per instance per second, whatever the traffic.
//
// The page and its chart library (uPlot, from npm) are embedded in the
// binary: no CDN, nothing to install. scripts/vendor-ui.sh fetches the
// library again into web/vendor.
package dashboard
