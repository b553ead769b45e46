//go:build linux

package publisher

import (
	"os"

	"golang.org/x/sys/unix"
)

// pseudoFS reports whether f lives on procfs or sysfs, whose files state a
// size (0, or a page) that is not their length.
func pseudoFS(f *os.File) bool {
	var st unix.Statfs_t
	return unix.Fstatfs(int(f.Fd()), &st) == nil && (st.Type == unix.PROC_SUPER_MAGIC || st.Type == unix.SYSFS_MAGIC)
}
