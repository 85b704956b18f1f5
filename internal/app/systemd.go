package app

import (
	"log/slog"
	"os"
	"time"

	"github.com/floodgate/floodgate/internal/sdnotify"
)

// systemd tells systemd how a long-running command is doing (Type=notify),
// when it gave a notification socket. A failure to tell is logged, never
// fatal. The zero value tells nothing.
type systemd struct {
	notify *sdnotify.Notifier
	getenv func(string) string
	log    *slog.Logger
}

// newSystemd returns the notifier of the socket NOTIFY_SOCKET names, read
// with getenv.
func newSystemd(getenv func(string) string, log *slog.Logger) systemd {
	return systemd{notify: sdnotify.New(getenv), getenv: getenv, log: log}
}

// tell sends states ("READY=1", "STATUS=serving") in one message.
func (s systemd) tell(states ...string) {
	if err := s.notify.Notify(states...); err != nil {
		s.log.Warn("telling systemd", "states", states, "err", err)
	}
}

// watchdog tells systemd's watchdog, when it has one (WATCHDOG_USEC for
// this process), that the caller's loop turns: it sends WATCHDOG=1 now and
// returns a channel that ticks at half the watchdog's interval, on which
// the loop sends it again; nil without a watchdog. stop ends the ticks.
func (s systemd) watchdog() (ticks <-chan time.Time, stop func()) {
	if s.notify == nil || s.getenv == nil {
		return nil, func() {}
	}
	d := sdnotify.WatchdogInterval(s.getenv, os.Getpid())
	if d <= 0 {
		return nil, func() {}
	}
	t := time.NewTicker(d)
	s.tell(sdnotify.Watchdog)
	return t.C, t.Stop
}
