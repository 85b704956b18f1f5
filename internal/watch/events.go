package watch

import (
	"path/filepath"
	"time"
)

// DefaultHoldOpen is the longest a write in progress holds a new version
// back: past it, the stability rule applies what the file holds.
const DefaultHoldOpen = time.Minute

// notifier reports the file system's change events on the files Run
// follows (inotify on Linux). It is read without waiting, at each look, so
// Run needs no goroutine of its own.
type notifier interface {
	// watch makes dirs the watched directories (tracker.setNames).
	watch(dirs map[string]bool)
	// drain reads every event that arrived since the last drain into t.
	drain(t *tracker, now time.Time)
	close()
}

// op is what an event says of a name in a watched directory.
type op int

const (
	opModify     op = iota + 1 // written to, or truncated
	opCloseWrite               // a writer closed it
	opMovedTo                  // renamed into place
	opCreateFile               // a new regular file, to be written
	opCreateLink               // a new entry that is not a regular file (a symbolic link)
	opGone                     // deleted or renamed away
)

// dirName is a name in a directory.
type dirName struct{ dir, name string }

// tracker is what the events said since the last look: the pure core of
// the event rule, fed by a notifier.
type tracker struct {
	// paths are the followed files' absolute paths, as setNames got them.
	paths []string
	// names are the watched files, under every name a write reaches
	// them by (the path, and the file a symbolic link leads to).
	names map[dirName]bool
	// dirs are the directories of names.
	dirs map[string]bool
	// writing holds, for a watched file modified since its writer last
	// closed it, when it was last seen modified: a write is in progress.
	writing map[dirName]time.Time
	// complete reports a close after writing, or a rename into place,
	// since the last look: what the files hold now is whole.
	complete bool
	// touched reports any event about the watched files since reset.
	touched bool
	// lost reports events lost (a full queue, a directory that went
	// away): the events say nothing certain until the next look.
	lost bool
}

// setNames makes the tracker follow paths; it returns the directories to
// watch. Writes in progress in directories no longer watched are
// forgotten.
func (t *tracker) setNames(paths []string) map[string]bool {
	t.names = make(map[dirName]bool, 2*len(paths))
	t.dirs = make(map[string]bool, len(paths))
	t.paths = t.paths[:0]
	add := func(p string) {
		k := dirName{filepath.Dir(p), filepath.Base(p)}
		t.names[k] = true
		t.dirs[k.dir] = true
	}
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			continue
		}
		t.paths = append(t.paths, abs)
		add(abs)
		if real, err := filepath.EvalSymlinks(abs); err == nil && real != abs {
			add(real)
		}
	}
	for k := range t.writing {
		if !t.dirs[k.dir] {
			delete(t.writing, k)
		}
	}
	return t.dirs
}

// note records one event about name in dir at now. Writes are tracked
// for every name of a watched directory, so that a file that joins the
// followed ones (a new file in a directory of descriptor files) is known
// to be half written; only followed names make the files complete or
// touched.
func (t *tracker) note(dir, name string, o op, now time.Time) {
	k := dirName{dir, name}
	followed := t.names[k]
	switch o {
	case opModify, opCreateFile:
		if t.writing == nil {
			t.writing = map[dirName]time.Time{}
		}
		t.writing[k] = now
	case opCloseWrite, opMovedTo, opCreateLink, opGone:
		delete(t.writing, k)
	}
	switch {
	case followed:
		t.touched = true
		if o == opCloseWrite || o == opMovedTo || o == opCreateLink {
			t.complete = true
		}
	case o == opMovedTo || o == opCreateLink:
		// Another entry of a watched directory: a rename or a new link
		// there may change what a path leads to (Kubernetes swaps ..data
		// so).
		t.complete, t.touched = true, true
	case o == opCloseWrite:
		// Another file of a watched directory closed after writing: a
		// file that joins the followed ones (a descriptor file added)
		// is whole. Not touched: a file written nearby over and over
		// must not unsettle every look. A write in progress of a
		// followed file still holds the look back (inProgress).
		t.complete = true
	}
}

// dirGone records that the watch of dir ended: the directory was removed
// or renamed away, and its events are no longer seen. When a followed path
// still leads through dir (a directory replaced under its name), what the
// events say is uncertain until the next look (loseAll). When none does,
// nothing followed lives there any more and nothing is lost: that is the
// directory a symbolic link led to before it was swapped, which the
// kubelet removes right after it swaps a mounted ConfigMap's ..data link,
// and the swap (a rename into place) stays the event that applies the new
// version. Writes in progress there are forgotten either way.
func (t *tracker) dirGone(dir string) {
	for k := range t.writing {
		if k.dir == dir {
			delete(t.writing, k)
		}
	}
	if t.leadsThrough(dir) {
		t.loseAll()
	}
}

// leadsThrough reports whether a followed path is in dir or leads there
// through symbolic links now; a path whose links cannot be followed now
// counts as leading there.
func (t *tracker) leadsThrough(dir string) bool {
	for _, p := range t.paths {
		if filepath.Dir(p) == dir {
			return true
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil || filepath.Dir(real) == dir {
			return true
		}
	}
	return false
}

// loseAll records that events were lost: writes in progress are no
// longer known, and the stability rule alone decides the next look.
func (t *tracker) loseAll() {
	clear(t.writing)
	t.lost, t.touched = true, true
}

// inProgress reports whether a file is being written: modified within
// hold of now and not closed since. Older ones are forgotten (their writer
// holds the file open without writing: the stability rule decides).
func (t *tracker) inProgress(now time.Time, hold time.Duration) bool {
	busy := false
	for k, since := range t.writing {
		if now.Sub(since) >= hold {
			delete(t.writing, k)
			continue
		}
		busy = busy || t.names[k]
	}
	return busy
}
