package manifest

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/fencepub/fencepub"
)

// FuzzDecodeIndex: any input decodes or fails with ErrCorruptState, never
// panics; an inline index that decodes is rewritten by a Writer to the same
// bytes (the encoding is canonical) with the same counts.
func FuzzDecodeIndex(f *testing.F) {
	st := store{}
	var es []Entry
	for _, p := range sortedPaths(9) {
		es = append(es, entry("v/", p))
	}
	for _, per := range []int{100, 4} {
		w := NewWriter(per, st.put("v/"))
		for _, e := range es {
			_ = w.Add(e)
		}
		idx, _, _ := w.Finish()
		f.Add(idx)
	}
	f.Add([]byte(`{"format":"fencepub.manifest.v1","files":0,"bytes":0,"pages":0}` + "\n"))
	f.Add([]byte("{}\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, b []byte) {
		ix, err := DecodeIndex(b)
		if err != nil {
			if !errors.Is(err, fencepub.ErrCorruptState) {
				t.Fatalf("error %v is not ErrCorruptState", err)
			}
			return
		}
		if ix.Header.Pages != 0 {
			return
		}
		w := NewWriter(len(ix.Entries)+1, func(int, []byte) (string, string, error) {
			t.Fatal("an inline index wrote a page")
			return "", "", nil
		})
		for _, e := range ix.Entries {
			if err := w.Add(e); err != nil {
				t.Fatalf("a decoded entry is refused: %v", err)
			}
		}
		again, sum, err := w.Finish()
		if err != nil || !bytes.Equal(again, b) || sum.Files != ix.Files || sum.Bytes != ix.Bytes {
			t.Fatalf("re-encoding gave %q (%v), not the input %q", again, err, b)
		}
	})
}

// FuzzPath: ValidatePath never panics; a path it accepts has no segment a
// file system or store would resolve ("", ".", ".."), no control byte, is
// relative, and ComparePaths orders it consistently with itself and with
// its parent.
func FuzzPath(f *testing.F) {
	for _, s := range []string{"a", "a/b", "../x", "a//b", "café", "a\\b", "\xff", "/x", "a/./b"} {
		f.Add(s, "a/b")
	}
	f.Fuzz(func(t *testing.T, p, q string) {
		if err := ValidatePath(p); err != nil {
			if !errors.Is(err, fencepub.ErrInvalid) {
				t.Fatalf("error %v is not ErrInvalid", err)
			}
			return
		}
		for _, seg := range strings.Split(p, "/") {
			if seg == "" || seg == "." || seg == ".." {
				t.Fatalf("accepted %q with segment %q", p, seg)
			}
		}
		if strings.ContainsAny(p, "\\\x00\n\r") || strings.HasPrefix(p, "/") {
			t.Fatalf("accepted %q", p)
		}
		if ComparePaths(p, p) != 0 || ComparePaths(p, p+"/x") >= 0 {
			t.Fatalf("ComparePaths is not consistent on %q", p)
		}
		if c, d := ComparePaths(p, q), ComparePaths(q, p); c != -d || (c == 0) != (p == q) {
			t.Fatalf("ComparePaths(%q, %q) = %d, reversed %d", p, q, c, d)
		}
	})
}
