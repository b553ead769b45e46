package manifest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/objstore/memstore"
)

// A manifest read from the store names only its own pages and, for each
// entry, the file at the entry's path of a version of its own resource
// (its own, or an older one it reuses). One that names another
// resource's object, another path's file or another version's page is
// refused, naming the key, although its bytes match its pointer: GC keeps
// what manifests name and a reader serves it, so neither may be led
// outside the resource.
func TestLoadRefusesForeignKeys(t *testing.T) {
	ctx := context.Background()
	st := memstore.New("b", time.Now)
	ns, err := layout.NewNamespace("p", "d")
	if err != nil {
		t.Fatal(err)
	}
	older := ns.ObjectKey("res", layout.Version{Epoch: 1, Fence: 1, Seq: 1}, layout.NewNonce())
	otherRes := ns.ObjectKey("other", layout.Version{Epoch: 1, Fence: 2, Seq: 3}, layout.NewNonce())
	put := func(key string, data []byte) layout.Object { return storeObject(t, st, key, data) }
	fileEntry := func(path, key string) Entry {
		return Entry{Path: path, Size: 1, SHA256: shaOf("x"), Key: key, ContentType: "text/plain"}
	}
	// index writes the entries as a manifest at key (pages of one entry
	// when paged, stored where pageKey says) and loads every entry.
	index := func(key string, paged bool, pageKey func(i int) string, es ...Entry) error {
		t.Helper()
		w := NewWriter(map[bool]int{true: 1, false: 0}[paged], func(i int, data []byte) (string, string, error) {
			o := put(pageKey(i), data)
			return o.Key, o.ETag, nil
		})
		for _, e := range es {
			if err := w.Add(e); err != nil {
				t.Fatal(err)
			}
		}
		idx, _, err := w.Finish()
		if err != nil {
			t.Fatal(err)
		}
		obj := put(key, idx)
		ix, err := LoadIndex(ctx, st, obj)
		if err != nil {
			return err
		}
		for _, err := range NewCache(0).All(ctx, st, ix) {
			if err != nil {
				return err
			}
		}
		return nil
	}
	fresh := func() string {
		return ns.ObjectKey("res", layout.Version{Epoch: 1, Fence: 2, Seq: 3}, layout.NewNonce())
	}
	ownPages := func(k string) func(int) string { return func(i int) string { return layout.PageKey(k, i) } }

	k := fresh()
	if err := index(k, false, nil, fileEntry("a", layout.FileKey(k, "a")), fileEntry("b", layout.FileKey(older, "b"))); err != nil {
		t.Fatalf("own and reused files: %v", err)
	}
	k = fresh()
	if err := index(k, true, ownPages(k), fileEntry("a", layout.FileKey(k, "a")), fileEntry("b", layout.FileKey(older, "b"))); err != nil {
		t.Fatalf("own pages: %v", err)
	}
	for name, c := range map[string]struct {
		paged bool
		pages func(k string) func(int) string
		key   func(k string) string // entry b's key
		want  string
	}{
		"another resource's file": {key: func(string) string { return layout.FileKey(otherRes, "b") }, want: otherRes},
		"another path's file":     {key: func(string) string { return layout.FileKey(older, "c") }, want: ".files/c"},
		"a marker":                {key: func(string) string { return "p/d/_fencepub/settled/res/x" }, want: "_fencepub"},
		"paged, another resource's file": {paged: true, pages: ownPages,
			key: func(string) string { return layout.FileKey(otherRes, "b") }, want: otherRes},
		"another version's page": {paged: true, pages: func(string) func(int) string { return ownPages(fresh()) },
			key: func(k string) string { return layout.FileKey(k, "b") }, want: "not its own page key"},
	} {
		k := fresh()
		var pages func(int) string
		if c.pages != nil {
			pages = c.pages(k)
		}
		err := index(k, c.paged, pages, fileEntry("a", layout.FileKey(k, "a")), fileEntry("b", c.key(k)))
		if !errors.Is(err, fencepub.ErrCorruptState) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want ErrCorruptState naming %q", name, err, c.want)
		}
	}
}

// storeObject writes data at key, create-only, and returns the object
// naming it as a pointer would (key, sha256, ETag, size).
func storeObject(t *testing.T, st objstore.Store, key string, data []byte) layout.Object {
	t.Helper()
	info, err := st.PutCreateOnly(context.Background(), key, bytes.NewReader(data), int64(len(data)), objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return layout.Object{Key: key, SHA256: hex.EncodeToString(sum[:]), ETag: info.ETag, Size: int64(len(data))}
}
