//go:build !unit

package publisher

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/objstore/faultstore"
	"github.com/fencepub/fencepub/internal/objstore/memstore"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Unit tests of the object-write logic on an in-memory store with injected
// faults; the same paths meet a real MinIO behind a fault proxy in
// attack_test.go.

// memClient returns a Client whose store is fs over an in-memory bucket.
// The etcd client never connects: object writes do not use it.
func memClient(t *testing.T) (*Client, *faultstore.Store, *memstore.Store) {
	t.Helper()
	mem := memstore.New("fencepub", nil)
	fs := faultstore.New(mem)
	c, err := New(Config{Env: fencepub.Env{Namespace: fencepub.Namespace(testenv.Namespace(t)), Etcd: clientv3.NewCtxClient(context.Background()), Store: fs}, PartSize: minPartSize})
	if err != nil {
		t.Fatal(err)
	}
	return c, fs, mem
}

// objectKey returns a fresh object key of version 1.1.seq of "r".
func objectKey(c *Client, seq uint64) string {
	return c.ns.ObjectKey("r", layout.Version{Epoch: 1, Fence: 1, Seq: seq}, layout.NewNonce())
}

// errLost is an answer lost in transit, as s3store classifies it.
var errLost = fmt.Errorf("%w: connection reset (injected)", objstore.ErrUnavailable)

// onlyReader hides every method of r but Read (no Seek, no Len).
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func TestAmbiguousPutResentAndVerified(t *testing.T) {
	c, fs, mem := memClient(t)
	ctx := ctxT(t, time.Minute)
	body := []byte("an object whose PUT answer is lost")
	key := objectKey(c, 1)
	// The first PUT is stored but its answer is lost: the seekable body is
	// sent again, meets ErrExists on its own key, and is verified by
	// reading the object back (no metaSHA256 on a plain PUT).
	fs.Inject(faultstore.PutCreateOnly, 1, faultstore.Fault{After: errLost})
	obj, sum, err := c.writeObject(ctx, key, bytes.NewReader(body), int64(len(body)), "text/plain", nil)
	if err != nil {
		t.Fatalf("write after a lost answer: %v", err)
	}
	want := sha256.Sum256(body)
	stored, err := mem.Stat(ctx, key)
	if err != nil || !bytes.Equal(sum, want[:]) || obj.SHA256 != hex.EncodeToString(want[:]) || obj.ETag != stored.ETag {
		t.Fatalf("object %+v, stored %+v %v", obj, stored, err)
	}
	if n := fs.Calls(faultstore.PutCreateOnly); n != 2 {
		t.Fatalf("%d PUTs, want 2 (the lost one and the re-send)", n)
	}
	if n := fs.Calls(faultstore.Get); n != 1 {
		t.Fatalf("%d GETs, want 1 (reading the object back)", n)
	}

	// Another writer's bytes under the key are not ours.
	key2 := objectKey(c, 2)
	if _, err := objstore.PutSmallCreateOnly(ctx, mem, key2, []byte("someone else's bytes, same len"), ""); err != nil {
		t.Fatal(err)
	}
	other := []byte("our bytes, exactly the same ln")
	if _, _, err := c.writeObject(ctx, key2, bytes.NewReader(other), int64(len(other)), "", nil); !errors.Is(err, ErrObjectMismatch) {
		t.Fatalf("write over another body: %v, want ErrObjectMismatch", err)
	}
}

func TestAmbiguousPutOfUnseekableBodyIsNotResent(t *testing.T) {
	c, fs, _ := memClient(t)
	ctx := ctxT(t, time.Minute)
	body := []byte("a pipe cannot be sent twice")
	key := objectKey(c, 1)
	fs.Inject(faultstore.PutCreateOnly, 1, faultstore.Fault{After: errLost})
	_, _, err := c.writeObject(ctx, key, onlyReader{bytes.NewReader(body)}, int64(len(body)), "", nil)
	if !errors.Is(err, objstore.ErrUnavailable) {
		t.Fatalf("write of a pipe after a lost answer: %v, want ErrUnavailable", err)
	}
	if n := fs.Calls(faultstore.PutCreateOnly); n != 1 {
		t.Fatalf("%d PUTs of an unseekable body, want 1", n)
	}
}

func TestAmbiguousCompleteAcceptedAfterVerify(t *testing.T) {
	c, fs, mem := memClient(t)
	ctx := ctxT(t, time.Minute)
	body := bytes.Repeat([]byte("m"), 2*minPartSize+10)
	key := objectKey(c, 1)
	// The completion is applied, but the answer says 409: the re-send
	// finds the upload gone (ErrNotFound), and the object is read back.
	conflict := fmt.Errorf("%w: injected", objstore.ErrConditionFailed)
	fs.Inject(faultstore.CompleteUpload, 1, faultstore.Fault{After: conflict})
	obj, _, err := c.writeObject(ctx, key, onlyReader{bytes.NewReader(body)}, -1, "", nil)
	if err != nil {
		t.Fatalf("multipart write after a lost completion: %v", err)
	}
	stored, err := mem.Stat(ctx, key)
	if err != nil || obj.ETag != stored.ETag || stored.Size != int64(len(body)) {
		t.Fatalf("object %+v, stored %+v %v", obj, stored, err)
	}
	if n := fs.Calls(faultstore.CompleteUpload); n != 2 {
		t.Fatalf("%d completions, want 2", n)
	}
	for u, err := range mem.ListUploads(ctx, "") {
		t.Fatalf("upload left behind: %+v %v", u, err)
	}
}

func TestFailedPartAbortsTheUpload(t *testing.T) {
	c, fs, mem := memClient(t)
	ctx := ctxT(t, time.Minute)
	body := bytes.Repeat([]byte("p"), 2*minPartSize+10)
	key := objectKey(c, 1)
	denied := fmt.Errorf("%w: (injected)", objstore.ErrAccessDenied)
	fs.Inject(faultstore.UploadPart, 1, faultstore.Fault{})
	fs.Inject(faultstore.UploadPart, 1, faultstore.Fault{Before: denied})
	if _, _, err := c.writeObject(ctx, key, onlyReader{bytes.NewReader(body)}, -1, "", nil); !errors.Is(err, objstore.ErrAccessDenied) {
		t.Fatalf("write with a failing part: %v, want ErrAccessDenied", err)
	}
	if n := fs.Calls(faultstore.AbortUpload); n != 1 {
		t.Fatalf("%d aborts, want 1", n)
	}
	for u, err := range mem.ListUploads(ctx, "") {
		t.Fatalf("upload left behind: %+v %v", u, err)
	}
	if _, err := mem.Stat(ctx, key); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a failed upload left an object: %v", err)
	}
}

// A completion that finds its upload gone with no object under the key
// (GC aborted the upload of a dead grant) is ErrUploadAborted, not a
// failed check of an earlier completion's object.
func TestCompleteOfAbortedUpload(t *testing.T) {
	c, fs, mem := memClient(t)
	ctx := ctxT(t, time.Minute)
	body := bytes.Repeat([]byte("a"), minPartSize+10)
	key := objectKey(c, 1)
	fs.Inject(faultstore.CompleteUpload, 1, faultstore.Fault{Before: fmt.Errorf("%w: NoSuchUpload (injected)", objstore.ErrNotFound)})
	_, _, err := c.writeObject(ctx, key, onlyReader{bytes.NewReader(body)}, -1, "", nil)
	if !errors.Is(err, ErrUploadAborted) || !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("completion of an aborted upload: %v; want ErrUploadAborted", err)
	}
	if n := fs.Calls(faultstore.Stat); n != 1 {
		t.Fatalf("%d stats; want 1 (looking for an earlier completion's object)", n)
	}
	if _, err := mem.Stat(ctx, key); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("an object under the key: %v", err)
	}
}

// A write the store refuses for now (ErrUnavailable: a 503 SlowDown while
// an erasure set settles a lost node) is sent again until the caller's
// deadline, more often than a 409 is: a single PUT of a seekable body, a
// part and a completion. With the store refusing past the deadline the
// write fails with ErrUnavailable once the deadline has passed.
func TestUnavailableWriteSentAgainUntilDeadline(t *testing.T) {
	c, fs, mem := memClient(t)
	ctx := ctxT(t, time.Minute)
	slowDown := fmt.Errorf("%w: 503 SlowDown (injected)", objstore.ErrUnavailable)
	small := []byte("sent again while the store settles")
	key := objectKey(c, 1)
	fs.Inject(faultstore.PutCreateOnly, 2*conflictRetries, faultstore.Fault{Before: slowDown})
	if _, _, err := c.writeObject(ctx, key, bytes.NewReader(small), int64(len(small)), "", nil); err != nil {
		t.Fatalf("write after %d refusals: %v", 2*conflictRetries, err)
	}
	if n := fs.Calls(faultstore.PutCreateOnly); n != 2*conflictRetries+1 {
		t.Fatalf("%d PUTs, want %d", n, 2*conflictRetries+1)
	}
	if _, err := mem.Stat(ctx, key); err != nil {
		t.Fatal(err)
	}

	big := bytes.Repeat([]byte("u"), 2*minPartSize+10)
	key = objectKey(c, 2)
	fs.Inject(faultstore.UploadPart, 1, faultstore.Fault{})
	fs.Inject(faultstore.UploadPart, 3, faultstore.Fault{Before: slowDown})
	fs.Inject(faultstore.CompleteUpload, 3, faultstore.Fault{Before: slowDown})
	if _, _, err := c.writeObject(ctx, key, onlyReader{bytes.NewReader(big)}, -1, "", nil); err != nil {
		t.Fatalf("multipart write after refused parts and completions: %v", err)
	}
	if n := fs.Calls(faultstore.AbortUpload); n != 0 {
		t.Fatalf("%d aborts of an upload that completed", n)
	}

	fs.Inject(faultstore.PutCreateOnly, 1000, faultstore.Fault{Before: slowDown})
	start := time.Now()
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, _, err := c.writeObject(short, objectKey(c, 3), bytes.NewReader(small), int64(len(small)), "", nil)
	if !errors.Is(err, objstore.ErrUnavailable) || time.Since(start) < 2*time.Second {
		t.Fatalf("write refused past its deadline: %v after %s; want ErrUnavailable at the deadline", err, time.Since(start))
	}
}
