//go:build unix

package publisher

import "syscall"

// openFlags are the flags DirFiles opens a file with: never blocking on a
// pipe that replaced the file since the walk, and, unless links are
// followed, refusing a symbolic link that did (ELOOP).
func openFlags(follow bool) int {
	if follow {
		return syscall.O_NONBLOCK
	}
	return syscall.O_NONBLOCK | syscall.O_NOFOLLOW
}
