package layout

import (
	"errors"
	"strings"
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
	return []string{valid, zero, "", "|", "garbage", EncodeVersion(Version{}), EncodeVersion(Version{}) + "|",
		EncodeVersion(Version{}) + "|{}", EncodeVersion(Version{Epoch: 1}) + "|{}", EncodeVersion(Version{}) + "|null",
		"99999999999999999999-00000000000000000000-00000000000000000000|{}", valid[:len(valid)-1],
		EncodeVersion(Version{}) + `|{"version":"x"}`, EncodeVersion(Version{}) + `|{"version":{"epoch":1e30}}`,
		EncodeVersion(Version{}) + `|{"object":{"size":-1}}`, EncodeVersion(Version{}) + `|{"at":"yesterday"}`,
		EncodeVersion(Version{}) + `|{"committed_at":"9999-12-31T23:59:59-23:59"}`}
}

// fuzzPointer is a pointer with every field set, its object key of the
// derivable form.
var fuzzPointer = Pointer{
	Version: Version{Epoch: 1, Fence: 42, Seq: 7},
	Object: Object{Bucket: "b", Key: Namespace{Prefix: "p", Domain: "d"}.ObjectKey("r", Version{Epoch: 1, Fence: 42, Seq: 7}, "0123456789abcdef"),
		SHA256: strings.Repeat("ab", 32), ETag: strings.Repeat("0f", 16), Size: 3},
	IdempotencyKey: "k", Digest: strings.Repeat("cd", 32), ContentType: "text/plain", Owner: "o",
	CommittedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
}

// compactSeeds are compact-form edge cases after a prefix: every flag with
// no field, two forms of one field, unknown flags, a size above int64, bad
// nanoseconds, a long varint, trailing bytes.
func compactSeeds(prefix string) []string {
	c := string(compactFormat)
	return []string{prefix + c, prefix + c + "\x00", prefix + c + "\xff\x7f", prefix + c + "\x06\x00", prefix + c + "\x80\x80\x01",
		prefix + c + "\x80\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", prefix + c + "\x80\x40\x00\xff\xff\xff\xff\x0f",
		prefix + c + "\x80\x01\x05", prefix + c + "\x00\x00", prefix + c + "\x02\x05ab", prefix + c + "\x04\x00\x01\x02",
		prefix + c + "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"}
}

func FuzzDecodePointer(f *testing.F) {
	valid, _ := EncodePointer(fuzzPointer)
	zero, _ := EncodePointer(Pointer{})
	oldForm, _ := EncodeVersioned(fuzzPointer.Version, fuzzPointer) // the JSON form before the compact one
	for _, s := range append(append(versionedSeeds(oldForm, zero), valid, valid[:len(valid)-1], valid+"x"),
		compactSeeds(EncodeVersion(fuzzPointer.Version)+"|")...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodePointer(b)
		if !corruptOrNil(t, err) {
			return
		}
		if len(b) < VersionWidth || string(b[:VersionWidth]) != EncodeVersion(p.Version) {
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
		if string(b[:VersionWidth]) != EncodeVersion(s.Version) {
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

// oldOp is an op record in the JSON form written before the compact one.
const oldOp = `{"digest":"d","version":{"epoch":1,"fence":2,"seq":3},"object":{"bucket":"b","key":"k","sha256":"s","etag":"e","size":1},` +
	`"owner":"o","committed_at":"2026-01-02T03:04:05Z"}`

// fuzzOpKey is the op key of fuzzPointer's resource, so its object key
// keeps only the nonce.
var fuzzOpKey = Namespace{Prefix: "p", Domain: "d"}.OpKey("r", "k")

func FuzzDecodeOp(f *testing.F) {
	valid, _ := EncodeOp(fuzzOpKey, OpRecord{Digest: fuzzPointer.Digest, Version: fuzzPointer.Version, ObjectKey: fuzzPointer.Object.Key, Owner: "o"})
	text, _ := EncodeOp(fuzzOpKey, OpRecord{Digest: "d", Version: Version{Epoch: 1, Fence: 2, Seq: 3}, ObjectKey: "k", Owner: "o"})
	for _, s := range append([]string{oldOp, valid, text, valid[:len(valid)-1], valid + "x", "", "{}", "null", `{"digest":""}`, `{"digest":"x"}`, `{"digest":1}`,
		`{"digest":"x","version":{"epoch":-1}}`, `{"digest":"x","committed_at":"yesterday"}`, "[]", oldOp + "x",
		oldOp[:len(oldOp)/2], `{"digest":"x","version":{"epoch":9223372036854775808}}`,
		`{"digest":"x","version":{"seq":18446744073709551616}}`, `{"digest":"x","object":{"size":-5}}`,
		`{"digest":"x","object":"k"}`, `{"digest":["x"]}`}, compactSeeds("\x01\x02\x03")...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeOp([]byte(fuzzOpKey), b)
		if !corruptOrNil(t, err) {
			return
		}
		if r.Digest == "" || r.Version.Validate() != nil {
			t.Fatalf("decoded an invalid op record %+v from %q", r, b)
		}
		again, err := EncodeOp(fuzzOpKey, r)
		if err != nil {
			t.Fatalf("decoded %+v from %q, which does not encode: %v", r, b, err)
		}
		if q, err := DecodeOp([]byte(fuzzOpKey), []byte(again)); err != nil || q != r {
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
	ea, eb := EncodeVersion(a), EncodeVersion(b)
	if (ea < eb) != (a.Compare(b) < 0) || (ea == eb) != (a == b) {
		t.Fatalf("%s vs %s: encodings %q < %q is %v, Compare is %d", a, b, ea, eb, ea < eb, a.Compare(b))
	}
	for _, v := range []Version{a, b} {
		e := EncodeVersion(v)
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
