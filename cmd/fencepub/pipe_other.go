//go:build !linux

package main

import (
	"errors"
	"os"
)

// pipeUnread is not implemented here: the output of `run` is then read to
// the pipe's end (see commandOutput.Read).
func pipeUnread(*os.File) (int, error) { return 0, errors.ErrUnsupported }
