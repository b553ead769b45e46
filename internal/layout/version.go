package layout

import (
	"errors"
	"fmt"
	"strconv"
)

// MaxNumber is the largest epoch, fence or seq fencepub mints. Minting past
// it is refused rather than wrapped (DESIGN.md "Object layout"); it keeps every
// number inside 20 decimal digits.
const MaxNumber uint64 = 1<<63 - 1

// numWidth is the fixed width of every encoded number: 20 decimal digits.
const numWidth = 20

// VersionWidth is the length in bytes of an encoded Version:
// "<epoch>-<fence>-<seq>", 20 digits each.
const VersionWidth = 3*numWidth + 2

// ErrBadVersion is returned when bytes do not decode as a Version.
var ErrBadVersion = errors.New("layout: malformed version")

// Version is a publication's place in a resource's history: (epoch, fence,
// seq), compared lexicographically (DESIGN.md "Words"). Fence is the
// generation the authority minted with the grant; Seq counts publishes within
// that grant from 1. The zero Version sorts before every published one.
type Version struct {
	Epoch uint64 `json:"epoch"`
	Fence uint64 `json:"fence"`
	Seq   uint64 `json:"seq"`
}

// Compare returns -1, 0 or +1 as v sorts before, equal to or after w.
func (v Version) Compare(w Version) int {
	for _, p := range [3][2]uint64{{v.Epoch, w.Epoch}, {v.Fence, w.Fence}, {v.Seq, w.Seq}} {
		switch {
		case p[0] < p[1]:
			return -1
		case p[0] > p[1]:
			return 1
		}
	}
	return 0
}

// IsZero reports whether v is the zero version of a fresh pointer or seal.
func (v Version) IsZero() bool { return v == Version{} }

// MaxVersion returns the larger of v and w.
func MaxVersion(v, w Version) Version {
	if v.Compare(w) < 0 {
		return w
	}
	return v
}

// String formats v as "epoch.fence.seq" for humans and flags.
func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Epoch, v.Fence, v.Seq) }

// EncodeVersion returns v as VersionWidth bytes, "<epoch>-<fence>-<seq>" with
// every number zero-padded to 20 digits, so byte order equals version order.
// It is the form stored at the start of pointer, seal and history values and
// used in object keys, so etcd's byte-wise Compare orders versions correctly.
func EncodeVersion(v Version) string {
	return fmt.Sprintf("%020d-%020d-%020d", v.Epoch, v.Fence, v.Seq)
}

// Validate checks that every number is at most MaxNumber.
func (v Version) Validate() error {
	if v.Epoch > MaxNumber || v.Fence > MaxNumber || v.Seq > MaxNumber {
		return fmt.Errorf("%w: %s exceeds the maximum %d", ErrBadVersion, v, MaxNumber)
	}
	return nil
}

// DecodeVersion parses the first VersionWidth bytes of s as produced by
// EncodeVersion. It returns ErrBadVersion (wrapped, with the input quoted)
// when s is short or any field is not 20 decimal digits.
func DecodeVersion(s string) (Version, error) {
	if len(s) < VersionWidth || s[numWidth] != '-' || s[2*numWidth+1] != '-' {
		return Version{}, fmt.Errorf("%w: %.80q", ErrBadVersion, s)
	}
	var out [3]uint64
	for i := range out {
		n, err := DecodeNumber(s[i*(numWidth+1) : i*(numWidth+1)+numWidth])
		if err != nil {
			return Version{}, fmt.Errorf("%w: %.80q", ErrBadVersion, s)
		}
		out[i] = n
	}
	return Version{Epoch: out[0], Fence: out[1], Seq: out[2]}, nil
}

// EncodeNumber returns n as 20 zero-padded decimal digits (the generation
// counter, epoch key and grant-record keys use it).
func EncodeNumber(n uint64) string { return fmt.Sprintf("%020d", n) }

// DecodeNumber parses exactly 20 decimal digits. It returns ErrBadVersion
// for anything else, including numbers above MaxNumber.
func DecodeNumber(s string) (uint64, error) {
	if len(s) != numWidth {
		return 0, fmt.Errorf("%w: number %.40q is not %d digits", ErrBadVersion, s, numWidth)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%w: number %.40q is not decimal", ErrBadVersion, s)
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > MaxNumber {
		return 0, fmt.Errorf("%w: number %.40q out of range", ErrBadVersion, s)
	}
	return n, nil
}
