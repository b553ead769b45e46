//go:build unix

package sysproc

import "syscall"

// Session returns the attributes of a detached child: a session of its own,
// so it outlives its parent and its terminal.
func Session() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }
