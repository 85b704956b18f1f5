package yamlfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ReadFile reads the file at path for Read. Opening it cannot block: a
// named pipe or a device put at the path is opened without waiting (for a
// writer, for a device to be ready) and refused, as is anything but a
// regular file; a symbolic link to a regular file is followed (a mounted
// Kubernetes ConfigMap is one). It reads at most MaxFileSize+1 bytes, so a
// file too large costs no more than that to refuse. Those two problems are
// Errors naming path; a file that cannot be opened or read gives the error
// of package os.
func ReadFile(path string) ([]byte, error) {
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
		return nil, Errors{{File: path, Msg: "not a regular file (" + fileKind(st.Mode()) + "); want a file, or a symbolic link to one"}}
	}
	if st.Size() > MaxFileSize {
		return nil, tooLarge(path)
	}
	// One byte more than the size, to see the end without growing the
	// buffer; the size may be stale (the file grows) or 0 (/proc).
	data := make([]byte, 0, st.Size()+1)
	r := io.LimitReader(f, MaxFileSize+1)
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
	if len(data) > MaxFileSize {
		return nil, tooLarge(path)
	}
	return data, nil
}

// ReadStream reads the file at path for a command that runs once (floodgate
// check): a regular file as ReadFile does, and also a named pipe or a
// character device (standard input as /dev/stdin, a shell's process
// substitution), waiting for their writer as such a command should, and
// reading at most MaxFileSize+1 bytes of them. A directory, a socket or a
// block device is refused as ReadFile refuses it.
func ReadStream(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if m := st.Mode(); m.IsRegular() || m&fs.ModeNamedPipe == 0 && m&fs.ModeCharDevice == 0 {
		return ReadFile(path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileSize {
		return nil, tooLarge(path)
	}
	return data, nil
}

func tooLarge(name string) Errors {
	return Errors{{File: name, Msg: fmt.Sprintf("file is larger than %d bytes", MaxFileSize)}}
}

// fileKind names the kind of a file that is not a regular one.
func fileKind(m fs.FileMode) string {
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
