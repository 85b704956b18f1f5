package yamlfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/floodgate/floodgate/internal/regfile"
)

// ReadFile reads the file at path for Read, as regfile.Read does with a
// bound of MaxFileSize: opening it cannot block, anything but a regular
// file (or a symbolic link to one) is refused, and a file too large costs
// no more than MaxFileSize+1 bytes to refuse. Those two problems are
// Errors naming path; a file that cannot be opened or read gives the error
// of package os.
func ReadFile(path string) ([]byte, error) {
	data, err := regfile.Read(path, MaxFileSize)
	var bad *regfile.Error
	if errors.As(err, &bad) {
		return nil, Errors{{File: bad.Path, Msg: bad.Msg}}
	}
	return data, err
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
