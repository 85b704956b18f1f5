//go:build !linux

package main

import (
	"errors"

	"github.com/floodgate/floodgate/gateway"
)

// loopProxy needs epoll.
func loopProxy(addr, target string) error {
	return errors.New("loopproxy: needs Linux")
}

// loop429 needs epoll.
func loop429(addr string) error {
	return errors.New("loop429: needs Linux")
}

// flowLoop needs epoll.
func flowLoop(addr string, g *gateway.Gateway) error {
	return errors.New("flowloop: needs Linux")
}
