// Package errkind holds the error kinds that fencepub's public API shares
// with its foundations: fencepub.ErrUnavailable and fencepub.ErrInvalid are
// the values defined here. They live below internal/objstore so that the
// store's own sentinels carry a public kind (objstore.ErrUnavailable is an
// ErrUnavailable, objstore.ErrAccessDenied an ErrInvalid), and
// errors.Is(err, fencepub.ErrUnavailable) holds for a store outage whichever
// package returned it.
package errkind

import (
	"errors"
	"fmt"
)

var (
	// ErrUnavailable is fencepub.ErrUnavailable: etcd or the object store did
	// not answer in time or could not be reached.
	ErrUnavailable = errors.New("fencepub: service unavailable")
	// ErrInvalid is fencepub.ErrInvalid: a bad configuration value or argument.
	ErrInvalid = errors.New("fencepub: invalid input")
)

// New returns a sentinel error whose message is msg and that errors.Is
// matches with each of kinds as well as with itself.
func New(msg string, kinds ...error) error {
	return &sentinel{msg: msg, kinds: kinds}
}

type sentinel struct {
	msg   string
	kinds []error
}

func (e *sentinel) Error() string   { return e.msg }
func (e *sentinel) Unwrap() []error { return e.kinds }

// Nil returns an ErrInvalid error naming field ("<field> is nil") when
// isNil, else nil: a required client or dependency of a Config.
func Nil(field string, isNil bool) error {
	if !isNil {
		return nil
	}
	return fmt.Errorf("%w: %s is nil", ErrInvalid, field)
}

// Negative returns an ErrInvalid error naming field and v ("<field> <v> is
// negative") when v < 0, else nil: a count or duration of a Config.
func Negative[T ~int | ~int64](field string, v T) error {
	if v >= 0 {
		return nil
	}
	return fmt.Errorf("%w: %s %v is negative", ErrInvalid, field, v)
}
