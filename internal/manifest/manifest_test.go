package manifest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fencepub/fencepub"
)

func shaOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// entry is a valid entry of path whose object lives under prefix.
func entry(prefix, path string) Entry {
	return Entry{Path: path, Size: int64(len(path)), SHA256: shaOf(path), Key: prefix + path, ETag: "e-" + path, ContentType: "text/plain"}
}

// store is an in-memory PutPage target.
type store map[string][]byte

func (s store) put(prefix string) PutPage {
	return func(n int, data []byte) (string, string, error) {
		k := fmt.Sprintf("%spage-%d", prefix, n)
		s[k] = bytes.Clone(data)
		return k, "etag-" + k, nil
	}
}

// build writes es with perPage entries per page.
func build(t *testing.T, st store, prefix string, perPage int, es []Entry) ([]byte, Summary) {
	t.Helper()
	w := NewWriter(perPage, st.put(prefix))
	for _, e := range es {
		if err := w.Add(e); err != nil {
			t.Fatalf("Add(%q): %v", e.Path, err)
		}
	}
	idx, sum, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return idx, sum
}

// sortedPaths returns n distinct valid paths in ComparePaths order,
// with directories and names that sort differently byte-wise.
func sortedPaths(n int) []string {
	var ps []string
	for i := range n {
		switch i % 3 {
		case 0:
			ps = append(ps, fmt.Sprintf("d%03d/part-%05d.parquet", i%7, i))
		case 1:
			ps = append(ps, fmt.Sprintf("d%03d-x/f%d", i%5, i))
		default:
			ps = append(ps, fmt.Sprintf("top-%d.txt", i))
		}
	}
	slices.SortFunc(ps, ComparePaths)
	return slices.Compact(ps)
}

func TestWriterRoundTrip(t *testing.T) {
	for _, tc := range []struct{ files, perPage int }{{0, 3}, {1, 3}, {3, 3}, {4, 3}, {100, 7}, {50, 0}} {
		t.Run(fmt.Sprintf("%d/%d", tc.files, tc.perPage), func(t *testing.T) {
			var es []Entry
			var total int64
			for _, p := range sortedPaths(tc.files) {
				es = append(es, entry("v1/", p))
				total += int64(len(p))
			}
			st := store{}
			idx, sum := build(t, st, "v1/", tc.perPage, es)
			if sum.Files != int64(len(es)) || sum.Bytes != total {
				t.Fatalf("summary %+v, want %d files, %d bytes", sum, len(es), total)
			}
			ix, err := DecodeIndex(idx)
			if err != nil {
				t.Fatalf("DecodeIndex: %v\n%s", err, idx)
			}
			per := cmpOr(tc.perPage, DefaultPageEntries)
			if wantInline := len(es) <= per; (ix.Header.Pages == 0) != wantInline || len(st) != ix.Header.Pages {
				t.Fatalf("%d entries, %d per page: index has %d pages, %d stored", len(es), per, ix.Header.Pages, len(st))
			}
			var got []Entry
			got = append(got, ix.Entries...)
			for _, ref := range ix.Pages {
				page, err := DecodePage(st[ref.Key], ref)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, page...)
			}
			if !slices.Equal(got, es) {
				t.Fatalf("decoded %d entries, not the %d written", len(got), len(es))
			}
			for _, e := range es {
				page, found, ok := ix.Locate(e.Path)
				if !ok {
					t.Fatalf("Locate(%q) found nothing", e.Path)
				}
				if found == nil {
					es2, _ := DecodePage(st[ix.Pages[page].Key], ix.Pages[page])
					found, ok = Find(es2, e.Path)
				}
				if !ok || *found != e {
					t.Fatalf("Locate(%q) = %+v", e.Path, found)
				}
			}
			for _, p := range []string{"absent", "d000/zzz", "zzz"} {
				if page, e, ok := ix.Locate(p); ok && e != nil {
					t.Fatalf("Locate(%q) found %+v", p, e)
				} else if ok {
					es2, _ := DecodePage(st[ix.Pages[page].Key], ix.Pages[page])
					if _, ok := Find(es2, p); ok {
						t.Fatalf("Find(%q) found it", p)
					}
				}
			}
			// Canonical: the same entries give the same bytes and digest.
			idx2, sum2 := build(t, store{}, "v1/", tc.perPage, es)
			if !bytes.Equal(idx, idx2) || sum != sum2 {
				t.Fatal("the same entries gave another index or summary")
			}
		})
	}
}

func cmpOr(a, b int) int {
	if a > 0 {
		return a
	}
	return b
}

// The content digest covers paths, sizes, sha256 and content types, never
// object keys or ETags.
func TestContentDigest(t *testing.T) {
	paths := sortedPaths(20)
	digest := func(mod func(i int, e *Entry)) string {
		var es []Entry
		for i, p := range paths {
			e := entry("v1/", p)
			mod(i, &e)
			es = append(es, e)
		}
		_, sum := build(t, store{}, "x/", 4, es)
		return sum.ContentDigest
	}
	base := digest(func(int, *Entry) {})
	if got := digest(func(_ int, e *Entry) { e.Key = "v2/" + e.Path; e.ETag = "other" }); got != base {
		t.Fatal("the content digest depends on object keys or ETags")
	}
	for name, mod := range map[string]func(int, *Entry){
		"size":         func(i int, e *Entry) { e.Size += int64(i % 2) },
		"sha256":       func(i int, e *Entry) { e.SHA256 = shaOf(e.Path + "!") },
		"content type": func(i int, e *Entry) { e.ContentType = "application/json" },
	} {
		if digest(mod) == base {
			t.Errorf("the content digest ignores the %s", name)
		}
	}
}

func TestValidatePath(t *testing.T) {
	good := []string{"a", "a/b", "part-00042.parquet", "dir/sub/file.txt", "café", "日本/語", ".hidden", "a..b", "x/.y/z",
		strings.Repeat("s", MaxSegmentLen)}
	bad := []string{"", "/abs", "a//b", "a/", "./a", "a/./b", "../a", "a/..", "..", ".", "a\\b", "a\x00b", "a\nb", "a\x7fb",
		"\xff", "cafe\u0301", strings.Repeat("s", MaxSegmentLen+1), strings.Repeat("a/", MaxPathLen/2) + "a"}
	for _, p := range good {
		if err := ValidatePath(p); err != nil {
			t.Errorf("ValidatePath(%q): %v", p, err)
		}
	}
	for _, p := range bad {
		if err := ValidatePath(p); !errors.Is(err, fencepub.ErrInvalid) {
			t.Errorf("ValidatePath(%q) = %v, want ErrInvalid", p, err)
		}
	}
}

func TestOrderRefusals(t *testing.T) {
	for _, tc := range [][]string{{"a", "a"}, {"b", "a"}, {"a", "a/b"}, {"d/a", "d/a/b/c"}, {"a/b", "a-c", "a"}} {
		w := NewWriter(2, store{}.put(""))
		var err error
		for _, p := range tc {
			if err = w.Add(entry("", p)); err != nil {
				break
			}
		}
		if !errors.Is(err, fencepub.ErrInvalid) {
			t.Errorf("paths %q: error %v, want ErrInvalid", tc, err)
		}
	}
}

// ComparePaths is the order filepath.WalkDir visits files in.
func TestComparePathsIsWalkOrder(t *testing.T) {
	dir := t.TempDir()
	names := []string{"a", "a-c", "a.b", "b/x", "b/x-y", "b/x/z", "b-/q", "c", "a!/q", "A"}
	for _, n := range names {
		p := filepath.Join(dir, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if n == "b/x" {
			p = filepath.Join(dir, "b/x/z2")
			_ = os.MkdirAll(filepath.Dir(p), 0o755)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var walked []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			walked = append(walked, filepath.ToSlash(rel))
		}
		return err
	})
	sorted := slices.Clone(walked)
	rand.Shuffle(len(sorted), func(i, j int) { sorted[i], sorted[j] = sorted[j], sorted[i] })
	slices.SortFunc(sorted, ComparePaths)
	if !slices.Equal(walked, sorted) {
		t.Fatalf("WalkDir order %q, ComparePaths order %q", walked, sorted)
	}
}

// A changed byte anywhere in a page is refused: the index names each page
// by sha256 (the index itself is checked against the pointer's sha256 by
// its reader).
func TestDecodeRefusesTampering(t *testing.T) {
	es := []Entry{}
	for _, p := range sortedPaths(10) {
		es = append(es, entry("v/", p))
	}
	st := store{}
	idx, _ := build(t, st, "v/", 4, es)
	ix, err := DecodeIndex(idx)
	if err != nil {
		t.Fatal(err)
	}
	page := st[ix.Pages[0].Key]
	for i := range page {
		b := bytes.Clone(page)
		b[i] ^= 0x01
		if _, err := DecodePage(b, ix.Pages[0]); !errors.Is(err, fencepub.ErrCorruptState) {
			t.Fatalf("page with byte %d flipped: %v", i, err)
		}
	}
}
