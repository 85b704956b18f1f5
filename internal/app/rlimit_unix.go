//go:build unix

package app

import "syscall"

// raiseFileLimit raises the soft limit of open files to the hard limit, so
// that a busy gateway is bounded by its own connection limits rather than
// by a low default, and returns the limit in force.
func raiseFileLimit() (uint64, error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, err
	}
	if r.Cur < r.Max {
		want := r
		want.Cur = r.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err == nil {
			r = want
		}
	}
	return uint64(r.Cur), nil
}
