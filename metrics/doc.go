// Package metrics is Floodgate's Prometheus instrumentation: one Metrics
// value counts every decision once, at the engine (it is the engine's
// limiter.Observer), labelled by front end and limit, and takes the few
// events only a front end sees. See Metrics for the series; the gauges of
// the gateway's overload control are read from it at each scrape
// (WatchOverload), and its sheds carry a tenant label bounded like the
// limit label.
package metrics
