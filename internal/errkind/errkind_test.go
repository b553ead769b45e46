package errkind

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestNew checks that a sentinel made by New matches itself and each of its
// kinds through wrapping, keeps its own message, and matches nothing else.
func TestNew(t *testing.T) {
	const msg = "objstore: no such bucket"
	other := errors.New("other")
	s := New(msg, other, ErrInvalid)
	err := fmt.Errorf("put k: %w", s)
	for _, target := range []error{s, other, ErrInvalid} {
		if !errors.Is(err, target) {
			t.Errorf("errors.Is(%v, %v) = false", err, target)
		}
	}
	if errors.Is(err, ErrUnavailable) {
		t.Errorf("errors.Is(%v, ErrUnavailable) = true", err)
	}
	if got, want := err.Error(), "put k: "+msg; got != want {
		t.Errorf("message %q; want %q", got, want)
	}
}

// TestFieldChecks checks that Nil and Negative refuse exactly the values
// they name, as Invalid errors that name the field and the value.
func TestFieldChecks(t *testing.T) {
	for _, c := range []struct {
		err      error
		refused  bool
		contains string
	}{
		{Nil("Config.Etcd", true), true, "Config.Etcd is nil"},
		{Nil("Config.Etcd", false), false, ""},
		{Negative("Config.Timeout", -2*time.Second), true, "Config.Timeout -2s is negative"},
		{Negative("Config.Timeout", time.Duration(0)), false, ""},
		{Negative("Config.Retries", -1), true, "Config.Retries -1 is negative"},
		{Negative("Config.Retries", 3), false, ""},
	} {
		if (c.err != nil) != c.refused {
			t.Errorf("%v: refused %v, want %v", c.err, c.err != nil, c.refused)
			continue
		}
		if c.refused && (!errors.Is(c.err, ErrInvalid) || !strings.Contains(c.err.Error(), c.contains)) {
			t.Errorf("%v: want an ErrInvalid error containing %q", c.err, c.contains)
		}
	}
}
