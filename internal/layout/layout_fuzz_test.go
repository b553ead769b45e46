package layout

import (
	"errors"
	"testing"
	"time"
)

// Fuzz the decoders of values read from etcd: any input either decodes or
// fails with ErrCorruptRecord, never panics; whatever decodes re-encodes to a
// value that decodes to the same record, every field included (so a publish
// can trust it). `make fuzz` runs each target for a bounded time; the seed
// corpus is the f.Add calls below plus testdata/fuzz/<target>.

// corruptOrNil fails t unless err is nil or wraps ErrCorruptRecord.
func corruptOrNil(t *testing.T, err error) bool {
	t.Helper()
	if err != nil && !errors.Is(err, ErrCorruptRecord) {
		t.Fatalf("error %v is not ErrCorruptRecord", err)
	}
	return err == nil
}

// sameInstant reports whether a and b are the same instant, and clears
// both so that the records holding them can be compared with ==: a decoded
// time keeps the zone offset it was written with, which == would compare.
func sameInstant(a, b *time.Time) bool {
	ok := a.Equal(*b)
	*a, *b = time.Time{}, time.Time{}
	return ok
}

// versionedSeeds are inputs for the decoders of EncodeVersioned values.
func versionedSeeds(valid, zero string) []string {
	return []string{valid, zero, "", "|", "garbage", Version{}.Encode(), Version{}.Encode() + "|",
		Version{}.Encode() + "|{}", Version{Epoch: 1}.Encode() + "|{}", Version{}.Encode() + "|null",
		"99999999999999999999-00000000000000000000-00000000000000000000|{}", valid[:len(valid)-1],
		Version{}.Encode() + `|{"version":"x"}`, Version{}.Encode() + `|{"version":{"epoch":1e30}}`,
		Version{}.Encode() + `|{"object":{"size":-1}}`, Version{}.Encode() + `|{"at":"yesterday"}`,
		Version{}.Encode() + `|{"committed_at":"9999-12-31T23:59:59-23:59"}`}
}

func FuzzDecodePointer(f *testing.F) {
	valid, _ := EncodePointer(Pointer{
		Version:        Version{Epoch: 1, Fence: 42, Seq: 7},
		Object:         Object{Bucket: "b", Key: "p/d/r/x", SHA256: "ab", ETag: "e", Size: 3},
		IdempotencyKey: "k", Digest: "d", ContentType: "text/plain", Owner: "o",
		CommittedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
	})
	zero, _ := EncodePointer(Pointer{})
	for _, s := range versionedSeeds(valid, zero) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodePointer(b)
		if !corruptOrNil(t, err) {
			return
		}
		if len(b) < VersionWidth || string(b[:VersionWidth]) != p.Version.Encode() {
			t.Fatalf("decoded %s from a value that does not start with it: %q", p.Version, b)
		}
		if p.Object.Size < 0 {
			t.Fatalf("decoded a negative size from %q", b)
		}
		again, err := EncodePointer(p)
		if err != nil {
			t.Fatalf("decoded %+v from %q, which does not encode: %v", p, b, err)
		}
		q, err := DecodePointer([]byte(again))
		if err != nil || !sameInstant(&q.CommittedAt, &p.CommittedAt) || q != p {
			t.Fatalf("round trip of %q: %+v, %v; want %+v", b, q, err, p)
		}
	})
}

func FuzzDecodeSeal(f *testing.F) {
	valid, _ := EncodeSeal(Seal{Version: Version{Epoch: 1, Fence: 42, Seq: MaxNumber}, Reason: SealReasonDecommissioned,
		At: time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600))})
	zero, _ := EncodeSeal(Seal{})
	for _, s := range versionedSeeds(valid, zero) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSeal(b)
		if !corruptOrNil(t, err) {
			return
		}
		if string(b[:VersionWidth]) != s.Version.Encode() {
			t.Fatalf("decoded %s from a value that does not start with it: %q", s.Version, b)
		}
		again, err := EncodeSeal(s)
		if err != nil {
			t.Fatalf("decoded %+v from %q, which does not encode: %v", s, b, err)
		}
		q, err := DecodeSeal([]byte(again))
		if err != nil || !sameInstant(&q.At, &s.At) || q != s {
			t.Fatalf("round trip of %q: %+v, %v; want %+v", b, q, err, s)
		}
	})
}

func FuzzDecodeOp(f *testing.F) {
	valid, _ := EncodeOp(OpRecord{
		Digest: "d", Version: Version{Epoch: 1, Fence: 2, Seq: 3},
		Object: Object{Bucket: "b", Key: "k", SHA256: "s", ETag: "e", Size: 1}, Owner: "o",
		CommittedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	})
	for _, s := range []string{valid, "", "{}", "null", `{"digest":""}`, `{"digest":"x"}`, `{"digest":1}`,
		`{"digest":"x","version":{"epoch":-1}}`, `{"digest":"x","committed_at":"yesterday"}`, "[]", valid + "x",
		valid[:len(valid)/2], `{"digest":"x","version":{"epoch":9223372036854775808}}`,
		`{"digest":"x","version":{"seq":18446744073709551616}}`, `{"digest":"x","object":{"size":-5}}`,
		`{"digest":"x","object":"k"}`, `{"digest":["x"]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeOp(b)
		if !corruptOrNil(t, err) {
			return
		}
		if r.Digest == "" || r.Version.Validate() != nil || r.Object.Size < 0 {
			t.Fatalf("decoded an invalid op record %+v from %q", r, b)
		}
		again, err := EncodeOp(r)
		if err != nil {
			t.Fatalf("decoded %+v from %q, which does not encode: %v", r, b, err)
		}
		q, err := DecodeOp([]byte(again))
		if err != nil || !sameInstant(&q.CommittedAt, &r.CommittedAt) || q != r {
			t.Fatalf("round trip of %q: %+v, %v; want %+v", b, q, err, r)
		}
	})
}

func FuzzParseGrantRecord(f *testing.F) {
	for _, s := range []string{GrantRecordValue(1, "owner"), GrantRecordValue(MaxNumber, "o"), GrantRecordValue(0, ""),
		"", " ", "1 o", EncodeNumber(1), EncodeNumber(1) + "o", "99999999999999999999 o", "-0000000000000000001 o",
		"+0000000000000000001 o", EncodeNumber(2) + " a b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		epoch, owner, err := ParseGrantRecord(s)
		if !corruptOrNil(t, err) {
			return
		}
		if epoch > MaxNumber {
			t.Fatalf("epoch %d above MaxNumber from %q", epoch, s)
		}
		if again := GrantRecordValue(epoch, owner); again != s {
			t.Fatalf("%q parsed as (%d, %q), which encodes as %q", s, epoch, owner, again)
		}
	})
}

// orderEdges are the numbers where a decimal encoding changes width or
// reaches its limit.
var orderEdges = []uint64{0, 9, 10, 99, 100, MaxNumber}

// checkEncodeOrder fails t unless the encodings of a and b compare as
// bytes exactly as a and b compare as versions (etcd's Compare on pointer
// and seal values depends on it), and both decode back.
func checkEncodeOrder(t *testing.T, a, b Version) {
	t.Helper()
	ea, eb := a.Encode(), b.Encode()
	if (ea < eb) != a.Less(b) || (ea == eb) != (a == b) {
		t.Fatalf("%s vs %s: encodings %q < %q is %v, Less is %v", a, b, ea, eb, ea < eb, a.Less(b))
	}
	for _, v := range []Version{a, b} {
		e := v.Encode()
		if d, err := DecodeVersion(e); len(e) != VersionWidth || err != nil || d != v {
			t.Fatalf("%s encodes as %q (%d bytes), which decodes as %s, %v", v, e, len(e), d, err)
		}
	}
}

// TestVersionEncodeKeepsOrder compares every pair of versions built from
// the edge numbers.
func TestVersionEncodeKeepsOrder(t *testing.T) {
	var vs []Version
	for _, e := range orderEdges {
		for _, f := range orderEdges {
			for _, s := range orderEdges {
				vs = append(vs, Version{Epoch: e, Fence: f, Seq: s})
			}
		}
	}
	for _, a := range vs {
		for _, b := range vs {
			checkEncodeOrder(t, a, b)
		}
	}
}

// FuzzVersionEncodeOrder: the same property over any two versions (each
// number taken modulo MaxNumber+1, the range fencepub mints).
func FuzzVersionEncodeOrder(f *testing.F) {
	for i, e := range orderEdges {
		f.Add(e, orderEdges[len(orderEdges)-1-i], e, e, e, orderEdges[(i+1)%len(orderEdges)])
	}
	f.Fuzz(func(t *testing.T, e1, f1, s1, e2, f2, s2 uint64) {
		n := func(x uint64) uint64 { return x % (MaxNumber + 1) }
		checkEncodeOrder(t, Version{Epoch: n(e1), Fence: n(f1), Seq: n(s1)}, Version{Epoch: n(e2), Fence: n(f2), Seq: n(s2)})
	})
}
