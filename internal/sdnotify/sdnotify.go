package sdnotify

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The states a service reports.
const (
	Ready    = "READY=1"
	Stopping = "STOPPING=1"
	Watchdog = "WATCHDOG=1"
)

// Notifier sends states to systemd. A nil *Notifier sends nothing.
type Notifier struct {
	addr *net.UnixAddr
}

// New returns a Notifier for the socket NOTIFY_SOCKET names, read with
// getenv, or nil when it names none.
func New(getenv func(string) string) *Notifier {
	name := getenv("NOTIFY_SOCKET")
	if name == "" || (name[0] != '/' && name[0] != '@') {
		return nil // not a unix socket: systemd also accepts vsock, unsupported here
	}
	return &Notifier{addr: &net.UnixAddr{Name: name, Net: "unixgram"}}
}

// Notify sends one message of newline-separated states ("READY=1",
// "STATUS=serving").
func (n *Notifier) Notify(states ...string) error {
	if n == nil {
		return nil
	}
	conn, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(strings.Join(states, "\n"))); err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	return nil
}

// Reloading is the message that a reload begins: RELOADING=1 with the
// monotonic clock's time, which systemd asks of Type=notify-reload services
// and other types accept. Send Ready when the reload is done.
func Reloading() []string {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return []string{"RELOADING=1", "MONOTONIC_USEC=" + strconv.FormatInt(ts.Nano()/1000, 10)}
}

// Status is a STATUS= line: free text systemctl status shows.
func Status(text string) string {
	return "STATUS=" + strings.ReplaceAll(text, "\n", " ")
}

// WatchdogInterval returns how often to send Watchdog: half the interval
// WATCHDOG_USEC gives, or 0 when systemd watches no watchdog for this
// process (no WATCHDOG_USEC, or a WATCHDOG_PID that is another process's).
func WatchdogInterval(getenv func(string) string, pid int) time.Duration {
	usec, err := strconv.ParseInt(getenv("WATCHDOG_USEC"), 10, 64)
	if err != nil || usec <= 0 {
		return 0
	}
	if p := getenv("WATCHDOG_PID"); p != "" && p != strconv.Itoa(pid) {
		return 0
	}
	return time.Duration(usec) * time.Microsecond / 2
}
