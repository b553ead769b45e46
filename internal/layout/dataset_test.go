package layout

import (
	"strings"
	"testing"
	"time"
)

// A dataset pointer keeps its kind, file count and bytes through both
// value forms; a pointer without them (as written before datasets) reads
// as a single object.
func TestDatasetPointerRoundTrip(t *testing.T) {
	ns, _ := NewNamespace("fp", "d")
	v := Version{Epoch: 1, Fence: 2, Seq: 3}
	key := ns.ObjectKey("res", v, strings.Repeat("ab", NonceLen/2))
	p := Pointer{Version: v, Object: Object{Bucket: "b", Key: key, SHA256: strings.Repeat("0f", 32), Size: 99},
		Digest: strings.Repeat("1e", 32), CommittedAt: time.Unix(5, 6).UTC(), Kind: KindDataset, Files: 7, Bytes: 1 << 40}
	val, _ := EncodePointer(p)
	got, err := DecodePointer([]byte(val))
	if err != nil || got != p {
		t.Fatalf("compact round trip: %+v, %v; want %+v", got, err, p)
	}
	js, _ := EncodeVersioned(v, p)
	if got, err := DecodePointer([]byte(js)); err != nil || got != p {
		t.Fatalf("JSON round trip: %+v, %v", got, err)
	}
	old := p
	old.Kind, old.Files, old.Bytes = "", 0, 0
	val, _ = EncodePointer(old)
	if got, err := DecodePointer([]byte(val)); err != nil || got.IsDataset() || got != old {
		t.Fatalf("single-object pointer: %+v, %v", got, err)
	}
	bad, _ := EncodeVersioned(v, map[string]any{"version": v, "kind": "folder"})
	if _, err := DecodePointer([]byte(bad)); err == nil {
		t.Fatal("a pointer of an unknown kind decoded")
	}
}

func TestParseVersionKey(t *testing.T) {
	ns, _ := NewNamespace("fp", "d")
	v := Version{Epoch: 1, Fence: 2, Seq: 3}
	own := ns.ObjectKey("res", v, strings.Repeat("ab", NonceLen/2))
	for _, k := range []string{own, FileKey(own, "a/b.parquet"), FileKey(own, "x"), PageKey(own, 0), PageKey(own, 12345678)} {
		got, o, ok := ns.ParseVersionKey("res", k)
		if !ok || got != v || o != own {
			t.Errorf("ParseVersionKey(%q) = %v, %q, %v", k, got, o, ok)
		}
	}
	for _, k := range []string{own + ".files/", own + ".pages/1", own + ".pages/0000000x", own + "/x", own + "x",
		own[:len(own)-1], ns.ObjectsPrefix("res") + "foreign", FileKey(ns.ObjectKey("res2", v, strings.Repeat("ab", NonceLen/2)), "a")} {
		if _, _, ok := ns.ParseVersionKey("res", k); ok {
			t.Errorf("ParseVersionKey(%q) accepted it", k)
		}
	}
}
