//go:build !unit

package publisher

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/minio/minio-go/v7"
)

// MinIO must refuse a second create-only write to a key with 412, for a
// single PUT and for a multipart upload (at initiation and at completion),
// and the publisher must accept a 412 only for its own object.
func TestCreateOnlyWrites(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.PartSize = minPartSize })
	ctx := ctxT(t, time.Minute)
	st := e.Store
	small, other := []byte("small body"), []byte("another body")
	var key string
	big := bytes.Repeat([]byte("0123456789abcdef"), (2*minPartSize+1000)/16)

	// unknown hides the body's type, so its length is unknown.
	unknown := func(b []byte) io.Reader { return io.MultiReader(bytes.NewReader(b)) }
	for _, tc := range []struct {
		name string
		body []byte
		size int64
	}{
		{"streamed PUT (known length)", small, int64(len(small))},
		{"streamed PUT of more than a part (known length)", big, int64(len(big))},
		{"buffered PUT (unknown length)", small, -1},
		{"multipart (unknown length)", big, -1},
	} {
		write := func(body []byte) (layout.Object, []byte, error) {
			if tc.size < 0 {
				return e.pub.writeObject(ctx, key, unknown(body), -1, "text/plain", map[string]string{"a": "b"})
			}
			return e.pub.writeObject(ctx, key, bytes.NewReader(body), int64(len(body)), "text/plain", map[string]string{"a": "b"})
		}
		key = e.NS.ObjectKey("r", layout.Version{Epoch: 1, Fence: 1, Seq: 1}, layout.NewNonce())
		obj, sum, err := write(tc.body)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		want := sha256.Sum256(tc.body)
		if !bytes.Equal(sum, want[:]) || obj.SHA256 != hex.EncodeToString(want[:]) || obj.Size != int64(len(tc.body)) || obj.ETag == "" {
			t.Fatalf("%s: object %+v", tc.name, obj)
		}
		if multipart := strings.Contains(obj.ETag, "-"); multipart != (tc.size < 0 && len(tc.body) > minPartSize) {
			t.Fatalf("%s: ETag %s: multipart=%v", tc.name, obj.ETag, multipart)
		}
		// The store itself refuses a second create-only PUT with 412.
		opts := putOpts("text/plain", nil, "")
		_, err = st.PutCreateOnly(ctx, key, bytes.NewReader(other), int64(len(other)), opts)
		if !errors.Is(err, objstore.ErrExists) {
			t.Fatalf("%s: raw create-only PUT over an existing key: %v, want 412", tc.name, err)
		}
		// The same PUT again (a retry after a lost response) meets 412 on
		// its own key and is accepted after reading the object back. A
		// multipart upload meets it at initiation on MinIO, before writing
		// anything: the key existed before that upload, so it is not its
		// object. SeaweedFS checks only at Complete, where the same write is
		// accepted after reading the object back; both are safe.
		again, _, err := write(tc.body)
		multipart := tc.size < 0 && len(tc.body) > minPartSize
		refusedAtInit := multipart && errors.Is(err, ErrObjectMismatch)
		if (!multipart || !refusedAtInit) && (err != nil || again != obj) {
			t.Fatalf("%s: the same write again: %+v, %v; want %+v", tc.name, again, err, obj)
		}
		// A different body under the same key, of the same length or not, is
		// not ours.
		flipped := bytes.Clone(tc.body)
		flipped[len(flipped)-1] ^= 1
		for _, b := range [][]byte{flipped, append(bytes.Clone(tc.body), '!')} {
			if _, _, err := write(b); !errors.Is(err, ErrObjectMismatch) {
				t.Fatalf("%s: rewrite with another body: %v, want ErrObjectMismatch", tc.name, err)
			}
		}
		if got := e.readObject(key); !bytes.Equal(got, tc.body) {
			t.Fatalf("%s: object was overwritten", tc.name)
		}
	}

	// A multipart completion retried after a lost response meets 412 (the
	// precondition is checked before the upload id) and is verified by
	// reading the object back.
	key = e.NS.ObjectKey("r", layout.Version{Epoch: 1, Fence: 1, Seq: 3}, layout.NewNonce())
	id, err := st.CreateUpload(ctx, key, putOpts("text/plain", nil, ""))
	if err != nil {
		t.Fatal(err)
	}
	var parts []objstore.Part
	for n, chunk := range [][]byte{big[:minPartSize], big[minPartSize:]} {
		p, err := st.UploadPart(ctx, key, id, n+1, bytes.NewReader(chunk), int64(len(chunk)))
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, p)
	}
	sum := sha256.Sum256(big)
	obj := layout.Object{Bucket: st.Bucket, Key: key, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(big))}
	first, err := e.pub.complete(ctx, key, id, parts, obj)
	if err != nil || !strings.HasSuffix(first.ETag, "-2") {
		t.Fatalf("complete: %+v %v (want a 2-part ETag)", first, err)
	}
	again, err := e.pub.complete(ctx, key, id, parts, obj)
	if err != nil || again != first {
		t.Fatalf("re-sent complete: %+v %v", again, err)
	}
	obj.Size--
	if _, err := e.pub.complete(ctx, key, id, parts, obj); !errors.Is(err, ErrObjectMismatch) {
		t.Fatalf("complete of another size: %v, want ErrObjectMismatch", err)
	}
	obj.Size++
	obj.SHA256 = strings.Repeat("0", 64)
	if _, err := e.pub.complete(ctx, key, id, parts, obj); !errors.Is(err, ErrObjectMismatch) {
		t.Fatalf("complete of another body: %v, want ErrObjectMismatch", err)
	}

	// Two create-only multipart uploads of one key, both started before
	// either completes: MinIO checks If-None-Match again at completion, so
	// the second completion fails with 412 instead of overwriting.
	key = e.NS.ObjectKey("r", layout.Version{Epoch: 1, Fence: 1, Seq: 4}, layout.NewNonce())
	var ids []string
	for range 2 {
		id, err := st.CreateUpload(ctx, key, putOpts("text/plain", nil, ""))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for i, id := range ids {
		p, err := st.UploadPart(ctx, key, id, 1, bytes.NewReader(small), int64(len(small)))
		if err != nil {
			t.Fatal(err)
		}
		_, err = st.CompleteUpload(ctx, key, id, []objstore.Part{p})
		if i == 0 && err != nil || i == 1 && !errors.Is(err, objstore.ErrExists) {
			t.Fatalf("completion %d of interleaved uploads: %v", i+1, err)
		}
	}
	e.pub.abort(ctx, key, ids[1])
}

// failingReader returns n bytes, then err.
type failingReader struct {
	n   int
	err error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, f.err
	}
	k := min(len(p), f.n)
	for i := range p[:k] {
		p[i] = 'x'
	}
	f.n -= k
	return k, nil
}

// Bad input never publishes: invalid keys and numbers, a missing bucket, a
// body that fails mid-upload (single and multipart), bad metadata.
func TestBadInput(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.PartSize = minPartSize })
	ctx := ctxT(t, time.Minute)
	const res = "r"
	g := e.acquire(authority.AcquireRequest{Resource: res, Owner: "w"})
	p := e.bind(g, false)

	for _, key := range []string{"", strings.Repeat("k", 257), "a/b", "tab\there", "nul\x00", "del\x7f", "\xff\xfe"} {
		_, err := p.Publish(ctx, op(key, "x"))
		if !errors.Is(err, fencepub.ErrInvalid) || !errors.Is(err, layout.ErrInvalidName) {
			t.Errorf("key %q: %v, want fencepub.ErrInvalid", key, err)
		}
	}
	if _, err := p.Publish(ctx, op(strings.Repeat("k", 256), "x")); err != nil {
		t.Errorf("a 256-byte key must be accepted: %v", err)
	}
	for _, term := range []Term{
		{resource: res, owner: "w", epoch: g.Epoch, fence: 0},
		{resource: res, owner: "w", epoch: 0, fence: 1},
		{resource: res, owner: "w", epoch: g.Epoch, fence: layout.MaxNumber + 1},
		{resource: res, owner: "", epoch: g.Epoch, fence: 1},
		{resource: "bad/name", owner: "w", epoch: g.Epoch, fence: 1},
		{resource: res, owner: "w", epoch: g.Epoch, fence: 1, strict: true},
	} {
		if _, err := e.pub.Bind(ctx, term); !errors.Is(err, fencepub.ErrInvalid) {
			t.Errorf("bind %+v: %v, want fencepub.ErrInvalid", term, err)
		}
	}
	if _, err := p.PublishSeq(ctx, 0, op("k-seq0", "x")); !errors.Is(err, fencepub.ErrInvalid) {
		t.Errorf("seq 0: %v, want fencepub.ErrInvalid", err)
	}
	for _, meta := range []map[string]string{
		{"": "v"}, {"under_score": "v"}, {"fencepub-sha256": "v"}, {"k": ""}, {"k": " padded"},
		{"k": "caf\u00e9"}, {"K": "a", "k": "b"}, {"big": strings.Repeat("v", 2100)},
	} {
		o := op("k-meta", "x")
		o.Metadata = meta
		if _, err := p.Publish(ctx, o); !errors.Is(err, fencepub.ErrInvalid) {
			t.Errorf("metadata %q: %v, want fencepub.ErrInvalid", meta, err)
		}
	}
	before := e.Pointer(res)

	// A body that fails mid-upload: single-PUT size and multipart size, of
	// unknown length (buffered) and of stated length (streamed).
	boom := errors.New("disk on fire")
	for _, n := range []int{1000, 2*minPartSize + 10} {
		for _, size := range []int64{0, int64(n) + 100} {
			_, err := p.Publish(ctx, Operation{IdempotencyKey: "k-body", Body: &failingReader{n: n, err: boom}, Size: size})
			if !errors.Is(err, ErrBody) || !errors.Is(err, boom) {
				t.Fatalf("body failing after %d bytes (Size %d): %v, want ErrBody wrapping the cause", n, size, err)
			}
		}
	}
	// A stated Size the body does not have: shorter, longer, negative.
	for _, tc := range []struct {
		size int64
		want error
	}{{11, ErrBody}, {9, ErrBody}, {-1, fencepub.ErrInvalid}} {
		_, err := p.Publish(ctx, Operation{IdempotencyKey: "k-size", Body: io.MultiReader(strings.NewReader("0123456789")), Size: tc.size})
		if !errors.Is(err, tc.want) {
			t.Fatalf("a 10-byte body with Size %d: %v, want %v", tc.size, err, tc.want)
		}
	}
	uploads, err := minio.Core{Client: e.Store.Client}.ListMultipartUploads(ctx, e.Store.Bucket, e.NS.ObjectsPrefix(res), "", "", "", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(uploads.Uploads) != 0 {
		t.Fatalf("failed multipart upload left behind: %+v", uploads.Uploads)
	}

	// A missing bucket: the object write fails, nothing is published.
	noBucket := e.client(e.Etcd, func(c *Config) {
		st := *e.Store
		st.Bucket = "fencepub-no-such-bucket"
		c.Store = &st
	})
	pb, err := noBucket.Bind(ctx, GrantTerm(g, false))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pb.Publish(ctx, op("k-nobucket", "x")); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("missing bucket: %v, want objstore.ErrNotFound", err)
	}

	after := e.Pointer(res)
	if after.Version != before.Version || len(e.history(res)) != 1 || e.Count(e.NS.OpsPrefix(res)) != 1 {
		t.Fatalf("bad input published something: pointer %s, history %v", after.Version, e.history(res))
	}
}

// A corrupted pointer value is a typed error everywhere, never a panic.
func TestCorruptPointer(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	g := e.acquire(authority.AcquireRequest{Resource: "r", Owner: "w"})
	p := e.bind(g, false)
	for _, bad := range []string{"garbage", "99999999999999999999-x", layout.EncodeVersion(layout.Version{Epoch: 9}) + "|{not json"} {
		if _, err := e.Etcd.Put(ctx, e.NS.PointerKey("r"), bad); err != nil {
			t.Fatal(err)
		}
		if _, err := e.pub.Bind(ctx, GrantTerm(g, false)); !errors.Is(err, layout.ErrCorruptRecord) {
			t.Fatalf("bind over %q: %v, want ErrCorruptRecord", bad, err)
		}
		if _, err := p.Publish(ctx, op("k", "x")); !errors.Is(err, layout.ErrCorruptRecord) {
			t.Fatalf("publish over %q: %v, want ErrCorruptRecord", bad, err)
		}
	}
}

// patternReader generates n pseudo-random bytes without holding them, so the
// test itself buffers nothing.
type patternReader struct {
	rng *rand.ChaCha8
	n   int64
}

func (r *patternReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), r.n)]
	_, _ = r.rng.Read(p)
	r.n -= int64(len(p))
	return len(p), nil
}

// A 72 MiB body is published without buffering it: with its length stated,
// in one streamed PUT; without, through multipart (two 16 MiB parts in
// memory at most). The peak live heap stays far below the body size. The
// test samples HeapAlloc every millisecond with GOGC lowered to 20, so the
// figure tracks live memory rather than collector slack.
func TestLargeBodyStreams(t *testing.T) {
	const size = 72 << 20
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	p := e.bind(e.acquire(authority.AcquireRequest{Resource: "big", Owner: "w"}), false)
	defer debug.SetGCPercent(debug.SetGCPercent(20))

	for _, tc := range []struct {
		name      string
		size      int64
		suffix    string // of the ETag: "-5" for 5 parts, "" for one PUT
		maxGrowth int64
	}{
		{"stated length: one streamed PUT", size, "", 8 << 20},
		{"unknown length: multipart", 0, "-5", 48 << 20},
	} {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		base := ms.HeapAlloc
		var peak uint64
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-tick.C:
					var m runtime.MemStats
					runtime.ReadMemStats(&m)
					peak = max(peak, m.HeapAlloc)
				}
			}
		})
		seed := [32]byte{7}
		start := time.Now()
		r, err := p.Publish(ctx, Operation{IdempotencyKey: tc.name, Body: &patternReader{rng: rand.NewChaCha8(seed), n: size}, Size: tc.size})
		elapsed := time.Since(start)
		close(done)
		wg.Wait()
		mustOutcome(t, tc.name, r, err, Applied, reasonNone)

		h := sha256.New()
		if _, err := io.Copy(h, &patternReader{rng: rand.NewChaCha8(seed), n: size}); err != nil {
			t.Fatal(err)
		}
		multipart := strings.Contains(r.Object.ETag, "-")
		if r.Object.Size != size || r.Object.SHA256 != hex.EncodeToString(h.Sum(nil)) ||
			multipart != (tc.suffix != "") || !strings.HasSuffix(r.Object.ETag, tc.suffix) {
			t.Fatalf("%s: object %+v: want %d bytes with the generator's sha256, ETag suffix %q", tc.name, r.Object, size, tc.suffix)
		}
		growth := int64(peak) - int64(base)
		t.Logf("%s: published %d MiB in %s (%.0f MiB/s); peak heap %d MiB above a %d MiB base (part size %d MiB)",
			tc.name, size>>20, elapsed.Round(time.Millisecond), float64(size>>20)/elapsed.Seconds(), growth>>20, base>>20, defaultPartSize>>20)
		if growth > tc.maxGrowth {
			t.Fatalf("%s: peak heap grew by %d MiB for a %d MiB body: the body is being buffered", tc.name, growth>>20, size>>20)
		}
	}
}

// Writing through a cancelled context fails before anything is published.
func TestCancelledContextPublishesNothing(t *testing.T) {
	e := newEnv(t)
	p := e.bind(e.acquire(authority.AcquireRequest{Resource: "r", Owner: "w"}), false)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Publish(ctx, op("k", "x")); !errors.Is(err, context.Canceled) {
		t.Fatalf("publish with a cancelled context: %v", err)
	}
	if v := e.Pointer("r").Version; !v.IsZero() {
		t.Fatalf("pointer moved to %s", v)
	}
}

// A stated-length body that cannot seek is sent once: when the PUT's
// response is lost, the publish fails (the store's error, nothing
// published; the stored object is an orphan for GC), and a retry with the
// same idempotency key applies once.
func TestLostResponseOfUnseekableBody(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	px, p, r0 := e.proxiedPublisher(ctx, "r")
	const body = "streamed once"
	unseekable := func() Operation {
		return Operation{IdempotencyKey: "k", Body: io.MultiReader(strings.NewReader(body)), Size: int64(len(body))}
	}
	px.DropResponse(1, time.Second)
	if _, err := p.Publish(ctx, unseekable()); !errors.Is(err, fencepub.ErrUnavailable) {
		t.Fatalf("publish whose PUT response was lost: %v; want fencepub.ErrUnavailable", err)
	}
	if v := e.Pointer("r").Version; v != r0.Version {
		t.Fatalf("pointer moved to %s after a failed object write", v)
	}
	r, err := p.Publish(ctx, unseekable())
	mustOutcome(t, "retry with the same key", r, err, Applied, reasonNone)
	if got := e.readObject(r.Object.Key); string(got) != body {
		t.Fatalf("object holds %q", got)
	}
}
