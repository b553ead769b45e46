//go:build !unix

package publisher

// openFlags are the flags DirFiles opens a file with; elsewhere than on
// Unix, none: openRegular's check after opening is what refuses a file
// that is no longer regular.
func openFlags(bool) int { return 0 }
