//go:build !unit

package gc

import (
	"fmt"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// scanFrom hands fn the page already read, then reads only the pages after
// it, at the page's revision: a key written after that revision is not
// seen, and a page without more keys costs no request.
func TestScanFromContinuesAfterFirstPage(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	c := e.collector(nil)
	prefix := e.NS.Root() + "scan-test/"
	put := func(k string) {
		if _, err := e.Etcd.Put(ctx, k, "x"); err != nil {
			t.Fatal(err)
		}
	}
	var want []string
	for i := range 5 {
		k := fmt.Sprintf("%s%d", prefix, i)
		put(k)
		want = append(want, k)
	}
	first, err := e.Etcd.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithLimit(2))
	if err != nil {
		t.Fatal(err)
	}
	rev := first.Header.Revision
	put(prefix + "9") // after rev: not seen
	keys := func(p *page) []string {
		var got []string
		if err := c.scanFrom(ctx, prefix, p, rev, true, func(kv *mvccKV) error {
			got = append(got, string(kv.Key))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := keys(&page{kvs: first.Kvs, more: first.More}); !first.More || !slices.Equal(got, want) {
		t.Fatalf("scanFrom(first page of 2, more %v) = %q, want %q", first.More, got, want)
	}
	if got := keys(&page{kvs: first.Kvs}); !slices.Equal(got, want[:2]) {
		t.Fatalf("scanFrom(a page without more) = %q, want %q", got, want[:2])
	}
	if got := keys(nil); !slices.Equal(got, want) {
		t.Fatalf("scanFrom(nil) = %q, want %q", got, want)
	}
}
