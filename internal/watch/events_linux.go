package watch

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// inotifyMask is what a watched directory reports: writes, closes after
// writing, renames and creations and deletions of its entries, and the
// directory's own removal.
const inotifyMask = unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM |
	unix.IN_CREATE | unix.IN_DELETE | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// inotify is the Linux notifier: one non-blocking inotify descriptor
// watching the directories of the files.
type inotify struct {
	fd   int
	dirs map[string]int // watched directory → watch descriptor
	wds  map[int]string // watch descriptor → directory
	buf  []byte
}

// newNotifier returns an inotify notifier, or nil when inotify cannot be
// had (the instance limit reached): Run then polls alone.
func newNotifier() notifier {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil
	}
	return &inotify{fd: fd, dirs: map[string]int{}, wds: map[int]string{}, buf: make([]byte, 64<<10)}
}

// watch makes the watched directories those of dirs. A directory
// that cannot be watched (missing, the watch limit reached) is not: its
// files are followed by the stability rule alone.
func (n *inotify) watch(dirs map[string]bool) {
	for d := range dirs {
		if _, ok := n.dirs[d]; ok {
			continue
		}
		wd, err := unix.InotifyAddWatch(n.fd, d, inotifyMask)
		if err != nil {
			continue
		}
		n.dirs[d], n.wds[wd] = wd, d
	}
	for d, wd := range n.dirs {
		if dirs[d] {
			continue
		}
		delete(n.dirs, d)
		if n.wds[wd] == d {
			delete(n.wds, wd)
			_, _ = unix.InotifyRmWatch(n.fd, uint32(wd))
		}
	}
}

func (n *inotify) drain(t *tracker, now time.Time) {
	for {
		k, err := unix.Read(n.fd, n.buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || k <= 0 {
			if err != nil && !errors.Is(err, unix.EAGAIN) {
				t.loseAll()
			}
			return
		}
		n.parse(t, n.buf[:k], now)
	}
}

// parse reads the events in b (struct inotify_event, then the name).
func (n *inotify) parse(t *tracker, b []byte, now time.Time) {
	for len(b) >= unix.SizeofInotifyEvent {
		wd := int(int32(binary.NativeEndian.Uint32(b[0:])))
		mask := binary.NativeEndian.Uint32(b[4:])
		size := int(binary.NativeEndian.Uint32(b[12:]))
		if unix.SizeofInotifyEvent+size > len(b) {
			t.loseAll()
			return
		}
		raw := b[unix.SizeofInotifyEvent : unix.SizeofInotifyEvent+size]
		b = b[unix.SizeofInotifyEvent+size:]
		for len(raw) > 0 && raw[len(raw)-1] == 0 {
			raw = raw[:len(raw)-1]
		}
		name := string(raw)
		if mask&unix.IN_Q_OVERFLOW != 0 {
			t.loseAll()
			continue
		}
		dir, ok := n.wds[wd]
		if !ok {
			continue
		}
		if mask&(unix.IN_IGNORED|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 {
			// The directory went away or moved: its watch no longer
			// says anything of the path; the next look watches it again.
			// That loses events only where a followed path still leads
			// (tracker.dirGone).
			delete(n.wds, wd)
			if n.dirs[dir] == wd {
				delete(n.dirs, dir)
			}
			if mask&unix.IN_IGNORED == 0 {
				_, _ = unix.InotifyRmWatch(n.fd, uint32(wd))
			}
			t.dirGone(dir)
			continue
		}
		if name == "" {
			continue
		}
		var o op
		switch {
		case mask&unix.IN_CLOSE_WRITE != 0:
			o = opCloseWrite
		case mask&unix.IN_MODIFY != 0:
			o = opModify
		case mask&unix.IN_MOVED_TO != 0:
			o = opMovedTo
		case mask&unix.IN_CREATE != 0:
			o = opCreateLink
			if fi, err := os.Lstat(filepath.Join(dir, name)); err == nil && fi.Mode().IsRegular() {
				o = opCreateFile
			}
		case mask&(unix.IN_DELETE|unix.IN_MOVED_FROM) != 0:
			o = opGone
		default:
			continue
		}
		t.note(dir, name, o, now)
	}
}

func (n *inotify) close() { _ = unix.Close(n.fd) }
