package watch

import (
	"time"

	"github.com/fsnotify/fsnotify"
)

// wakeSettle is how long Run waits after a wake-up before it looks, so
// that the events of one update (a write, its close, a rename) are read
// by one look.
const wakeSettle = 5 * time.Millisecond

// waker wakes Run when something changes in the watched directories, so
// that a version the event rule can apply is applied within milliseconds
// rather than at the next look. It only wakes: the rules are decided from
// the notifier's events (fsnotify does not report a writer's close, which
// the event rule needs).
type waker struct {
	fw   *fsnotify.Watcher
	c    chan struct{}
	dirs map[string]bool
}

// newWaker returns a waker, or nil when the system gives none (Run then
// finds every change at its next look).
func newWaker() *waker {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil
	}
	k := &waker{fw: fw, c: make(chan struct{}, 1), dirs: map[string]bool{}}
	go func() {
		for {
			select {
			case _, ok := <-fw.Events:
				if !ok {
					return
				}
				select {
				case k.c <- struct{}{}:
				default: // a wake-up is already pending
				}
			case _, ok := <-fw.Errors:
				if !ok {
					return
				}
			}
		}
	}()
	return k
}

// follow makes dirs the watched directories. A directory that cannot be
// watched is tried again at the next call.
func (k *waker) follow(dirs map[string]bool) {
	for d := range dirs {
		if !k.dirs[d] && k.fw.Add(d) == nil {
			k.dirs[d] = true
		}
	}
	for d := range k.dirs {
		if !dirs[d] {
			_ = k.fw.Remove(d)
			delete(k.dirs, d)
		}
	}
}

func (k *waker) close() { _ = k.fw.Close() }
