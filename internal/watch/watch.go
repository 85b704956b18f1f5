package watch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/floodgate/floodgate/internal/yamlfile"
)

// DefaultInterval is the time between two looks at the files.
const DefaultInterval = time.Second

// File is one file of a Version: its path and the bytes read from it.
type File struct {
	Path string
	Data []byte
}

// Version is the contents of a set of files as read at one moment.
type Version struct {
	// Files are the files in the order they were asked for.
	Files []File
	// Hash is the SHA-256 of every file's path and contents (see Hash).
	Hash [sha256.Size]byte
}

// Short returns the first 12 hexadecimal digits of the version's hash, to
// name the version in logs.
func (v *Version) Short() string { return Short(v.Hash) }

// Short returns the first 12 hexadecimal digits of a hash.
func Short(h [sha256.Size]byte) string { return hex.EncodeToString(h[:6]) }

// Data returns the contents of the file at path, if the version has it.
func (v *Version) Data(path string) ([]byte, bool) {
	for _, f := range v.Files {
		if f.Path == path {
			return f.Data, true
		}
	}
	return nil, false
}

// Hash returns the SHA-256 of the files' paths and contents, each length
// prefixed so that no two different sets of files hash alike.
func Hash(files []File) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	for _, f := range files {
		binary.BigEndian.PutUint64(n[:], uint64(len(f.Path)))
		h.Write(n[:])
		h.Write([]byte(f.Path))
		binary.BigEndian.PutUint64(n[:], uint64(len(f.Data)))
		h.Write(n[:])
		h.Write(f.Data)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// Read reads the files at paths into a Version. Each is read as
// yamlfile.ReadFile reads it: a path that is not a regular file, or a file
// larger than yamlfile.MaxFileSize, is an error, found without blocking.
func Read(paths []string) (*Version, error) {
	v, _, err := read(paths)
	return v, err
}

// read reads the files and also returns what a look compares: every
// file's path, size, modification time and contents hash.
func read(paths []string) (*Version, string, error) {
	v := &Version{Files: make([]File, 0, len(paths))}
	var key bytes.Buffer
	for _, p := range paths {
		// Not os.ReadFile: a named pipe put at the path must not hang
		// the watcher, nor a huge file take its memory.
		data, err := yamlfile.ReadFile(p)
		if err != nil {
			return nil, "", fmt.Errorf("watch: %w", err)
		}
		// Stat after reading: a write that ends between the two shows up
		// in the next look as a different size, time or hash.
		st, err := os.Stat(p)
		if err != nil {
			return nil, "", fmt.Errorf("watch: %w", err)
		}
		sum := sha256.Sum256(data)
		fmt.Fprintf(&key, "%q %d %d %x\n", p, st.Size(), st.ModTime().UnixNano(), sum)
		v.Files = append(v.Files, File{Path: p, Data: data})
	}
	v.Hash = Hash(v.Files)
	return v, key.String(), nil
}

// Options configure Run. Files and Apply are required.
type Options struct {
	// Interval is the time between two looks (default DefaultInterval).
	Interval time.Duration
	// Files lists the files to look at; it is called at every look, so
	// that the set may change (the files of a directory, the key file a
	// policy names).
	Files func() ([]string, error)
	// Current is the hash of the version in use when Run starts. A
	// stable version with the same hash is not applied.
	Current [sha256.Size]byte
	// Apply receives every new version, once: a version that the caller
	// rejects is not offered again until the files change.
	Apply func(v *Version)
	// Fail, when set, receives the error of files that cannot be listed or
	// read, once per stable error.
	Fail func(err error)
	// PollOnly ignores the file system's change events (inotify), so that
	// the stability rule alone decides (see the package documentation).
	PollOnly bool
	// HoldOpen is how long after its last write a file whose writer has
	// not closed it holds new versions back (default DefaultHoldOpen);
	// past it, the stability rule applies what the file holds.
	HoldOpen time.Duration
	// NoWake keeps Run to its regular looks: the file system's events do
	// not wake it (it then holds one inotify instance rather than two). A
	// test on testing/synctest's clock needs it: the clock cannot advance
	// while a goroutine waits on the file system.
	NoWake bool
	// Now, when set, asks for a look at once (an operator's reload, such
	// as SIGHUP): the files are read when a value is received and a
	// version other than the applied one goes to Apply whatever the
	// stability rule says; files that cannot be read go to Fail. Looked
	// for a reload, the files are read as they are, even while written.
	Now <-chan struct{}
	// Started, when set, is called once, after the first look: from then
	// on the files' events are seen, so a write that begins after it is
	// held back as the package documentation says. A service announces
	// that it is ready after it, so that a file written at once by
	// whatever waited for that (a deploy script, a test) is not read half
	// written.
	Started func()
}

// look is what one look at the files saw.
type look struct {
	key string // paths, sizes, times and hashes; or the error
	v   *Version
	err error
}

// unsettled is the key of a look during which the files changed: no look
// agrees with it.
const unsettled = "unsettled"

// take lists and reads the files; w, when set, watches their directories
// first, so that a write that begins while they are read is seen.
func take(files func() ([]string, error), w *events) look {
	paths, err := files()
	if err != nil {
		return look{key: "error: " + err.Error(), err: err}
	}
	w.follow(paths)
	v, key, err := read(paths)
	if err != nil {
		return look{key: "error: " + err.Error(), err: err}
	}
	return look{key: key, v: v}
}

// events is a notifier and what it said; nil without one.
type events struct {
	n notifier
	t tracker
}

func (w *events) follow(paths []string) {
	if w != nil {
		w.n.watch(w.t.setNames(paths))
	}
}

// Run looks at the files every Interval until ctx ends and hands each new
// version to Apply, by the rules in the package documentation: at once
// when a writer closed a file or a file was renamed into place since the
// last look, else once two consecutive looks agree on it; never while a
// file is being written. The first look is taken at once, so a change made
// just before Run starts is applied one interval later.
func Run(ctx context.Context, o Options) {
	every := o.Interval
	if every <= 0 {
		every = DefaultInterval
	}
	hold := o.HoldOpen
	if hold <= 0 {
		hold = DefaultHoldOpen
	}
	var w *events
	var k *waker
	if !o.PollOnly {
		if n := newNotifier(); n != nil {
			w = &events{n: n}
			defer n.close()
			// Wake-ups help only where the event rule can apply a
			// version: with the notifier's events.
			if !o.NoWake {
				if k = newWaker(); k != nil {
					defer k.close()
				}
			}
		}
	}
	var wake <-chan struct{}
	if k != nil {
		wake = k.c
	}
	follow := func() {
		if k != nil {
			k.follow(w.t.dirs)
		}
	}
	applied := o.Current
	var failed string // the key of the last error reported
	prev := take(o.Files, w)
	follow()
	if w != nil {
		w.n.drain(&w.t, time.Now())
		w.t.complete, w.t.touched, w.t.lost = false, false, false
	}
	if o.Started != nil {
		o.Started()
	}
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-wake:
			if v := early(ctx, o.Files, w, hold, applied); v != nil {
				applied, failed = v.Hash, ""
				o.Apply(v)
			}
			follow()
			continue
		case <-o.Now:
			cur := take(o.Files, w)
			follow()
			switch {
			case cur.err != nil:
				if o.Fail != nil {
					o.Fail(cur.err)
				}
				failed = cur.key
			case cur.v.Hash != applied:
				applied, failed = cur.v.Hash, ""
				o.Apply(cur.v)
			}
			continue
		case <-t.C:
		}
		complete, writing := false, false
		if w != nil {
			w.n.drain(&w.t, time.Now())
			complete = w.t.complete && !w.t.lost
			w.t.complete, w.t.touched, w.t.lost = false, false, false
		}
		cur := take(o.Files, w)
		if w != nil {
			now := time.Now()
			w.n.drain(&w.t, now)
			if w.t.touched {
				// The files changed while they were read: this look
				// says nothing, and the next one starts afresh.
				cur = look{key: unsettled}
			}
			writing = w.t.inProgress(now, hold)
		}
		follow()
		// The timer restarts after the look, so looks are at least one
		// interval apart however long reading takes.
		t.Reset(every)
		stable := cur.key == prev.key && cur.key != unsettled
		prev = cur
		if writing || cur.key == unsettled {
			continue
		}
		if cur.err != nil {
			if stable && cur.key != failed && o.Fail != nil {
				o.Fail(cur.err)
			}
			if stable {
				failed = cur.key
			}
			continue
		}
		if !stable && !complete {
			continue
		}
		failed = ""
		if cur.v.Hash == applied {
			continue
		}
		applied = cur.v.Hash
		o.Apply(cur.v)
	}
}

// early is the look Run takes when woken by a change: it returns the
// version to apply when the event rule applies one (a writer closed a
// file or one was renamed into place, no write is in progress, and the
// files did not change while read), else nil, leaving what the events
// said to the next regular look. It does not count for the stability
// rule, whose looks stay an interval apart.
func early(ctx context.Context, files func() ([]string, error), w *events, hold time.Duration, applied [sha256.Size]byte) *Version {
	st := time.NewTimer(wakeSettle)
	defer st.Stop()
	select {
	case <-ctx.Done():
		return nil
	case <-st.C:
	}
	w.n.drain(&w.t, time.Now())
	if !w.t.complete || w.t.lost || w.t.inProgress(time.Now(), hold) {
		return nil
	}
	w.t.complete, w.t.touched = false, false
	cur := take(files, w)
	now := time.Now()
	w.n.drain(&w.t, now)
	if w.t.touched || cur.err != nil || w.t.inProgress(now, hold) {
		// Changed while read, or being written again: the next look
		// (woken again by those events, or the regular one) decides.
		w.t.complete = true
		return nil
	}
	if cur.v.Hash == applied {
		return nil
	}
	return cur.v
}
