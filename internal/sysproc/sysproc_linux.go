//go:build linux

package sysproc

import "syscall"

// Group returns the attributes of a child in a process group of its own,
// killed with SIGKILL when its parent dies (Linux's parent-death signal).
func Group() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// Tied returns the attributes of a child that stays in its parent's process
// group and is killed with SIGKILL when its parent dies.
func Tied() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
