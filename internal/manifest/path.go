// Package manifest is the format of a dataset version's manifest (DESIGN.md
// "Dataset versions"): the sorted entries (path, size, sha256, the object
// key holding the bytes, its ETag, content type), encoded canonically so
// that equal content always has equal bytes and so an equal digest, and
// paged, so that finding one path reads the index and at most one page.
//
// An index is a header line followed either by the entries themselves (a
// manifest of at most one page) or by one line per page; a page is one
// line per entry. Every line is the JSON of a struct of this package,
// fields in declaration order, ending with '\n'. A decoder accepts only
// that exact form (it re-encodes what it decoded and compares), so two
// manifests with the same content are the same bytes.
//
// Entries are sorted by path, compared segment by segment (ComparePaths):
// the order a directory walk visits files in, so a directory streams into
// a manifest in order with memory bounded by one page.
package manifest

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/fencepub/fencepub"
	"golang.org/x/text/unicode/norm"
)

// Path limits, in bytes.
const (
	// MaxPathLen bounds a whole path; with the version's key before it, a
	// file's object key stays inside S3's 1024-byte limit for resources
	// of ordinary length (the publisher checks the key itself).
	MaxPathLen = 768
	// MaxSegmentLen bounds one segment: file systems (and stores built on
	// them) refuse longer names.
	MaxSegmentLen = 255
)

// ValidatePath checks that p can name a file of a dataset: 1..MaxPathLen
// bytes of valid UTF-8 in Unicode NFC (so no two paths collide after
// normalisation), relative, segments separated by single '/', none empty,
// "." or "..", none longer than MaxSegmentLen, and no control byte
// (below 0x20, or 0x7f) or '\\' anywhere. Errors: fencepub.ErrInvalid
// quoting the path and the rule.
func ValidatePath(p string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: dataset path %.120q %s", fencepub.ErrInvalid, p, why)
	}
	switch {
	case p == "":
		return bad("is empty")
	case len(p) > MaxPathLen:
		return bad(fmt.Sprintf("is %d bytes; the limit is %d", len(p), MaxPathLen))
	case !utf8.ValidString(p):
		return bad("is not valid UTF-8")
	case !norm.NFC.IsNormalString(p):
		return bad("is not in Unicode normal form C (rename it, or normalise the names it is built from)")
	case p[0] == '/':
		return bad("is absolute; paths are relative to the dataset's root")
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x20 || c == 0x7f || c == '\\' {
			return bad(fmt.Sprintf("has byte 0x%02x at %d (control bytes and '\\' are refused)", c, i))
		}
	}
	for seg := range strings.SplitSeq(p, "/") {
		switch {
		case seg == "":
			return bad("has an empty segment (a doubled or trailing '/')")
		case seg == "." || seg == "..":
			return bad(fmt.Sprintf("has a %q segment", seg))
		case len(seg) > MaxSegmentLen:
			return bad(fmt.Sprintf("has a segment of %d bytes; the limit is %d", len(seg), MaxSegmentLen))
		}
	}
	return nil
}

// ComparePaths orders paths segment by segment, each segment by bytes: -1,
// 0 or +1. It is byte order with '/' below every other byte, so a file
// "a" sorts before "a/b", which sorts before "a-c" (the order of
// filepath.WalkDir). Every path that starts with p+"/" sorts directly
// after p, before any other path above p.
func ComparePaths(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		ca, cb := a[i], b[i]
		if ca == cb {
			continue
		}
		switch {
		case ca == '/':
			return -1
		case cb == '/':
			return 1
		case ca < cb:
			return -1
		}
		return 1
	}
	switch {
	case len(a) < len(b):
		return -1
	case len(a) > len(b):
		return 1
	}
	return 0
}

// CheckOrder checks that path may follow prev (empty for the first entry)
// in a manifest: strictly after it in ComparePaths order, and not inside
// it (prev "a" and path "a/b": a file cannot also be a directory).
// Errors: fencepub.ErrInvalid naming both.
func CheckOrder(prev, path string) error {
	if prev == "" {
		return nil
	}
	switch c := ComparePaths(prev, path); {
	case c == 0:
		return fmt.Errorf("%w: dataset path %.120q given twice", fencepub.ErrInvalid, path)
	case c > 0:
		return fmt.Errorf("%w: dataset path %.120q comes after %.120q: entries must be sorted (ComparePaths)", fencepub.ErrInvalid, path, prev)
	case strings.HasPrefix(path, prev+"/"):
		return fmt.Errorf("%w: dataset paths collide: %.120q is a file and %.120q puts a file inside it", fencepub.ErrInvalid, prev, path)
	}
	return nil
}
