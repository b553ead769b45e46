package layout

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestCompactRoundTrip encodes pointers and op records with every field
// in each of its forms (raw hex, text, derivable key, verbatim key, absent)
// and decodes them back unchanged.
func TestCompactRoundTrip(t *testing.T) {
	ptrs := []Pointer{{}, fuzzPointer, benchPtr}
	odd := fuzzPointer
	odd.Object = Object{Bucket: "b", Key: "not/a/derivable-key", SHA256: "AB", ETag: `"etag-3"`, Size: 1 << 40}
	odd.Digest, odd.CommittedAt = strings.Repeat("D", 64), time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC)
	other := fuzzPointer
	other.Object.Key = benchNS.ObjectKey("r", Version{Epoch: 9}, "0123456789abcdef") // another version's key
	ptrs = append(ptrs, odd, other)
	for _, p := range ptrs {
		val, err := EncodePointer(p)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(val, EncodeVersion(p.Version)+"|") {
			t.Fatalf("pointer value %q does not start with its version", val)
		}
		q, err := DecodePointer([]byte(val))
		if err != nil || !sameInstant(&q.CommittedAt, &p.CommittedAt) || q != p {
			t.Fatalf("round trip of %+v: %+v, %v", p, q, err)
		}
		r := OpRecord{Digest: p.Digest + "x", Version: p.Version, ObjectKey: p.Object.Key, Owner: p.Owner}
		for _, r := range []OpRecord{r, {Digest: p.Digest + "x", Version: p.Version}} {
			for _, key := range []string{fuzzOpKey, benchOpKey, "not-an-op-key"} {
				val, err := EncodeOp(key, r)
				if err != nil {
					t.Fatal(err)
				}
				if got, err := DecodeOp([]byte(key), []byte(val)); err != nil || got != r {
					t.Fatalf("round trip of %+v under %q: %+v, %v", r, key, got, err)
				}
			}
		}
	}
}

// TestOldFormsDecode: values in the JSON forms written before the compact
// one still decode, to the same records.
func TestOldFormsDecode(t *testing.T) {
	old, err := EncodeVersioned(benchPtr.Version, benchPtr)
	if err != nil || !strings.HasPrefix(old, EncodeVersion(benchPtr.Version)+`|{"version":`) {
		t.Fatalf("old pointer form %q, %v", old, err)
	}
	p, err := DecodePointer([]byte(old))
	want := benchPtr
	if err != nil || !sameInstant(&p.CommittedAt, &want.CommittedAt) || p != want {
		t.Fatalf("old pointer form decodes as %+v, %v", p, err)
	}
	r, err := DecodeOp([]byte(fuzzOpKey), []byte(oldOp))
	if wantOp := (OpRecord{Digest: "d", Version: Version{Epoch: 1, Fence: 2, Seq: 3}, ObjectKey: "k", Owner: "o"}); err != nil || r != wantOp {
		t.Fatalf("old op form decodes as %+v, %v; want %+v", r, err, wantOp)
	}
}

// TestCompactSizes bounds the values a publish writes, for a typical
// publish (benchPtr): the op record below 64 bytes (the target is 200
// bytes of etcd state with key and etcd's own overhead, docs/benchmarks.md
// "footprint"), the pointer and history value below half of its JSON form.
func TestCompactSizes(t *testing.T) {
	op, _ := EncodeOp(benchOpKey, benchOp)
	ptr, _ := EncodePointer(benchPtr)
	old, _ := EncodeVersioned(benchPtr.Version, benchPtr)
	if len(op) > 64 || 2*len(ptr) > len(old) {
		t.Fatalf("op record %d bytes, pointer %d bytes (JSON form %d)", len(op), len(ptr), len(old))
	}
	t.Logf("op record %d bytes, pointer %d bytes (JSON form %d)", len(op), len(ptr), len(old))
}

// TestOpRecordObject: an op record names its object in full only through
// the pointer at its version.
func TestOpRecordObject(t *testing.T) {
	r := OpRecord{Digest: "d", Version: benchPtr.Version, ObjectKey: benchPtr.Object.Key}
	if got := r.Object(&benchPtr); got != benchPtr.Object {
		t.Fatalf("Object(pointer at its version) = %+v", got)
	}
	later := benchPtr
	later.Version.Seq++
	for _, p := range []*Pointer{nil, &later} {
		if got := r.Object(p); got != (Object{Key: r.ObjectKey}) {
			t.Fatalf("Object(%v) = %+v; want the key only", p, got)
		}
	}
}

// TestOpObjectsPrefix: the objects prefix of an op key's resource, and
// keys that are no op keys.
func TestOpObjectsPrefix(t *testing.T) {
	ns := Namespace{Prefix: "a/b", Domain: "ops"}
	for key, want := range map[string]string{
		ns.OpKey("r", "k"):           ns.ObjectsPrefix("r"),
		ns.OpKey("x/ops/y", "k/ops"): ns.ObjectsPrefix("x/ops/y"),
		benchOpKey:                   benchNS.ObjectsPrefix("daily-report"),
		"":                           "", "ops/r/k": "", "/ops/r/k": "/r/", "p/d/ops//k": "", "p/d/xops/r/k": "", "p/d/ops/r": "",
	} {
		got, ok := opObjectsPrefix(key)
		if got != want || ok != (want != "") {
			t.Errorf("opObjectsPrefix(%q) = %q, %v; want %q", key, got, ok, want)
		}
	}
	// A nonce-only key cannot be read under a key that is no op key.
	val, _ := EncodeOp(benchOpKey, benchOp)
	if _, err := DecodeOp([]byte("not-an-op-key"), []byte(val)); !errors.Is(err, ErrCorruptRecord) {
		t.Fatalf("nonce-only op record under a foreign key: %v; want ErrCorruptRecord", err)
	}
}
