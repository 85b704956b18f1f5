package app

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/floodgate/floodgate/accesslog"
	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/internal/cli"
	"github.com/prometheus/client_golang/prometheus"
)

// accessLogSettings are the access log's settings: the file's, then the
// flags.
func (s *server) accessLogSettings() (accesslog.Options, bool, error) {
	return accessLogOptions(s.srv.AccessLog, s.cfg)
}

// accessLogOptions are the settings of the access log a, from the policy
// file at o.Config, with the flags of o in their place when given. It
// reports whether there is a log.
func accessLogOptions(a config.AccessLog, o *ServeOptions) (accesslog.Options, bool, error) {
	ao := accesslog.Options{MaxSize: a.MaxSize, MaxFiles: a.MaxFiles}
	path, format := a.Path, a.Format
	if o.AccessLog != "" {
		path = o.AccessLog
	}
	if o.AccessLogFormat != "" {
		format = o.AccessLogFormat
	}
	if path == "" || path == "off" {
		return ao, false, nil
	}
	f, err := accesslog.ParseFormat(format)
	if err != nil {
		return ao, false, cli.Usagef("serve: --access-log-format: %v", err)
	}
	ao.Format = f
	if path != "-" {
		ao.Path = path
		if o.AccessLog == "" && !filepath.IsAbs(path) {
			// A path from the file is relative to the file, like its
			// other paths.
			ao.Path = filepath.Join(filepath.Dir(o.Config), path)
		}
	}
	return ao, true, nil
}

// exactStoreClock reports whether the memory store reads the system clocks
// at every decision instead of its cached clock: with an access log on, so
// that the instants the log records (the store's, clamped per key so that
// they never go back) are in the order the decisions were made, and a
// replay of the log decides as the gateway did; the cached clock, shared
// by decisions a millisecond apart and refined per shard, is not.
func (s *server) exactStoreClock() (bool, error) {
	_, on, err := s.accessLogSettings()
	return on, err
}

// openAccessLog opens the access log, if one is asked for, and counts its
// records in the metrics. It returns nil when there is none.
func (s *server) openAccessLog(stdout io.Writer) (gateway.AccessLogger, error) {
	o, on, err := s.accessLogSettings()
	if err != nil || !on {
		return nil, err
	}
	if o.Path == "" {
		o.Out = stdout
	}
	o.Logger = s.log
	l, err := accesslog.New(o)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	s.accessLog = l
	for _, c := range []struct {
		name, help string
		v          func(accesslog.Stats) uint64
	}{
		{"floodgate_access_log_records_total", "Requests written to the access log.", func(st accesslog.Stats) uint64 { return st.Records }},
		{"floodgate_access_log_dropped_total", "Requests left out of the access log because its buffer was full.", func(st accesslog.Stats) uint64 { return st.Dropped }},
		{"floodgate_access_log_errors_total", "Failed writes and rotations of the access log.", func(st accesslog.Stats) uint64 { return st.Errors }},
	} {
		v := c.v
		if err := s.registry.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: c.name, Help: c.help},
			func() float64 { return float64(v(l.Stats())) })); err != nil {
			return nil, fmt.Errorf("serve: metrics: %w", err)
		}
	}
	return l, nil
}

// closeAccessLog writes out what the access log holds and closes it.
func (s *server) closeAccessLog() {
	if s.accessLog == nil {
		return
	}
	if err := s.accessLog.Close(); err != nil {
		s.log.Error("closing the access log", "err", err)
	}
	if st := s.accessLog.Stats(); st.Dropped > 0 {
		s.log.Warn("access log: records dropped because its buffer was full", "dropped", st.Dropped, "written", st.Records)
	}
}
