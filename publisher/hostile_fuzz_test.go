//go:build !unit

package publisher

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/minio/minio-go/v7"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Hostile input: a publish's caller-given fields (FuzzNormalize) and the
// records a failed publish transaction reads back from etcd
// (FuzzClassify). `make fuzz` runs each for FUZZTIME inputs; the seed
// corpora are the f.Add calls plus testdata/fuzz/<target>. Neither target
// needs a server: normalize runs before the object upload and classify only
// reads the answer of a transaction whose Else branch reads; that nothing
// reaches etcd or the store is TestHostileInputWritesNothing's part.

// hostileStrings are names a caller might pass: traversal, separators,
// NUL, confusables (Cyrillic 'а', fullwidth '／', a zero-width joiner,
// right-to-left override), invalid UTF-8 and 10 KB.
var hostileStrings = []string{"", ".", "..", "../x", "a/b", "/", "a\x00b", "\x00", "k\n", " k", "k ",
	"p\u0430yroll", "a\uff0fb", "a\u200db", "\u202egnp.exe", "\xff\xfe", strings.Repeat("x", 10<<10),
	"x-amz-meta-a", "Content-Type", "ok", "ok-key_1.v2"}

// namesField fails t unless err wraps fencepub.ErrInvalid and its message names
// one of fields.
func namesField(t *testing.T, err error, fields ...string) {
	t.Helper()
	if !errors.Is(err, fencepub.ErrInvalid) {
		t.Fatalf("error %v is not fencepub.ErrInvalid", err)
	}
	for _, f := range fields {
		if strings.Contains(err.Error(), f) {
			return
		}
	}
	t.Fatalf("error %q names none of %q", err, fields)
}

// printableASCII reports whether s is 1.. bytes of printable ASCII with no
// leading or trailing space.
func printableASCII(s string) bool {
	if s == "" || s[0] == ' ' || s[len(s)-1] == ' ' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func FuzzNormalize(f *testing.F) {
	for i, s := range hostileStrings {
		other := hostileStrings[(i+7)%len(hostileStrings)]
		f.Add(s, other, s, other)
		f.Add("k1", "", s, "v")
		f.Add(s, "text/plain", "m", "v")
	}
	f.Fuzz(func(t *testing.T, key, contentType, metaKey, metaValue string) {
		op := Operation{IdempotencyKey: key, ContentType: contentType, Metadata: map[string]string{metaKey: metaValue}}
		got, err := normalize(op)
		if err != nil {
			namesField(t, err, "idempotency key", "content type", "metadata")
			return
		}
		if layout.ValidateKey("idempotency key", got.IdempotencyKey) != nil || strings.ContainsAny(got.IdempotencyKey, "/\x00") {
			t.Fatalf("accepted idempotency key %q", key)
		}
		if !printableASCII(got.ContentType) {
			t.Fatalf("accepted content type %q", contentType)
		}
		for k, v := range got.Metadata {
			if k != strings.ToLower(metaKey) || strings.Trim(k, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" || !printableASCII(v) {
				t.Fatalf("accepted metadata %q: %q as %q: %q", metaKey, metaValue, k, v)
			}
		}
	})
}

// fuzzClient is a Client with no servers: enough for prepare and classify.
func fuzzClient(t testing.TB) *Client {
	ns, err := layout.NewNamespace("fuzz", "d")
	if err != nil {
		t.Fatal(err)
	}
	return &Client{ns: ns, cfg: Config{now: func() time.Time { return time.Unix(0, 0) }}}
}

// failedTxn is the answer of a publish transaction whose compare failed:
// the Else branch's reads, a nil value meaning an absent key (keys left
// empty).
func failedTxn(values ...[]byte) *clientv3.TxnResponse {
	resp := &clientv3.TxnResponse{Header: &etcdserverpb.ResponseHeader{Revision: 7}}
	for _, v := range values {
		rr := &etcdserverpb.RangeResponse{}
		if v != nil {
			rr.Kvs = []*mvccpb.KeyValue{{Value: v, CreateRevision: 3, ModRevision: 5}}
		}
		resp.Responses = append(resp.Responses, &etcdserverpb.ResponseOp{Response: &etcdserverpb.ResponseOp_ResponseRange{ResponseRange: rr}})
	}
	return resp
}

func FuzzClassify(f *testing.F) {
	v := layout.Version{Epoch: 1, Fence: 2, Seq: 3}
	ptr, _ := layout.EncodePointer(layout.Pointer{Version: layout.Version{Epoch: 1, Fence: 2, Seq: 2}})
	seal, _ := layout.EncodeSeal(layout.Seal{})
	op, _ := layout.EncodeOp("", layout.OpRecord{Digest: "d", Version: v})
	for _, s := range [][3]string{
		{"", ptr, seal}, {op, ptr, seal}, {op[:len(op)/2], ptr, seal}, {"", ptr[:10], seal}, {"", ptr, seal + "x"},
		{`{"digest":1}`, ptr, seal}, {`{"digest":"d","version":{"epoch":-1}}`, ptr, seal},
		{"", layout.EncodeVersion(v) + `|{"object":{"size":-1}}`, seal}, {"", "99999999999999999999-00000000000000000000-00000000000000000000|{}", seal},
		{"", ptr, strings.Repeat("9", 1<<16)}, {"", "", ""},
	} {
		f.Add([]byte(s[0]), []byte(s[1]), []byte(s[2]), uint8(0))
	}
	f.Fuzz(func(t *testing.T, opVal, ptrVal, sealVal []byte, absent uint8) {
		c := fuzzClient(t)
		pr := c.prepare(Term{resource: "r", owner: "o", epoch: 1, fence: 2}, v, "k", "d", layout.Object{Key: "obj"}, "text/plain")
		// Bit i of absent drops the i-th record; an empty op value is no
		// op record (the common case).
		vals := [][]byte{opVal, ptrVal, sealVal, []byte(layout.EncodeNumber(1)), []byte(layout.GrantRecordValue(1, "o"))}
		if len(opVal) == 0 {
			vals[0] = nil
		}
		for i := range vals {
			if absent&(1<<i) != 0 {
				vals[i] = nil
			}
		}
		res, err := c.classify(pr, failedTxn(vals...))
		if err == nil && res.Outcome == "" {
			t.Fatal("no outcome and no error")
		}
		corrupt := func(field string, val []byte, decode func([]byte) error) bool {
			if val == nil || decode(val) == nil {
				return false
			}
			if !errors.Is(err, layout.ErrCorruptRecord) || !strings.Contains(err.Error(), field) {
				t.Fatalf("corrupt %s %q: got %v; want ErrCorruptRecord naming the %s", field, val, err, field)
			}
			return true
		}
		if corrupt("op record", vals[0], func(b []byte) error { _, err := layout.DecodeOp(nil, b); return err }) || vals[0] != nil {
			return
		}
		if vals[1] == nil || vals[2] == nil {
			if !errors.Is(err, fencepub.ErrNotInitialized) {
				t.Fatalf("missing pointer or seal: %v; want fencepub.ErrNotInitialized", err)
			}
			return
		}
		if corrupt("pointer", vals[1], func(b []byte) error { _, err := layout.DecodePointer(b); return err }) {
			return
		}
		corrupt("seal", vals[2], func(b []byte) error { _, err := layout.DecodeSeal(b); return err })
	})
}

// TestHostileInputWritesNothing publishes hostile operations and binds
// over hostile records on the real servers: each fails with a typed error
// naming the field, and neither etcd nor the bucket changes.
func TestHostileInputWritesNothing(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	p := e.bind(e.acquire(authority.AcquireRequest{Resource: "job", Owner: "w"}), false)
	// The newest ModRevision and the count of the domain's keys: a write
	// to the domain moves one of them, and writes elsewhere on the shared
	// etcd (another test's lease expiring) move neither.
	snapshot := func() (int64, int) {
		t.Helper()
		resp, err := e.Etcd.Get(ctx, e.NS.Root(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		var newest int64
		for _, kv := range resp.Kvs {
			newest = max(newest, kv.ModRevision)
		}
		return newest, len(resp.Kvs)
	}
	rev, keys := snapshot()
	objects := e.objectCount(t, ctx)
	for _, s := range hostileStrings {
		ops := []Operation{
			{IdempotencyKey: "k", ContentType: s + "\x01", Body: bytes.NewReader([]byte("x"))},
			{IdempotencyKey: "k", Metadata: map[string]string{s + "/": "v"}, Body: bytes.NewReader([]byte("x"))},
			{IdempotencyKey: "k", Metadata: map[string]string{"m": s + "\x00"}, Body: bytes.NewReader([]byte("x"))},
		}
		if layout.ValidateKey("idempotency key", s) != nil { // ".." and confusables are fine keys
			ops = append(ops, Operation{IdempotencyKey: s, Body: bytes.NewReader([]byte("x"))})
		}
		for _, op := range ops {
			if _, err := p.Publish(ctx, op); !errors.Is(err, fencepub.ErrInvalid) {
				t.Fatalf("publish %+v: %v; want fencepub.ErrInvalid", op, err)
			}
		}
	}
	if rev2, keys2 := snapshot(); rev2 != rev || keys2 != keys || e.objectCount(t, ctx) != objects {
		t.Fatalf("refused publishes wrote: revision %d -> %d, keys %d -> %d", rev, rev2, keys, keys2)
	}

	// Records read from etcd: truncated, huge, wrong types, out of range.
	good, _ := layout.EncodePointer(layout.Pointer{Version: layout.Version{Epoch: 1, Fence: 1, Seq: 1}})
	for i, bad := range []string{good[:len(good)-1], good[:20], good + strings.Repeat("x", 1<<20), `{"version":1}`,
		layout.EncodeVersion(layout.Version{}) + `|{"version":"1.1.1"}`, layout.EncodeVersion(layout.Version{}) + `|{"object":{"size":-1}}`,
		"99999999999999999999-00000000000000000000-00000000000000000000|{}", "\x00"} {
		for _, field := range []string{"pointer", "seal"} {
			if _, err := layout.DecodeSeal([]byte(bad)); field == "seal" && err == nil {
				continue // a seal has no object: a pointer's bad size is no seal's problem
			}
			res := "corrupt-" + field + "-" + string(rune('a'+i))
			ptrVal, _ := layout.EncodePointer(layout.Pointer{})
			sealVal, _ := layout.EncodeSeal(layout.Seal{})
			if field == "pointer" {
				ptrVal = bad
			} else {
				sealVal = bad
			}
			if _, err := e.Etcd.Txn(ctx).Then(clientv3.OpPut(e.NS.PointerKey(res), ptrVal), clientv3.OpPut(e.NS.SealKey(res), sealVal)).Commit(); err != nil {
				t.Fatal(err)
			}
			g := e.acquire(authority.AcquireRequest{Resource: res, Owner: "w"})
			rev, keys := snapshot()
			objects := e.objectCount(t, ctx)
			_, err := e.pub.Bind(ctx, GrantTerm(g, false))
			if !errors.Is(err, layout.ErrCorruptRecord) || !strings.Contains(err.Error(), field) {
				t.Fatalf("bind over %s %.40q: %v; want ErrCorruptRecord naming the %s", field, bad, err, field)
			}
			if rev2, keys2 := snapshot(); rev2 != rev || keys2 != keys || e.objectCount(t, ctx) != objects {
				t.Fatalf("bind over a corrupt %s wrote: revision %d -> %d", field, rev, rev2)
			}
		}
	}
}

// objectCount is the number of objects under e's domain root.
func (e *env) objectCount(t *testing.T, ctx context.Context) int {
	t.Helper()
	n := 0
	for o := range e.Store.Client.ListObjects(ctx, e.Store.Bucket, minio.ListObjectsOptions{Prefix: e.NS.Root(), Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		n++
	}
	return n
}
