package layout

import (
	"testing"
	"time"
)

// Micro-benchmarks of the encoders and parsers on every publish's and every
// GC key's path. Run with
//
//	go test -run '^$' -bench . -benchmem ./internal/layout
//
// allocs/op is per encoded record or parsed key.

var (
	benchNS  = Namespace{Prefix: "fencepub", Domain: "prod"}
	benchVer = Version{Epoch: 3, Fence: 1234567, Seq: 89}
	benchObj = Object{Bucket: "fencepub", Key: benchNS.ObjectKey("daily-report", benchVer, "0123456789abcdef"),
		SHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", ETag: "d41d8cd98f00b204e9800998ecf8427e", Size: 1 << 20}
	benchPtr = Pointer{Version: benchVer, Object: benchObj, IdempotencyKey: "run-2026-01-02", Digest: benchObj.SHA256,
		ContentType: "application/json", Owner: "worker-7f3a", CommittedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)}
	benchOpKey = benchNS.OpKey("daily-report", "run-2026-01-02")
	benchOp    = OpRecord{Digest: benchObj.SHA256, Version: benchVer, ObjectKey: benchObj.Key, Owner: "worker-7f3a"}
)

func BenchmarkVersionEncode(b *testing.B) {
	for b.Loop() {
		_ = EncodeVersion(benchVer)
	}
}

func BenchmarkDecodeVersion(b *testing.B) {
	s := EncodeVersion(benchVer)
	for b.Loop() {
		if _, err := DecodeVersion(s); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodePointer is the pointer value every publish transaction
// writes.
func BenchmarkEncodePointer(b *testing.B) {
	for b.Loop() {
		if _, err := EncodePointer(benchPtr); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodePointer is what readers and GC decode per pointer read.
func BenchmarkDecodePointer(b *testing.B) {
	v, err := EncodePointer(benchPtr)
	if err != nil {
		b.Fatal(err)
	}
	val := []byte(v)
	for b.Loop() {
		if _, err := DecodePointer(val); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeOp is the op record every publish transaction writes.
func BenchmarkEncodeOp(b *testing.B) {
	for b.Loop() {
		if _, err := EncodeOp(benchOpKey, benchOp); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeOp(b *testing.B) {
	v, err := EncodeOp(benchOpKey, benchOp)
	opKey := []byte(benchOpKey)
	if err != nil {
		b.Fatal(err)
	}
	val := []byte(v)
	for b.Loop() {
		if _, err := DecodeOp(opKey, val); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGrantRecordValue(b *testing.B) {
	for b.Loop() {
		_ = GrantRecordValue(benchVer.Epoch, "worker-7f3a")
	}
}

// BenchmarkObjectKey is the key of every publish attempt.
func BenchmarkObjectKey(b *testing.B) {
	for b.Loop() {
		_ = benchNS.ObjectKey("daily-report", benchVer, "0123456789abcdef")
	}
}

// BenchmarkParseObjectKey is GC's per-key parse (every listed object).
func BenchmarkParseObjectKey(b *testing.B) {
	key := benchObj.Key
	for b.Loop() {
		if _, _, ok := benchNS.ParseObjectKey("daily-report", key); !ok {
			b.Fatal("not parsed")
		}
	}
}

// BenchmarkParseObjectKeyForeign is the parse of a key that is not ours.
func BenchmarkParseObjectKeyForeign(b *testing.B) {
	key := benchNS.ObjectsPrefix("daily-report") + "notes.txt"
	for b.Loop() {
		if _, _, ok := benchNS.ParseObjectKey("daily-report", key); ok {
			b.Fatal("parsed a foreign key")
		}
	}
}

func BenchmarkValidateResource(b *testing.B) {
	for b.Loop() {
		if err := ValidateResource("daily-report", false); err != nil {
			b.Fatal(err)
		}
	}
}
