package gc

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/manifest"
)

// namedKeys returns n keys of files reused from an older dataset version,
// as a manifest names them (the bench's paths: 1000 files a directory).
func namedKeys(n int) []string {
	ns := layout.Namespace{Prefix: "fencepub", Domain: "prod"}
	own := ns.ObjectKey("scale-100000", layout.Version{Epoch: 1, Fence: 3, Seq: 1}, "0123456789abcdef")
	keys := make([]string, n)
	for i := range keys {
		keys[i] = layout.FileKey(own, fmt.Sprintf("d%04d/f%07d.bin", i/1000, i))
	}
	return keys
}

func TestNamedSet(t *testing.T) {
	keys := namedKeys(5000)
	s := newNamedSet()
	for i, k := range keys {
		s.add(k, int32(i%3))
	}
	for _, k := range keys[:100] { // named again by a later version
		s.add(k, 7)
	}
	s.seal()
	// A later manifest names some files again and one more: only that one
	// is added.
	extra := keys[0] + ".new"
	for _, k := range append(keys[:200:200], extra) {
		s.add(k, 9)
	}
	if got := len(s.es) - s.sealed; got != 1 {
		t.Errorf("%d entries added after the seal, want 1", got)
	}
	if _, ok := s.lookup(extra); ok {
		t.Errorf("lookup(%q) sees an entry not yet sealed", extra)
	}
	s.seal()
	for i, k := range keys {
		if ref, ok := s.lookup(k); !ok || ref != int32(i%3) {
			t.Fatalf("lookup(%q) = %d, %v; want %d, true (the first version naming it)", k, ref, ok, i%3)
		}
	}
	if ref, ok := s.lookup(extra); !ok || ref != 9 {
		t.Errorf("lookup(%q) = %d, %v; want 9, true", extra, ref, ok)
	}
	for _, k := range []string{"", keys[0] + "x", strings.TrimSuffix(keys[1], ".bin")} {
		if ref, ok := s.lookup(k); ok {
			t.Errorf("lookup(%q) = %d, true; want false", k, ref)
		}
	}
	if len(s.es) != len(keys)+1 {
		t.Errorf("sealed set holds %d entries, want %d", len(s.es), len(keys)+1)
	}
	var none *namedSet
	if _, ok := none.lookup(keys[0]); ok {
		t.Error("a nil set holds a key")
	}
	if _, ok := newNamedSet().lookup(keys[0]); ok {
		t.Error("an empty set holds a key")
	}
}

// heapPerFile returns the live heap bytes build's result holds, per file
// of n.
func heapPerFile(n int, build func() any) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	v := build()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(v)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
}

// namedStructures are the ways a pass can hold n named files: the map of
// keys readNamed used to build, the namedSet, and the decoded manifest
// pages a manifest.Cache holds (what caching a manifest costs a file).
func namedStructures(keys []string) map[string]func() any {
	return map[string]func() any{
		"map": func() any {
			m := make(map[string]int32)
			for _, k := range keys {
				m[strings.Clone(k)] = 1 // a decoded entry's own string
			}
			return m
		},
		"hashed": func() any {
			s := newNamedSet()
			for _, k := range keys {
				s.add(k, 1)
			}
			s.seal()
			return s
		},
		"cached-pages": func() any { return decodedPages(keys) },
	}
}

// decodedPages returns keys as the pages of a manifest, decoded as
// manifest.LoadPage decodes them.
func decodedPages(keys []string) [][]manifest.Entry {
	var (
		pages [][]manifest.Entry
		data  [][]byte
	)
	w := manifest.NewWriter(0, func(_ int, b []byte) (string, string, error) {
		data = append(data, append([]byte(nil), b...))
		return fmt.Sprintf("p%d", len(data)), `"0123456789abcdef0123456789abcdef"`, nil
	})
	for _, k := range keys {
		_, path, _ := strings.Cut(k, layout.FilesSep)
		e := manifest.Entry{Path: path, Size: 32, SHA256: strings.Repeat("ab", 32), Key: k,
			ETag: `"0123456789abcdef0123456789abcdef"`, ContentType: "application/octet-stream"}
		if err := w.Add(e); err != nil {
			panic(err)
		}
	}
	idx, _, err := w.Finish()
	if err != nil {
		panic(err)
	}
	ix, err := manifest.DecodeIndex(idx)
	if err != nil {
		panic(err)
	}
	for i, ref := range ix.Pages {
		es, err := manifest.DecodePage(data[i], ref)
		if err != nil {
			panic(err)
		}
		pages = append(pages, es)
		data[i] = nil
	}
	return pages
}

// TestNamedSetMemory checks that the named set holds at most 24 bytes a
// file (16 bytes an entry, plus what sealing leaves over).
func TestNamedSetMemory(t *testing.T) {
	const n = 100_000
	keys := namedKeys(n)
	if got := heapPerFile(n, namedStructures(keys)["hashed"]); got > 24 {
		t.Errorf("the named set holds %.1f bytes a file, want at most 24", got)
	}
}

// BenchmarkNamedFiles reports the live heap, in bytes a file
// (heap-B/file), that holding 100,000 named files costs a pass: "map" is
// the map of keys readNamed used to build, "hashed" the namedSet it
// builds now, "cached-pages" the decoded pages a manifest.Cache holds for
// a manifest of those files. One op builds the structure once. Run with
//
//	go test -tags unit -run '^$' -bench NamedFiles ./gc
func BenchmarkNamedFiles(b *testing.B) {
	const n = 100_000
	keys := namedKeys(n)
	structures := namedStructures(keys)
	for _, name := range []string{"map", "hashed", "cached-pages"} {
		b.Run(name, func(b *testing.B) {
			var per float64
			for b.Loop() {
				per = heapPerFile(n, structures[name])
			}
			b.ReportMetric(per, "heap-B/file")
		})
	}
}
