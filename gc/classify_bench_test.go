package gc

import (
	"testing"
	"time"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
)

// BenchmarkClassify measures Classify per object, by the decision it
// reaches (allocations per classified object). One op is one
// classified object. Run with
//
//	go test -run '^$' -bench Classify -benchmem ./gc
//
// The package's TestMain starts etcd and MinIO although this benchmark
// uses neither.
func BenchmarkClassify(b *testing.B) {
	ns := layout.Namespace{Prefix: "fencepub", Domain: "prod"}
	ver := func(e, f, s uint64) layout.Version { return layout.Version{Epoch: e, Fence: f, Seq: s} }
	key := func(v layout.Version) string { return ns.ObjectKey("daily-report", v, "0123456789abcdef") }
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	s := &state{
		NS: ns, Resource: "daily-report", Revision: 100, Epoch: 3, Generation: 7,
		Holder:     &authority.Grant{Resource: "daily-report", Epoch: 3, Generation: 7},
		Pointer:    layout.Pointer{Version: ver(3, 5, 3), Object: layout.Object{Key: key(ver(3, 5, 3))}},
		HasPointer: true,
		Seal:       layout.Seal{Version: ver(3, 6, 2)},
		HasSeal:    true,
		Retained:   map[string]string{key(ver(3, 5, 2)): "one of the last 2 versions"},
		Policy:     DefaultConfig().Policy,
	}
	old := now.Add(-48 * time.Hour)
	cases := []struct {
		name string
		e    entry
		want kind
	}{
		// The common case of a pass: an orphan below the pointer.
		{"unpublishable", entry{Key: key(ver(3, 4, 9)), Size: 1, Time: old}, kindUnpublishable},
		{"published", entry{Key: key(ver(3, 5, 3)), Size: 1, Time: old}, kindPublished},
		{"retained", entry{Key: key(ver(3, 5, 2)), Size: 1, Time: old}, kindRetained},
		{"in_flight", entry{Key: key(ver(3, 7, 1)), Size: 1, Time: old}, kindInFlight},
		{"abandoned", entry{Key: key(ver(3, 6, 9)), Size: 1, Time: old}, kindAbandoned},
		{"foreign", entry{Key: ns.ObjectsPrefix("daily-report") + "notes.txt", Size: 1, Time: old}, kindForeign},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			if d := classify(s, c.e, now); d.Kind != c.want {
				b.Fatalf("classified %s as %s (%s), want %s", c.e.Key, d.Kind, d.Reason, c.want)
			}
			b.ReportAllocs()
			for b.Loop() {
				_ = classify(s, c.e, now)
			}
		})
	}
}
