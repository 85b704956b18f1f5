package redistest

import "syscall"

// procAttr puts the server in its own process group and has the kernel kill
// it if the test process dies without stopping it (a panic, a timeout).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
