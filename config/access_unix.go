//go:build unix

package config

import "golang.org/x/sys/unix"

// The permissions access asks about.
const (
	accessRead   = unix.R_OK
	accessWrite  = unix.W_OK
	accessSearch = unix.X_OK
)

// access reports whether the user the process runs as may do what mode
// asks with the file at path (access(2)): a permission bit, a read-only
// file system. It opens nothing.
func access(path string, mode uint32) error {
	return unix.Access(path, mode)
}
