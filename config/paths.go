package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/floodgate/floodgate/internal/tlsfile"
)

// The files a policy names that floodgate writes, or reads only when it
// runs, are checked by the functions below; floodgate check and the start
// of floodgate serve call the same ones (internal/app.CheckFiles), so that
// a file serve would refuse, or would start without, fails the check. They
// never open a file for reading in a way that waits (a named pipe, a
// device) and never create, change or remove anything: a file serve
// creates later is judged by its directory.

// CheckLogFile reports why floodgate could not keep a log at path: append
// to it from the start and, for a regular file, rotate it beside itself
// (FILE to FILE.1 and so on, package accesslog). It only looks at the
// metadata of the file and of its directory (stat, and access(2) for the
// permissions of the user it runs as), so it is safe on any path and never
// waits. A path that does not exist yet needs a directory in which files
// can be created; an existing regular file needs to be writable, and so
// does its directory; a device or a named pipe (/dev/stdout) needs only to
// be writable; a directory is refused.
func CheckLogFile(path string) error {
	st, err := os.Stat(path)
	switch {
	case err == nil && st.IsDir():
		return fmt.Errorf("%s is a directory; want the log file's path", path)
	case err == nil && !st.Mode().IsRegular():
		// Written to, never renamed.
		if err := access(path, accessWrite); err != nil {
			return fmt.Errorf("cannot write %s: %w", path, err)
		}
		return nil
	case err == nil:
		if err := access(path, accessWrite); err != nil {
			return fmt.Errorf("cannot write %s: %w", path, err)
		}
		if err := takesFiles(filepath.Dir(path)); err != nil {
			return fmt.Errorf("cannot rotate %s: %w", path, err)
		}
		return nil
	}
	if derr := takesFiles(filepath.Dir(path)); derr != nil {
		return fmt.Errorf("cannot create %s: %w", path, derr)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// CheckStateFile reports why the memory store could not keep its state at
// path: read it when it opens (a state file that cannot be read is set
// aside and the counts start from zero) and replace it at every snapshot
// with a temporary file written in the same directory and renamed over it
// (package store/memstore). Like CheckLogFile it only looks. The directory
// must exist and take new files; the path, when it exists, must be a
// regular file (or a symbolic link to one) that can be read.
func CheckStateFile(path string) error {
	if err := takesFiles(filepath.Dir(path)); err != nil {
		return fmt.Errorf("cannot write snapshots to %s: %w", path, err)
	}
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case st.IsDir():
		return fmt.Errorf("%s is a directory; want the state file's path", path)
	case !st.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file (mode %s); want a file, or a symbolic link to one", path, st.Mode())
	}
	if err := access(path, accessRead); err != nil {
		return fmt.Errorf("cannot read %s: %w", path, err)
	}
	return nil
}

// ReadSecret reads a secret a policy names, such as the one that signs a
// plan's alarm webhook (Alarms.SecretPath): the file's bytes without the
// white space around them. Like every small file a policy names, it is
// read without waiting (internal/tlsfile.Read): a named pipe, a device or
// a directory at path is refused, as is a file over MaxFileSize. A file
// that holds only white space is refused too: an empty secret would sign
// with an empty key.
func ReadSecret(path string) ([]byte, error) {
	b, err := tlsfile.Read(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read the secret: %w", err)
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil, fmt.Errorf("%s is empty; want the secret", path)
	}
	return b, nil
}

// takesFiles reports why files could not be created (and renamed) in the
// directory dir.
func takesFiles(dir string) error {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("the directory %s does not exist", dir)
	case err != nil:
		return err
	case !st.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	}
	if err := access(dir, accessWrite|accessSearch); err != nil {
		return fmt.Errorf("the directory %s does not take new files: %w", dir, err)
	}
	return nil
}
