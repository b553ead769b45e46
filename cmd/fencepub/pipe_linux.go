package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// pipeUnread returns the number of bytes the pipe f holds, not yet read
// (FIONREAD, which Linux calls TIOCINQ). It asks through SyscallConn, so
// the descriptor stays non-blocking and its read deadlines keep working.
func pipeUnread(f *os.File) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	if cerr := rc.Control(func(fd uintptr) { n, err = unix.IoctlGetInt(int(fd), unix.TIOCINQ) }); cerr != nil {
		return 0, cerr
	}
	return n, err
}
