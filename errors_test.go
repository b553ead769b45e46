package fencepub_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/gc"
	"github.com/fencepub/fencepub/publisher"
	"github.com/fencepub/fencepub/reader"
)

// TestSharedErrors checks that every package's name for a shared error kind
// is the core's value, so one errors.Is check covers all of them.
func TestSharedErrors(t *testing.T) {
	for kind, names := range map[error][]error{
		fencepub.ErrUnavailable:    {authority.ErrUnavailable, publisher.ErrUnavailable, reader.ErrUnavailable, gc.ErrUnavailable},
		fencepub.ErrInvalid:        {publisher.ErrInvalid, reader.ErrInvalid, gc.ErrInvalid},
		fencepub.ErrNotInitialized: {authority.ErrNotInitialized, publisher.ErrNotInitialized, gc.ErrNotInitialized},
		fencepub.ErrCorruptState:   {authority.ErrCorruptState, gc.ErrCorruptState},
	} {
		for i, name := range names {
			if !errors.Is(fmt.Errorf("%w: context", name), kind) {
				t.Errorf("%v: package name %d (%v) is not the shared value", kind, i, name)
			}
		}
	}
}
