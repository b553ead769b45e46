package manifest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore/memstore"
)

// A Cache counts what it holds in bytes and stays within its bound; All
// caches the pages of a manifest that fits and streams those of one that
// does not, holding none of them.
func TestCacheBoundInBytes(t *testing.T) {
	ctx := context.Background()
	st := memstore.New("b", time.Now)
	ns, err := layout.NewNamespace("p", "d")
	if err != nil {
		t.Fatal(err)
	}
	own := ns.ObjectKey("res", layout.Version{Epoch: 1, Fence: 1, Seq: 1}, layout.NewNonce())
	put := func(key string, data []byte) layout.Object { return storeObject(t, st, key, data) }
	w := NewWriter(10, func(i int, data []byte) (string, string, error) {
		o := put(layout.PageKey(own, i), data)
		return o.Key, o.ETag, nil
	})
	const files = 100
	for i := range files {
		p := fmt.Sprintf("f%03d", i)
		if err := w.Add(Entry{Path: p, Size: 1, SHA256: shaOf("x"), Key: layout.FileKey(own, p), ContentType: "text/plain"}); err != nil {
			t.Fatal(err)
		}
	}
	idx, _, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	ix, err := LoadIndex(ctx, st, put(own, idx))
	if err != nil {
		t.Fatal(err)
	}
	var pagesSize, pagesCost int
	for _, ref := range ix.Pages {
		pagesSize += int(ref.Size)
		es, err := LoadPage(ctx, st, ref)
		if err != nil {
			t.Fatal(err)
		}
		pagesCost += decodedBytes(nil, es)
	}
	all := func(c *Cache) {
		t.Helper()
		n := 0
		for _, err := range c.All(ctx, st, ix) {
			if err != nil {
				t.Fatal(err)
			}
			n++
		}
		if n != files {
			t.Fatalf("All yielded %d entries, want %d", n, files)
		}
	}

	small := NewCache(pagesSize - 1)
	all(small)
	if len(small.items) != 0 || small.cost != 0 {
		t.Errorf("a manifest of %d page bytes through a cache of %d bytes: %d items, %d bytes cached; want none", pagesSize, small.max, len(small.items), small.cost)
	}
	big := NewCache(max(pagesSize, pagesCost))
	all(big)
	if len(big.items) != len(ix.Pages) || big.cost != pagesCost {
		t.Errorf("a manifest that fits: %d items, %d bytes cached; want %d, %d", len(big.items), big.cost, len(ix.Pages), pagesCost)
	}
	half := NewCache(pagesCost / 2)
	for _, ref := range ix.Pages {
		if _, err := half.Page(ctx, st, ref); err != nil {
			t.Fatal(err)
		}
		if half.cost > half.max {
			t.Fatalf("%d bytes cached, bound %d", half.cost, half.max)
		}
	}
	if n := len(half.items); n == 0 || n >= len(ix.Pages) {
		t.Errorf("half the bytes hold %d of %d pages", n, len(ix.Pages))
	}
}
