//go:build !linux

package main

import "errors"

// loopProxy needs epoll.
func loopProxy(addr, target string) error {
	return errors.New("loopproxy: needs Linux")
}
