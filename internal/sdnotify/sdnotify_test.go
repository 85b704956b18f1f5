package sdnotify

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// listen opens a unixgram socket at name, as systemd does for a service.
func listen(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func receive(t *testing.T, conn *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, 4096)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

func TestNotifyOnAPathAndInTheAbstractNamespace(t *testing.T) {
	t.Parallel()
	for _, name := range []string{filepath.Join(t.TempDir(), "notify"), fmt.Sprintf("@floodgate-sdnotify-test-%d", os.Getpid())} {
		conn := listen(t, name)
		n := New(func(k string) string { return map[string]string{"NOTIFY_SOCKET": name}[k] })
		if n == nil {
			t.Fatalf("%s: no notifier", name)
		}
		if err := n.Notify(Ready, Status("serving")); err != nil {
			t.Fatal(err)
		}
		if got := receive(t, conn); got != "READY=1\nSTATUS=serving" {
			t.Errorf("%s: got %q", name, got)
		}
		if err := n.Notify(Reloading()...); err != nil {
			t.Fatal(err)
		}
		if got := receive(t, conn); !strings.HasPrefix(got, "RELOADING=1\nMONOTONIC_USEC=") {
			t.Errorf("%s: got %q", name, got)
		}
	}
}

func TestWithoutSystemd(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"", "vsock:2:1234"} {
		n := New(func(string) string { return v })
		if n != nil {
			t.Errorf("NOTIFY_SOCKET=%q: a notifier", v)
		}
		if err := n.Notify(Ready); err != nil {
			t.Errorf("a nil notifier: %v", err)
		}
	}
	if err := New(func(string) string { return filepath.Join(t.TempDir(), "nobody") }).Notify(Ready); err == nil {
		t.Error("no error for a socket nobody listens on")
	}
}

func TestWatchdogInterval(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, c := range []struct {
		env  map[string]string
		want time.Duration
	}{
		{map[string]string{"WATCHDOG_USEC": "30000000"}, 15 * time.Second},
		{map[string]string{"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "42"}, 15 * time.Second},
		{map[string]string{"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "43"}, 0},
		{map[string]string{"WATCHDOG_USEC": "0"}, 0},
		{map[string]string{"WATCHDOG_USEC": "x"}, 0},
		{map[string]string{}, 0},
	} {
		if got := WatchdogInterval(env(c.env), 42); got != c.want {
			t.Errorf("%v: %v, want %v", c.env, got, c.want)
		}
	}
}
