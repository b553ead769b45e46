//go:build !linux

package main

import (
	"errors"
	"os"
)

// pipeUnread reports errors.ErrUnsupported: only Linux says how many bytes
// a pipe holds, so elsewhere `run` reads the command's output to the
// pipe's end (commandOutput.Read).
func pipeUnread(*os.File) (int, error) { return 0, errors.ErrUnsupported }
