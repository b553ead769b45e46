package fencepub_test

import (
	"errors"
	"testing"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/layout"
)

func TestParseVersion(t *testing.T) {
	for _, v := range []fencepub.Version{{}, {Epoch: 1, Fence: 42, Seq: 7}, {Epoch: fencepub.MaxNumber, Fence: fencepub.MaxNumber, Seq: fencepub.MaxNumber}} {
		for _, s := range []string{v.String(), layout.EncodeVersion(v)} {
			got, err := fencepub.ParseVersion(s)
			if err != nil || got != v {
				t.Errorf("ParseVersion(%q) = %v, %v; want %v", s, got, err, v)
			}
		}
	}
	for _, s := range []string{"", "1.2", "1.2.3.4", "1.x.3", "-1.2.3", "1.2.9223372036854775808", "1..3"} {
		_, err := fencepub.ParseVersion(s)
		if !errors.Is(err, fencepub.ErrBadVersion) || !errors.Is(err, fencepub.ErrInvalid) {
			t.Errorf("ParseVersion(%q) error %v: want ErrBadVersion and ErrInvalid", s, err)
		}
	}
}
