package layout

import (
	"errors"
	"testing"
	"time"
)

// Fuzz the decoders of values read from etcd: any input either decodes or
// fails with ErrCorruptRecord, never panics; whatever decodes re-encodes to a
// value that decodes to the same record (so a publish can trust it).

func FuzzDecodePointer(f *testing.F) {
	valid, _ := EncodePointer(Pointer{
		Version:        Version{Epoch: 1, Fence: 42, Seq: 7},
		Object:         Object{Bucket: "b", Key: "p/d/r/x", SHA256: "ab", ETag: "e", Size: 3},
		IdempotencyKey: "k", Digest: "d", ContentType: "text/plain", Owner: "o",
		CommittedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
	})
	zero, _ := EncodePointer(Pointer{})
	for _, s := range []string{valid, zero, "", "|", "garbage", Version{}.Encode(), Version{}.Encode() + "|",
		Version{}.Encode() + "|{}", Version{Epoch: 1}.Encode() + "|{}", Version{}.Encode() + "|null",
		"99999999999999999999-00000000000000000000-00000000000000000000|{}", valid[:len(valid)-1]} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodePointer(b)
		if err != nil {
			if !errors.Is(err, ErrCorruptRecord) {
				t.Fatalf("error %v is not ErrCorruptRecord", err)
			}
			return
		}
		if len(b) < VersionWidth || string(b[:VersionWidth]) != p.Version.Encode() {
			t.Fatalf("decoded %s from a value that does not start with it: %q", p.Version, b)
		}
		again, err := EncodePointer(p)
		if err != nil {
			t.Fatal(err)
		}
		q, err := DecodePointer([]byte(again))
		if err != nil || q.Version != p.Version || q.Object != p.Object || q.Digest != p.Digest ||
			q.IdempotencyKey != p.IdempotencyKey || !q.CommittedAt.Equal(p.CommittedAt) {
			t.Fatalf("round trip of %q: %+v, %v; want %+v", b, q, err, p)
		}
	})
}

func FuzzDecodeOp(f *testing.F) {
	valid, _ := EncodeOp(OpRecord{
		Digest: "d", Version: Version{Epoch: 1, Fence: 2, Seq: 3},
		Object: Object{Bucket: "b", Key: "k", SHA256: "s", Size: 1}, Owner: "o",
		CommittedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	})
	for _, s := range []string{valid, "", "{}", "null", `{"digest":""}`, `{"digest":"x"}`, `{"digest":1}`,
		`{"digest":"x","version":{"epoch":-1}}`, `{"digest":"x","committed_at":"yesterday"}`, "[]", valid + "x"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeOp(b)
		if err != nil {
			if !errors.Is(err, ErrCorruptRecord) {
				t.Fatalf("error %v is not ErrCorruptRecord", err)
			}
			return
		}
		if r.Digest == "" {
			t.Fatalf("decoded an op record without digest from %q", b)
		}
		again, err := EncodeOp(r)
		if err != nil {
			t.Fatal(err)
		}
		q, err := DecodeOp([]byte(again))
		if err != nil || q.Digest != r.Digest || q.Version != r.Version || q.Object != r.Object || !q.CommittedAt.Equal(r.CommittedAt) {
			t.Fatalf("round trip of %q: %+v, %v; want %+v", b, q, err, r)
		}
	})
}
