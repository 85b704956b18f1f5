package regfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// WriteAtomic replaces the file at path with data, whole or not at all, and
// durably: data goes to a new file beside it (mode perm), which is synced,
// then renamed over path, and the directory is synced, so that once it
// returns nil a crash or a power cut leaves data at path, never the file
// before it (a key revoked coming back) nor a part of data. A failure
// leaves the file at path as it was and no temporary file behind.
//
// A symbolic link at path (a mounted volume's, or one an operator made)
// is followed, as reading it does: the file it leads to is replaced, its
// new content written beside it, in its directory, and the link stays. A
// link to nothing yet leads to the file created.
func WriteAtomic(path string, data []byte, perm fs.FileMode) error {
	path, err := LinkTarget(path)
	if err != nil {
		return err
	}
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

// maxLinks bounds the symbolic links LinkTarget follows, as the kernel
// bounds those it follows in one path (Linux: 40).
const maxLinks = 40

// LinkTarget returns the path of the file that path leads to through
// symbolic links: path itself, with the links of its directories
// resolved, when it is no link or names nothing yet. Each link is read
// relative to the real directory it is in, as the kernel reads it, so
// that a link to ../x in a directory reached through a link leads where
// opening it does.
func LinkTarget(path string) (string, error) {
	p := path
	for range maxLinks {
		dir, base := ".", p
		if i := strings.LastIndexByte(p, filepath.Separator); i >= 0 {
			dir, base = p[:i+1], p[i+1:]
		}
		realDir, err := filepath.EvalSymlinks(dir)
		if err != nil {
			return "", err
		}
		p = filepath.Join(realDir, base)
		st, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return p, nil
		}
		if err != nil {
			return "", err
		}
		if st.Mode()&fs.ModeSymlink == 0 {
			return p, nil
		}
		to, err := os.Readlink(p)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(to) {
			p = to
		} else {
			p = realDir + string(filepath.Separator) + to
		}
	}
	return "", &Error{Path: path, Msg: fmt.Sprintf("more than %d symbolic links in a row", maxLinks)}
}
