// Package regfile reads files that a configuration or the process's own
// state names, so that no path can hold up the reader or take its memory:
// opening cannot block (a named pipe or a device put at the path is opened
// without waiting for a writer, or for a device to be ready), anything but
// a regular file is refused, and at most a given number of bytes is read.
// A symbolic link to a regular file is followed (a mounted Kubernetes
// ConfigMap or Secret is one).
package regfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// Error is a file refused for its kind or its size.
type Error struct {
	// Path is the file's path as given.
	Path string
	// Msg says why it was refused.
	Msg string
}

func (e *Error) Error() string { return e.Path + ": " + e.Msg }

// Own is the bound for the process's own state files (the memory store's
// snapshot, the key store's file, the audit log): whatever size the process
// wrote them at is read back; what matters there is the kind of file.
const Own = 1 << 40

// Read reads the regular file at path, of at most max bytes. A file of
// another kind, or larger than max, is an *Error naming path; a file that
// cannot be opened or read gives the error of package os.
func Read(path string, max int64) ([]byte, error) {
	// O_NONBLOCK makes opening a named pipe return at once, writer or
	// not; reading a regular file ignores it.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat() // of the file opened: it cannot be swapped in between
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, &Error{Path: path, Msg: "not a regular file (" + Kind(st.Mode()) + "); want a file, or a symbolic link to one"}
	}
	if st.Size() > max {
		return nil, tooLarge(path, max)
	}
	// One byte more than the size, to see the end without growing the
	// buffer; the size may be stale (the file grows) or 0 (/proc).
	data := make([]byte, 0, st.Size()+1)
	r := io.LimitReader(f, max+1)
	for {
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
		n, err := r.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if int64(len(data)) > max {
		return nil, tooLarge(path, max)
	}
	return data, nil
}

// Append opens the regular file at path for appending, creating it with
// perm if need be, without blocking: anything but a regular file is an
// *Error naming path (a named pipe opened to write would wait for a
// reader).
func Append(path string, perm fs.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY|syscall.O_NONBLOCK, perm)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, &Error{Path: path, Msg: "not a regular file (" + Kind(st.Mode()) + "); want a file, or a symbolic link to one"}
	}
	return f, nil
}

func tooLarge(path string, max int64) *Error {
	return &Error{Path: path, Msg: fmt.Sprintf("file is larger than %d bytes", max)}
}

// Kind names the kind of a file that is not a regular one ("a named
// pipe").
func Kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "mode " + m.String()
}
