// Package exitcode holds fencepub's process exit codes, one table for every
// command (docs/DESIGN.md "Exit codes"). fencepub's own outcomes sit in
// the 110–119 range, which commands rarely use, so `fencepub run` can pass a
// wrapped command's own exit status through unchanged (as timeout(1) reserves
// 124–127).
package exitcode

import (
	"errors"
	"fmt"
)

// Exit codes. OK covers both applied and duplicate outcomes; the JSON output
// and stderr tell them apart.
const (
	OK          = 0   // applied, duplicate, or the command succeeded
	Internal    = 1   // an internal error; a bug or an unexpected condition
	Usage       = 2   // bad flags, bad configuration or bad input
	Violation   = 1   // `fencepub lab`: the model found a property violation
	NotFound    = 1   // `read`: nothing published; `pointer`, `watch`, `history`, `ls --resource`: a resource never granted (unless --allow-missing)
	Stale       = 110 // publish rejected: the pointer, seal, epoch or grant is newer or wrong
	Conflict    = 111 // idempotency key already used with a different request digest
	Unknown     = 112 // outcome not learned before the deadline; settle it with `fencepub resolve`
	Held        = 113 // the lease is held by another owner
	LeaseLost   = 114 // the lease expired or was revoked while the caller relied on it
	Unavailable = 115 // etcd or the object store could not be reached
	NeedRecover = 116 // a rolled-back counter (run `fencepub authority recover`), or another etcd history in the bucket (`recover --from-bucket`)
	Interrupted = 130 // stopped by SIGINT or SIGTERM before an outcome (the shell's 128+SIGINT)
)

// Error is an error that carries the exit code the CLI returns for it.
// Library packages do not use it; the CLI wraps their typed errors into it.
type Error struct {
	Code int
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// With wraps err so that the CLI exits with code. A nil err stays nil.
func With(code int, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Code: code, Err: err}
}

// Usagef builds a usage error (exit code 2) from a format string.
func Usagef(format string, args ...any) error {
	return &Error{Code: Usage, Err: fmt.Errorf(format, args...)}
}

// Of returns the exit code for err: 0 for nil, the code of the outermost
// *Error in its chain, or Internal.
func Of(err error) int {
	if err == nil {
		return OK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Internal
}
