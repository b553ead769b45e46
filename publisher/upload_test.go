//go:build !unit

package publisher

// Object upload: lying sizes, failing and changing bodies, lost responses,
// stalled stores and cancellation, against real etcd and MinIO. Each test
// states the property it checks.

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/testkit/faultproxy"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/minio/minio-go/v7"
)

// atkPublisher binds a fresh grant of res on e's plain client.
func (e *env) atkPublisher(res string) *Publisher {
	e.t.Helper()
	return e.bind(e.acquire(authority.AcquireRequest{Resource: res, Owner: "w", TTL: time.Minute}), false)
}

// mustNothingPublished fails unless err is non-nil with a zero Result and
// the pointer of res did not move from before.
func (e *env) mustNothingPublished(what, res string, before string, r Result, err error) {
	e.t.Helper()
	if err == nil || r.Outcome != "" {
		e.t.Fatalf("%s: outcome %q err %v; want an error with nothing published", what, r.Outcome, err)
	}
	if got := e.Pointer(res).Object.Key; got != before {
		e.t.Fatalf("%s: pointer moved to %s after %v", what, got, err)
	}
}

// mustNoUploads fails if res has incomplete multipart uploads.
func (e *env) mustNoUploads(res string) {
	e.t.Helper()
	for u := range e.Store.Client.ListIncompleteUploads(ctxT(e.t, 30*time.Second), e.Store.Bucket, e.NS.ObjectsPrefix(res), true) {
		if u.Err != nil {
			e.t.Fatal(u.Err)
		}
		e.t.Errorf("leftover incomplete upload %s of %s", u.UploadID, u.Key)
	}
}

// mustNoWriterGoroutines fails t when an object write's goroutines are
// still running 5 s after it returned.
func mustNoWriterGoroutines(t *testing.T) {
	t.Helper()
	if left := testenv.Leaked("publisher.(*Client).putMultipart", "publisher.(*Client).putStream"); left != "" {
		t.Fatalf("goroutines left:\n%s", left)
	}
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// writeTemp writes data to a new file and returns it opened for reading.
func writeTemp(t *testing.T, data []byte) *os.File {
	t.Helper()
	name := filepath.Join(t.TempDir(), "body")
	if err := os.WriteFile(name, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// A Size that lies (shorter or longer than the body) must fail with ErrBody
// and publish nothing, whatever the body's type; an honest retry under the
// same idempotency key then applies (the lie left no op record).
func TestSizeLies(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	p := e.atkPublisher("r")
	data := randBytes(3000)
	bodies := map[string]func() io.Reader{
		"generic":        func() io.Reader { return io.MultiReader(bytes.NewReader(data)) },
		"strings.Reader": func() io.Reader { return strings.NewReader(string(data)) },
		"bytes.Buffer":   func() io.Reader { return bytes.NewBuffer(bytes.Clone(data)) },
		"os.File":        func() io.Reader { return writeTemp(t, data) },
	}
	for name, body := range bodies {
		for _, size := range []int64{1, int64(len(data)) - 1, int64(len(data)) + 1, 10 * int64(len(data))} {
			what := fmt.Sprintf("%s body of %d bytes with Size %d", name, len(data), size)
			before := e.Pointer("r").Object.Key
			r, err := p.Publish(ctx, Operation{IdempotencyKey: "k-" + name, Body: body(), Size: size})
			e.mustNothingPublished(what, "r", before, r, err)
			if !errors.Is(err, ErrBody) {
				t.Fatalf("%s: %v; want ErrBody", what, err)
			}
		}
		r, err := p.Publish(ctx, Operation{IdempotencyKey: "k-" + name, Body: body(), Size: int64(len(data))})
		mustOutcome(t, name+" honest retry", r, err, Applied, reasonNone)
		if got := e.readVerified("r"); got != string(data) {
			t.Fatalf("%s: reader got %d other bytes", name, len(got))
		}
	}
}

// A Size above the single-PUT limit (5 GiB) on a tiny body: the body ends
// long before its stated length, so the publish must fail with ErrBody
// (Operation.Size: "A body that ends before Size or goes on after it fails
// with ErrBody and is not published").
func TestSizeAboveSinglePutLimit(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	p := e.atkPublisher("r")
	for _, size := range []int64{maxSinglePut, maxSinglePut + 1} {
		what := fmt.Sprintf("a 10-byte body with Size %d", size)
		before := e.Pointer("r").Object.Key
		r, err := p.Publish(ctx, Operation{IdempotencyKey: fmt.Sprint("k", size), Body: strings.NewReader("ten bytes!"), Size: size})
		if err == nil {
			t.Errorf("%s: %s with a %d-byte object %s; want ErrBody, nothing published", what, r.Outcome, r.Object.Size, r.Object.Key)
			continue
		}
		e.mustNothingPublished(what, "r", before, r, err)
		if !errors.Is(err, ErrBody) {
			t.Errorf("%s: %v; want ErrBody", what, err)
		}
	}
}

// atkFailingReader yields n random bytes, then err.
type atkFailingReader struct {
	n   int
	err error
}

func (f *atkFailingReader) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, f.err
	}
	p = p[:min(len(p), f.n)]
	_, _ = rand.Read(p)
	f.n -= len(p)
	return len(p), nil
}

// A body that fails mid-way publishes nothing, for every path: streamed
// (Size known), small unknown length, multipart; a failed multipart upload
// is aborted and no goroutine is left behind.
func TestBodyErrors(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.PartSize = minPartSize })
	ctx := ctxT(t, 2*time.Minute)
	p := e.atkPublisher("r")
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		n    int
		size int64
	}{
		{"streamed, fails at once", 0, 1000},
		{"streamed, fails after 100 KiB", 100 << 10, 1 << 20},
		{"unknown small, fails after 1 KiB", 1 << 10, 0},
		{"multipart, fails in part 2", minPartSize + 7, 0},
		{"multipart, fails in part 3", 2*minPartSize + 7, 0},
		{"multipart, fails exactly at a part boundary", 2 * minPartSize, 0},
	} {
		before := e.Pointer("r").Object.Key
		r, err := p.Publish(ctx, Operation{IdempotencyKey: "k", Body: &atkFailingReader{n: tc.n, err: boom}, Size: tc.size})
		e.mustNothingPublished(tc.name, "r", before, r, err)
		if !errors.Is(err, ErrBody) || !errors.Is(err, boom) {
			t.Fatalf("%s: %v; want ErrBody wrapping the body's error", tc.name, err)
		}
	}
	e.mustNoUploads("r")
	mustNoWriterGoroutines(t)
}

// An *os.File that grows or shrinks while it is being published (its length
// is taken from Stat before the upload) fails with ErrBody; nothing is
// published. The store connection is slowed so the change lands mid-upload.
func TestFileChangesDuringPublish(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	px, p, r0 := e.proxiedPublisher(ctx, "r")
	const size = 32 << 20
	for _, tc := range []struct {
		name   string
		change func(f *os.File) error
	}{
		{"grows", func(f *os.File) error {
			w, err := os.OpenFile(f.Name(), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			defer w.Close()
			_, err = w.Write(randBytes(1 << 20))
			return err
		}},
		{"shrinks", func(f *os.File) error { return os.Truncate(f.Name(), 2<<20) }},
		{"is rewritten in place", func(f *os.File) error {
			w, err := os.OpenFile(f.Name(), os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer w.Close()
			_, err = w.WriteAt(randBytes(size), 0)
			return err
		}},
	} {
		f := writeTemp(t, randBytes(size))
		px.Set(faultproxy.Faults{Latency: 2 * time.Millisecond})
		changed := make(chan error, 1)
		go func() {
			// Change the file once the upload has read 4 MiB of it (its
			// offset) and before it has read it all.
			for {
				off, err := f.Seek(0, io.SeekCurrent)
				if err != nil {
					changed <- err
					return
				}
				if off >= 4<<20 {
					if off >= size {
						changed <- fmt.Errorf("the whole file was read before the change (offset %d)", off)
						return
					}
					changed <- tc.change(f)
					return
				}
				time.Sleep(200 * time.Microsecond)
			}
		}()
		r, err := p.Publish(ctx, Operation{IdempotencyKey: "k-" + tc.name, Body: f})
		px.Set(faultproxy.Faults{})
		if cerr := <-changed; cerr != nil {
			t.Fatalf("%s: %v", tc.name, cerr)
		}
		if err == nil {
			// Only acceptable when the bytes published are the bytes hashed:
			// the reader verifies them against the pointer.
			got := e.readVerified("r")
			t.Logf("file that %s: applied with %d bytes (reader verified)", tc.name, len(got))
			if tc.name != "is rewritten in place" {
				t.Errorf("file that %s: applied; want ErrBody", tc.name)
			}
			continue
		}
		e.mustNothingPublished("file that "+tc.name, "r", r0.Object.Key, r, err)
		if !errors.Is(err, ErrBody) {
			t.Fatalf("file that %s: %v; want ErrBody", tc.name, err)
		}
		t.Logf("file that %s: %v", tc.name, err)
	}
}

// A file opened at a non-zero offset publishes the bytes from the offset on,
// also when the PUT's response is lost and the body is re-sent (from the
// offset, not from 0).
func TestFileAtOffset(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	px, p, _ := e.proxiedPublisher(ctx, "r")
	data := randBytes(300 << 10)
	for i, lose := range []bool{false, true} {
		f := writeTemp(t, data)
		if _, err := f.Seek(12345, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		var fired <-chan struct{}
		if lose {
			fired = px.DropResponse(1, time.Second)
		}
		r, err := p.Publish(ctx, Operation{IdempotencyKey: fmt.Sprint("off-", i), Body: f})
		mustOutcome(t, fmt.Sprintf("file at offset (lost response %v)", lose), r, err, Applied, reasonNone)
		if fired != nil {
			select {
			case <-fired:
			default:
				t.Fatal("no response was dropped")
			}
		}
		if got := e.readVerified("r"); got != string(data[12345:]) {
			t.Fatalf("lost %v: reader got %d bytes; want the %d after the offset", lose, len(got), len(data)-12345)
		}
	}
}

// A pipe (what stdin is under `cmd | fencepub publish`) is an *os.File that
// is not regular: its length is unknown, so it goes through the unknown-length
// path (one PUT below PartSize, multipart above), and its bytes arrive intact.
func TestPipeBody(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.PartSize = minPartSize })
	ctx := ctxT(t, 2*time.Minute)
	p := e.atkPublisher("r")
	for _, n := range []int{0, 1, minPartSize, minPartSize + 1, 2*minPartSize + 3} {
		data := randBytes(n)
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			_, _ = pw.Write(data)
			_ = pw.Close()
		}()
		r, err := p.Publish(ctx, Operation{IdempotencyKey: fmt.Sprint("k", n), Body: pr})
		_ = pr.Close()
		mustOutcome(t, fmt.Sprintf("pipe of %d bytes", n), r, err, Applied, reasonNone)
		if got := e.readVerified("r"); got != string(data) {
			t.Fatalf("pipe of %d bytes: reader got %d bytes", n, len(got))
		}
	}
	// A pipe with a stated Size that lies: ErrBody.
	pr, pw, _ := os.Pipe()
	go func() { _, _ = pw.Write([]byte("short")); _ = pw.Close() }()
	before := e.Pointer("r").Object.Key
	r, err := p.Publish(ctx, Operation{IdempotencyKey: "k-lie", Body: pr, Size: 100})
	_ = pr.Close()
	e.mustNothingPublished("pipe with a lying Size", "r", before, r, err)
}

// Lost PUT responses for every body kind: seekable ones (file, bytes.Reader)
// are re-sent and apply exactly once; a non-seekable one of known length
// (bytes.Buffer) fails with nothing published. Either way the outcome is
// definite.
func TestLostPutResponses(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	px, p, _ := e.proxiedPublisher(ctx, "r")
	data := randBytes(200 << 10)
	for _, tc := range []struct {
		name     string
		body     func() io.Reader
		seekable bool
	}{
		{"os.File", func() io.Reader { return writeTemp(t, data) }, true},
		{"bytes.Reader", func() io.Reader { return bytes.NewReader(data) }, true},
		{"bytes.Buffer", func() io.Reader { return bytes.NewBuffer(bytes.Clone(data)) }, false},
	} {
		before := e.Pointer("r").Object.Key
		px.DropResponse(1, time.Second)
		r, err := p.Publish(ctx, Operation{IdempotencyKey: "k-" + tc.name, Body: tc.body()})
		if tc.seekable {
			mustOutcome(t, tc.name, r, err, Applied, reasonNone)
			if got := e.readVerified("r"); got != string(data) {
				t.Fatalf("%s: reader got %d bytes", tc.name, len(got))
			}
			continue
		}
		e.mustNothingPublished(tc.name, "r", before, r, err)
		r, err = p.Publish(ctx, Operation{IdempotencyKey: "k-" + tc.name, Body: tc.body()})
		mustOutcome(t, tc.name+" retry", r, err, Applied, reasonNone)
	}
}

// A store that stops answering (bytes to it vanish) must not hang a
// publish past its context, nor publish anything, for streamed and
// multipart bodies.
func TestStalledStore(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	px, p, r0 := e.proxiedPublisher(ctx, "r")
	for _, tc := range []struct {
		name string
		op   Operation
	}{
		{"streamed", Operation{IdempotencyKey: "k1", Body: bytes.NewReader(randBytes(1 << 20))}},
		{"small unknown", Operation{IdempotencyKey: "k2", Body: io.MultiReader(bytes.NewReader(randBytes(1 << 10)))}},
		{"multipart", Operation{IdempotencyKey: "k3", Body: io.MultiReader(bytes.NewReader(randBytes(2*minPartSize + 1)))}},
	} {
		px.Set(faultproxy.Faults{DropUpstream: true, DropDownstream: true})
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		start := time.Now()
		r, err := p.Publish(cctx, tc.op)
		took := time.Since(start)
		cancel()
		px.Set(faultproxy.Faults{})
		px.ResetAll()
		e.mustNothingPublished(tc.name, "r", r0.Object.Key, r, err)
		if took > 8*time.Second {
			t.Fatalf("%s: publish returned %s after its 3 s deadline", tc.name, took)
		}
		t.Logf("%s: %v after %s", tc.name, err, took.Round(time.Millisecond))
	}
	// The aborts ran on a fresh context through the stalled store; once it
	// answers again, nothing may be published and GC can abort leftovers:
	// report them rather than fail (the abort is best-effort by design).
	for u := range e.Store.Client.ListIncompleteUploads(ctx, e.Store.Bucket, e.NS.ObjectsPrefix("r"), true) {
		t.Logf("incomplete upload after a stalled store (left for GC): %s %v", u.Key, u.Err)
	}
	mustNoWriterGoroutines(t)
}

// progressReader yields n random bytes and calls at once after it has
// yielded at bytes.
type progressReader struct {
	n, read, at int
	fire        func()
}

func (s *progressReader) Read(p []byte) (int, error) {
	if s.n == 0 {
		return 0, io.EOF
	}
	p = p[:min(len(p), s.n)]
	_, _ = rand.Read(p)
	s.n -= len(p)
	s.read += len(p)
	if s.fire != nil && s.read >= s.at {
		s.fire()
		s.fire = nil
		time.Sleep(50 * time.Millisecond) // let the cancellation land mid-upload
	}
	return len(p), nil
}

// Cancelling the context mid-upload (streamed, and multipart while part 2
// is sent and part 3 filled) returns promptly with the context's error,
// publishes nothing, leaves no incomplete upload and no goroutine.
func TestCancelMidUpload(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.PartSize = minPartSize })
	ctx := ctxT(t, 2*time.Minute)
	p := e.atkPublisher("r")
	for _, tc := range []struct {
		name string
		size int64
		at   int
	}{
		{"streamed", 4 * minPartSize, 3 * minPartSize / 2},
		{"multipart", 0, 5 * minPartSize / 2},
	} {
		cctx, cancel := context.WithCancel(ctx)
		start := time.Now()
		var cancelled time.Time
		body := &progressReader{n: 4 * minPartSize, at: tc.at, fire: func() { cancelled = time.Now(); cancel() }}
		r, err := p.Publish(cctx, Operation{IdempotencyKey: "k-" + tc.name, Body: body, Size: tc.size})
		cancel()
		e.mustNothingPublished(tc.name, "r", "", r, err)
		if cancelled.IsZero() {
			t.Fatalf("%s: never cancelled", tc.name)
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s: %v; want context.Canceled in the chain", tc.name, err)
		}
		if d := time.Since(cancelled); d > 3*time.Second {
			t.Errorf("%s: returned %s after the cancel", tc.name, d)
		}
		t.Logf("%s: %v, %s after start, %s after the cancel", tc.name, err, time.Since(start).Round(time.Millisecond), time.Since(cancelled).Round(time.Millisecond))
	}
	e.mustNoUploads("r")
	mustNoWriterGoroutines(t)
}

// A body whose Read blocks (a stalled pipe or slow client) no longer holds
// Publish past its context: net/http's RoundTrip waits for its write loop,
// which waits in the body's Read, so the publisher reads such bodies through
// a ctxReader whose Read ends with ctx. Publish returns soon after its
// context ends with nothing published, and the abandoned Read's goroutine
// ends when the body finally fails.
func TestBlockedBodyEndsWithContext(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	p := e.atkPublisher("r")
	for _, tc := range []struct {
		name string
		size int64
	}{
		{"stated length (one streamed PUT)", 1 << 20},
		{"unknown length (parts)", 0},
	} {
		pr, pw := io.Pipe()
		go func() { _, _ = pw.Write(randBytes(64 << 10)) }() // then stall
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		type res struct {
			r   Result
			err error
		}
		done := make(chan res, 1)
		go func() {
			r, err := p.Publish(cctx, Operation{IdempotencyKey: "k", Body: pr, Size: tc.size})
			done <- res{r, err}
		}()
		select {
		case o := <-done:
			if !errors.Is(o.err, context.DeadlineExceeded) {
				t.Errorf("%s: %v; want the context's deadline", tc.name, o.err)
			}
			e.mustNothingPublished(tc.name, "r", "", o.r, o.err)
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: Publish still blocked 4 s after its context ended, while the body's Read blocks", tc.name)
		}
		cancel()
		_ = pw.CloseWithError(errors.New("test over"))
		if left := testenv.Leaked("publisher.(*ctxReader).Read"); left != "" {
			t.Fatalf("%s: the abandoned Read outlived the body:\n%s", tc.name, left)
		}
	}
	mustNoWriterGoroutines(t)
}

// A regular file whose Stat size is not its length (procfs says 0, sysfs a
// page, some FUSE file systems) is published through the unknown-length
// path, whole; trusting Stat would stream 0 bytes, or fail after the few
// bytes a sysfs file has.
func TestProcFileBody(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	p := e.atkPublisher("r")
	for i, path := range []string{"/proc/self/mountinfo", "/sys/devices/system/cpu/online"} {
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err) // Linux: /proc and /sys are always there
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		r, err := p.Publish(ctx, Operation{IdempotencyKey: fmt.Sprint("k", i), Body: f})
		_ = f.Close()
		if err != nil {
			t.Fatalf("publish of %s (Stat size not its length): %v", path, err)
		}
		if r.Object.Size != int64(len(want)) {
			t.Fatalf("%s: published %d bytes, the file has %d", path, r.Object.Size, len(want))
		}
	}
}

// A lost response of the CompleteMultipartUpload: the retried complete
// meets NoSuchUpload or 412 and verifyOwn reads the object back; the
// publish applies once with the right bytes. The drop is armed when the
// last part has been sent (counted by the proxy's upstream bytes).
func TestLostCompleteResponse(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	px, p, _ := e.proxiedPublisher(ctx, "r")
	data := randBytes(2*minPartSize + 1000)
	pr, pw := io.Pipe()
	go func() {
		_, _ = pw.Write(data)
		_ = pw.Close()
	}()
	// Slow the link so the gap between the last part's bytes and the
	// complete request is wide; arm the drop once the upstream byte count
	// has passed the body and stopped moving (the last part awaits its
	// response): the next request up is the complete.
	px.Set(faultproxy.Faults{Latency: 40 * time.Millisecond})
	start := px.Stats().BytesUp
	armed := make(chan struct{})
	go func() {
		defer close(armed)
		last, since := int64(-1), time.Now()
		for {
			up := px.Stats().BytesUp - start
			if up != last {
				last, since = up, time.Now()
			} else if up >= int64(len(data)) && time.Since(since) > 15*time.Millisecond {
				px.DropResponse(1, time.Second)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	r, err := p.Publish(ctx, Operation{IdempotencyKey: "k", Body: pr})
	<-armed
	px.Set(faultproxy.Faults{})
	mustOutcome(t, "multipart with a lost complete response", r, err, Applied, reasonNone)
	if st := px.Stats(); st.DroppedDown == 0 {
		t.Fatalf("no response was dropped: %+v", st)
	}
	if got := e.readVerified("r"); got != string(data) {
		t.Fatalf("reader got %d bytes", len(got))
	}
	t.Logf("proxy %+v", px.Stats())
	e.mustNoUploads("r")
}

var _ = minio.ListObjectsOptions{}
var _ = objstore.ErrExists

// Contiguous mode after a failed object write: Publish documents that an
// error other than stale/conflict/unknown means "nothing was published",
// yet the failed call consumed its seq, so the retry (same key, honest
// body) gets seq+1 and is refused as a gap, and so is every later Publish.
// (The seq reservation predates today's change; today's change adds new
// ErrBody cases that reach it: a lying Size, a file that changed.)
func TestContiguousAfterBodyError(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	p := e.bindContiguous(ctx, "counter")
	r1, err := p.Publish(ctx, op("inc-1", "+1"))
	mustOutcome(t, "seq 1", r1, err, Applied, reasonNone)
	if _, err := p.Publish(ctx, Operation{IdempotencyKey: "inc-2", Body: strings.NewReader("+2"), Size: 3}); !errors.Is(err, ErrBody) {
		t.Fatalf("lying size: %v", err)
	}
	r2, err := p.Publish(ctx, op("inc-2", "+2"))
	if err != nil {
		t.Fatalf("retry of inc-2 after a body error (nothing was published): %s %s at %s, %v; want applied at seq 2",
			r2.Outcome, r2.Reason, r2.Version, err)
	}
}

// trickleReader yields n random bytes, chunk bytes every tick (a slow
// producer: a network source, a compressor), counting what it gave.
type trickleReader struct {
	n, chunk int
	read     atomic.Int64
	tick     time.Duration
}

func (s *trickleReader) Read(p []byte) (int, error) {
	if s.n == 0 {
		return 0, io.EOF
	}
	time.Sleep(s.tick)
	p = p[:min(len(p), s.n, s.chunk)]
	_, _ = rand.Read(p)
	s.n -= len(p)
	s.read.Add(int64(len(p)))
	return len(p), nil
}

// A slow body of unknown length, cancelled while a part is being filled:
// the upload in flight ends at once, but putMultipart keeps filling the
// next part from the body (fillPart does not look at ctx) and only then
// notices, so Publish returns up to a whole part's worth of body time after
// the cancel (PartSize / body rate: 16 MiB at 1 MiB/s is 16 s) and consumes
// body bytes it will never send.
func TestCancelDuringSlowFill(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.PartSize = minPartSize })
	ctx := ctxT(t, 2*time.Minute)
	p := e.atkPublisher("r")
	// ~1.6 MiB/s: the rest of part 2 takes 2.5 s, well past the deadline
	// below, so reading on after the cancel cannot pass for scheduling.
	body := &trickleReader{n: 6 * minPartSize, chunk: 32 << 10, tick: 20 * time.Millisecond}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var cancelledAt atomic.Int64
	var cancelTime atomic.Int64
	go func() {
		for body.read.Load() < minPartSize+minPartSize/5 { // part 1 sent, part 2 a fifth filled
			time.Sleep(time.Millisecond)
		}
		cancelledAt.Store(body.read.Load())
		cancelTime.Store(time.Now().UnixNano())
		cancel()
	}()
	r, err := p.Publish(cctx, Operation{IdempotencyKey: "k", Body: body})
	took := time.Since(time.Unix(0, cancelTime.Load()))
	after := body.read.Load() - cancelledAt.Load()
	e.mustNothingPublished("slow body cancelled", "r", "", r, err)
	t.Logf("cancelled after %d body bytes; Publish read %d more and returned %s after the cancel: %v", cancelledAt.Load(), after, took.Round(time.Millisecond), err)
	// The fill stops at the body's next Read (one tick); the upload in
	// flight ends with the context.
	if took > body.tick+testenv.Slack {
		t.Errorf("Publish returned %s after its context was cancelled, reading %d KiB more of the body", took.Round(time.Millisecond), after>>10)
	}
	e.mustNoUploads("r")
}
