package watch

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestTrackerRules holds the event rule's core: what makes the files
// whole, what holds them, and what is not about them.
func TestTrackerRules(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	var tr tracker
	tr.setNames([]string{path})
	now := time.Unix(1000, 0)
	tr.note(dir, "f", opModify, now)
	if !tr.inProgress(now, time.Minute) || tr.complete {
		t.Fatal("a modification is not a write in progress")
	}
	tr.touched = false
	tr.note(dir, "other", opCloseWrite, now)
	if !tr.inProgress(now, time.Minute) {
		t.Fatal("another file's close ended the write")
	}
	if !tr.complete || tr.touched {
		t.Fatal("a file closed beside the followed ones (one that joins them) does not make the files whole, or unsettles the look")
	}
	tr.complete = false
	tr.note(dir, "f", opCloseWrite, now)
	if tr.inProgress(now, time.Minute) || !tr.complete {
		t.Fatal("the close did not end the write")
	}
	tr.complete = false
	tr.note(dir, "..data", opMovedTo, now)
	if !tr.complete {
		t.Fatal("a rename in the directory (a symbolic-link swap) does not make the files whole")
	}
	tr.note(dir, "f", opCreateFile, now)
	tr.loseAll()
	if tr.inProgress(now, time.Minute) || !tr.lost {
		t.Fatal("lost events leave a write in progress")
	}
	tr.note(dir, "f", opModify, now)
	if tr.inProgress(now.Add(time.Minute), time.Minute) {
		t.Fatal("a write past HoldOpen still holds")
	}
	tr.lost = false
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	tr.note(other, "f", opModify, now)
	tr.dirGone(other)
	if tr.lost {
		t.Fatal("a directory no followed path leads through went away, and the events were taken as lost")
	}
	if _, busy := tr.writing[dirName{other, "f"}]; busy {
		t.Fatal("a write in a directory that went away is still in progress")
	}
	tr.dirGone(dir)
	if !tr.lost {
		t.Fatal("the directory of a followed path went away, and the events were not taken as lost")
	}
}
