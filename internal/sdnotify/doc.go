// Package sdnotify tells systemd how a service is doing, as sd_notify(3)
// does: READY=1 once it serves, RELOADING=1 and READY=1 around a reload,
// STOPPING=1 when it begins to stop, and WATCHDOG=1 at half the interval
// systemd's watchdog gives (WatchdogSec=). The messages are datagrams on
// the unix socket the NOTIFY_SOCKET variable names (a path, or "@name" in
// the abstract namespace); without it every call does nothing, so a
// process started by anything else than systemd is unaffected.
package sdnotify
