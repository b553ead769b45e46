//go:build unix && !linux

package sysproc

import "syscall"

// Group returns the attributes of a child in a process group of its own.
// Without Linux's parent-death signal, the child outlives a parent killed
// with SIGKILL.
func Group() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// Tied returns the attributes of a child that stays in its parent's process
// group. Without Linux's parent-death signal, it outlives a parent killed
// with SIGKILL.
func Tied() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
