//go:build !unix

package app

// raiseFileLimit reports no limit where there is no RLIMIT_NOFILE.
func raiseFileLimit() (uint64, error) { return 0, nil }
