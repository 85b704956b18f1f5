package regfile

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// WriteAtomic replaces the file at path with data, whole or not at all, and
// durably: data goes to a new file beside it (mode perm), which is synced,
// then renamed over path, and the directory is synced, so that once it
// returns nil a crash or a power cut leaves data at path, never the file
// before it (a key revoked coming back) nor a part of data. A failure
// leaves the file at path as it was and no temporary file behind.
func WriteAtomic(path string, data []byte, perm fs.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Chmod(perm)
	}
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		os.Remove(tmp)
		return werr
	}
	// The rename is in the directory: sync it too, or a crash may undo it.
	if err := SyncDir(dir); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// SyncDir syncs the directory dir, so that a file renamed or created in
// it stays there across a crash: a writer that streams a file of its own
// and renames it into place (the memory store's snapshot) calls it after
// the rename, as WriteAtomic does.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync the directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync the directory %s: %w", dir, err)
	}
	return nil
}
