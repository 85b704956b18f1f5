package main

import (
	"os/exec"
	"syscall"
)

// stopWithParent has the kernel end the child when this process ends, so
// that no floodgate serve outlives an interrupted run.
func stopWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
