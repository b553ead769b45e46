// Package storetest is the conformance suite of fencepub.Store: a Store
// implementation, or a wrapper of one, calls AcceptanceTest from a test and
// passes it (fencepub's S3 store does on MinIO and SeaweedFS, its in-memory
// store in its unit tests). It checks the contract the protocol relies on
// (DESIGN.md "What the object store must provide"): create-only PUT and
// multipart completion, create-only copies, If-Match reads, eventually
// consistent listings of objects and uploads, batch deletes and the typed
// errors.
package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
)

// partSize is S3's smallest part but the last, in bytes.
const partSize = 5 << 20

// listDeadline bounds the wait for a listing to show a write.
const listDeadline = 30 * time.Second

// AcceptanceTest runs the suite as subtests on stores newStore returns
// (one call per subtest). The stores may share one bucket: each subtest
// writes under its own random prefix and leaves its objects behind.
func AcceptanceTest(t *testing.T, newStore func(t *testing.T) fencepub.Store) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, s suite)
	}{
		{"Bucket", testBucket},
		{"PutCreateOnly", testPutCreateOnly},
		{"PutShortBody", testPutShortBody},
		{"CompleteCreateOnly", testCompleteCreateOnly},
		{"CopyCreateOnly", testCopyCreateOnly},
		{"GetIfMatch", testGetIfMatch},
		{"List", testList},
		{"ListUploadsAndAbort", testListUploads},
		{"Delete", testDelete},
		{"Cancelled", testCancelled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := newStore(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			t.Cleanup(cancel)
			tc.run(t, suite{st: st, ctx: ctx, prefix: "storetest/" + nonce() + "/"})
		})
	}
}

// suite is one subtest's store, context and key prefix.
type suite struct {
	st     fencepub.Store
	ctx    context.Context
	prefix string
}

func nonce() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// put writes body create-only at key and fails the test on an error.
func (s suite) put(t *testing.T, key string, body []byte, opts fencepub.PutOptions) fencepub.ObjectInfo {
	t.Helper()
	info, err := s.st.PutCreateOnly(s.ctx, key, bytes.NewReader(body), int64(len(body)), opts)
	if err != nil {
		t.Fatalf("PutCreateOnly %s: %v", key, err)
	}
	if info.ETag == "" || info.Key != key {
		t.Fatalf("PutCreateOnly %s: info %+v, want the key and an ETag", key, info)
	}
	return info
}

// read returns the bytes at key (any ETag).
func (s suite) read(t *testing.T, key string) []byte {
	t.Helper()
	body, _, err := s.st.Get(s.ctx, key, "")
	if err != nil {
		t.Fatalf("Get %s: %v", key, err)
	}
	defer body.Close()
	b, err := io.ReadAll(body)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return b
}

// upload starts an upload of key and sends parts, returning its id and
// the parts.
func (s suite) upload(t *testing.T, key string, opts fencepub.PutOptions, parts ...[]byte) (string, []fencepub.Part) {
	t.Helper()
	id, err := s.st.CreateUpload(s.ctx, key, opts)
	if err != nil {
		t.Fatalf("CreateUpload %s: %v", key, err)
	}
	var out []fencepub.Part
	for i, p := range parts {
		part, err := s.st.UploadPart(s.ctx, key, id, i+1, bytes.NewReader(p), int64(len(p)))
		if err != nil {
			t.Fatalf("UploadPart %d of %s: %v", i+1, key, err)
		}
		if part.Number != i+1 || part.ETag == "" {
			t.Fatalf("UploadPart %d of %s: %+v", i+1, key, part)
		}
		out = append(out, part)
	}
	return id, out
}

// metaValue returns the user metadata value of key k, any case.
func metaValue(m map[string]string, k string) string {
	for mk, v := range m {
		if strings.EqualFold(mk, k) {
			return v
		}
	}
	return ""
}

// eventually polls cond until it holds or listDeadline passes.
func eventually(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(listDeadline)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, listDeadline)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func testBucket(t *testing.T, s suite) {
	if err := s.st.EnsureBucket(s.ctx); err != nil {
		t.Fatalf("EnsureBucket of an existing bucket: %v", err)
	}
	if err := s.st.CheckBucket(s.ctx); err != nil {
		t.Fatalf("CheckBucket: %v", err)
	}
	if s.st.BucketName() == "" {
		t.Fatal("BucketName is empty")
	}
	if _, err := s.st.Settings(s.ctx); err != nil {
		t.Fatalf("Settings: %v", err)
	}
}

func testPutCreateOnly(t *testing.T, s suite) {
	key := s.prefix + "obj"
	first := []byte("the first body")
	opts := fencepub.PutOptions{ContentType: "text/plain", UserMetadata: map[string]string{"Fencepub-Test": "v1"}}
	info := s.put(t, key, first, opts)
	if info.Size != int64(len(first)) {
		t.Fatalf("PutCreateOnly: size %d, want %d", info.Size, len(first))
	}
	// Read-after-write: Stat sees the new key at once.
	got, err := s.st.Stat(s.ctx, key)
	if err != nil {
		t.Fatalf("Stat after PutCreateOnly: %v", err)
	}
	if got.Key != key || got.Size != info.Size || got.ETag != info.ETag || got.ContentType != "text/plain" ||
		got.LastModified.IsZero() || metaValue(got.UserMetadata, "Fencepub-Test") != "v1" {
		t.Fatalf("Stat: %+v; put returned %+v", got, info)
	}
	for _, body := range [][]byte{[]byte("another body"), first} {
		_, err := s.st.PutCreateOnly(s.ctx, key, bytes.NewReader(body), int64(len(body)), fencepub.PutOptions{})
		if !errors.Is(err, fencepub.ErrObjectExists) {
			t.Fatalf("PutCreateOnly over an existing key: %v, want ErrExists", err)
		}
	}
	if b := s.read(t, key); !bytes.Equal(b, first) {
		t.Fatalf("after a refused PutCreateOnly the object holds %q, want %q", b, first)
	}
	empty := s.prefix + "empty"
	if info := s.put(t, empty, nil, fencepub.PutOptions{}); info.Size != 0 {
		t.Fatalf("empty PutCreateOnly: %+v", info)
	}
	if b := s.read(t, empty); len(b) != 0 {
		t.Fatalf("empty object reads %q", b)
	}
}

func testPutShortBody(t *testing.T, s suite) {
	key := s.prefix + "short"
	_, err := s.st.PutCreateOnly(s.ctx, key, strings.NewReader("abc"), 10, fencepub.PutOptions{})
	if err == nil {
		t.Fatal("PutCreateOnly of a body shorter than its size succeeded")
	}
	if _, err := s.st.Stat(s.ctx, key); !errors.Is(err, fencepub.ErrObjectNotFound) {
		t.Fatalf("Stat after a failed PutCreateOnly: %v, want ErrNotFound", err)
	}
}

func testCompleteCreateOnly(t *testing.T, s suite) {
	key := s.prefix + "multi"
	big := bytes.Repeat([]byte("w"), partSize)
	winnerID, winner := s.upload(t, key, fencepub.PutOptions{ContentType: "text/plain"}, big, []byte("winner tail"))
	loserID, loser := s.upload(t, key, fencepub.PutOptions{}, []byte("loser"))
	info, err := s.st.CompleteUpload(s.ctx, key, winnerID, winner)
	if err != nil {
		t.Fatalf("CompleteUpload: %v", err)
	}
	if info.ETag == "" || !strings.HasSuffix(info.ETag, "-2") {
		t.Fatalf("CompleteUpload: ETag %q, want a 2-part ETag", info.ETag)
	}
	want := append(bytes.Clone(big), "winner tail"...)
	if b := s.read(t, key); !bytes.Equal(b, want) {
		t.Fatalf("completed object holds %d bytes, want %d", len(b), len(want))
	}
	if _, err := s.st.CompleteUpload(s.ctx, key, loserID, loser); !errors.Is(err, fencepub.ErrObjectExists) {
		t.Fatalf("second CompleteUpload of one key: %v, want ErrExists", err)
	}
	if b := s.read(t, key); !bytes.Equal(b, want) {
		t.Fatal("the refused completion's bytes are visible")
	}
	if st, err := s.st.Stat(s.ctx, key); err != nil || st.ETag != info.ETag {
		t.Fatalf("Stat after the refused completion: %+v %v; want ETag %s", st, err, info.ETag)
	}
	if err := s.st.AbortUpload(s.ctx, key, loserID); err != nil {
		t.Fatalf("AbortUpload of the refused upload: %v", err)
	}
	// Re-sending the winner's completion: the upload is gone.
	if _, err := s.st.CompleteUpload(s.ctx, key, winnerID, winner); !errors.Is(err, fencepub.ErrObjectNotFound) && !errors.Is(err, fencepub.ErrObjectExists) {
		t.Fatalf("CompleteUpload re-sent: %v, want ErrNotFound or ErrExists", err)
	}
	// A completion over a key written by a plain create-only PUT.
	// The store may refuse already at CreateUpload.
	putKey := s.prefix + "put-then-complete"
	s.put(t, putKey, []byte("put"), fencepub.PutOptions{})
	if id, err := s.st.CreateUpload(s.ctx, putKey, fencepub.PutOptions{}); err == nil {
		p, err := s.st.UploadPart(s.ctx, putKey, id, 1, strings.NewReader("upload"), 6)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.st.CompleteUpload(s.ctx, putKey, id, []fencepub.Part{p}); !errors.Is(err, fencepub.ErrObjectExists) {
			t.Fatalf("CompleteUpload over a PUT object: %v, want ErrExists", err)
		}
		if err := s.st.AbortUpload(s.ctx, putKey, id); err != nil {
			t.Fatal(err)
		}
	} else if !errors.Is(err, fencepub.ErrObjectExists) {
		t.Fatalf("CreateUpload over a PUT object: %v, want success or ErrExists", err)
	}
	if b := s.read(t, putKey); string(b) != "put" {
		t.Fatalf("object overwritten by a refused upload: %q", b)
	}
}

func testCopyCreateOnly(t *testing.T, s suite) {
	src := s.prefix + "src"
	body := []byte("copy me, byte for byte")
	srcInfo := s.put(t, src, body, fencepub.PutOptions{ContentType: "text/plain"})
	copyTo := func(dst string, cs fencepub.CopySource, opts fencepub.PutOptions) (fencepub.ObjectInfo, error) {
		t.Helper()
		id, err := s.st.CreateUpload(s.ctx, dst, opts)
		if err != nil {
			return fencepub.ObjectInfo{}, err
		}
		p, err := s.st.CopyPart(s.ctx, cs, dst, id, 1)
		if err != nil {
			_ = s.st.AbortUpload(s.ctx, dst, id)
			return fencepub.ObjectInfo{}, err
		}
		info, err := s.st.CompleteUpload(s.ctx, dst, id, []fencepub.Part{p})
		if err != nil {
			_ = s.st.AbortUpload(s.ctx, dst, id)
		}
		return info, err
	}
	whole := fencepub.CopySource{Key: src, IfMatch: srcInfo.ETag, Length: -1}
	dst := s.prefix + "dst"
	meta := fencepub.PutOptions{ContentType: "application/x-copy", UserMetadata: map[string]string{"Fencepub-Copy": "yes"}}
	if _, err := copyTo(dst, whole, meta); err != nil {
		t.Fatalf("copy: %v", err)
	}
	if b := s.read(t, dst); !bytes.Equal(b, body) {
		t.Fatalf("copy holds %q, want %q", b, body)
	}
	if info, err := s.st.Stat(s.ctx, dst); err != nil || info.ContentType != "application/x-copy" || metaValue(info.UserMetadata, "Fencepub-Copy") != "yes" {
		t.Fatalf("copy's info %+v %v: want the upload's content type and metadata", info, err)
	}
	if _, err := copyTo(dst, whole, fencepub.PutOptions{}); !errors.Is(err, fencepub.ErrObjectExists) {
		t.Fatalf("copy onto an existing key: %v, want ErrExists", err)
	}
	ranged := s.prefix + "ranged"
	if _, err := copyTo(ranged, fencepub.CopySource{Key: src, Offset: 5, Length: 2}, fencepub.PutOptions{}); err != nil {
		t.Fatalf("ranged copy: %v", err)
	}
	if b := s.read(t, ranged); string(b) != "me" {
		t.Fatalf("ranged copy holds %q, want %q", b, "me")
	}
	stale := fencepub.CopySource{Key: src, IfMatch: strings.Repeat("0", 32), Length: -1}
	if _, err := copyTo(s.prefix+"stale", stale, fencepub.PutOptions{}); !errors.Is(err, fencepub.ErrConditionFailed) {
		t.Fatalf("copy with a wrong If-Match: %v, want ErrConditionFailed", err)
	}
	gone := fencepub.CopySource{Key: s.prefix + "no-such-source", Length: -1}
	if _, err := copyTo(s.prefix+"from-nothing", gone, fencepub.PutOptions{}); !errors.Is(err, fencepub.ErrObjectNotFound) {
		t.Fatalf("copy of a missing source: %v, want ErrNotFound", err)
	}
	for _, k := range []string{"stale", "from-nothing"} {
		if _, err := s.st.Stat(s.ctx, s.prefix+k); !errors.Is(err, fencepub.ErrObjectNotFound) {
			t.Fatalf("a failed copy left %s: %v", k, err)
		}
	}
}

func testGetIfMatch(t *testing.T, s suite) {
	key := s.prefix + "get"
	body := []byte("if-match body")
	info := s.put(t, key, body, fencepub.PutOptions{ContentType: "text/plain"})
	r, got, err := s.st.Get(s.ctx, key, info.ETag)
	if err != nil {
		t.Fatalf("Get with the right ETag: %v", err)
	}
	b, err := io.ReadAll(r)
	_ = r.Close()
	if err != nil || !bytes.Equal(b, body) || got.Size != int64(len(body)) || got.ETag != info.ETag {
		t.Fatalf("Get: %q %+v %v", b, got, err)
	}
	if _, _, err := s.st.Get(s.ctx, key, strings.Repeat("0", 32)); !errors.Is(err, fencepub.ErrConditionFailed) {
		t.Fatalf("Get with a wrong ETag: %v, want ErrConditionFailed", err)
	}
	missing := s.prefix + "missing"
	if _, _, err := s.st.Get(s.ctx, missing, ""); !errors.Is(err, fencepub.ErrObjectNotFound) {
		t.Fatalf("Get of a missing key: %v, want ErrNotFound", err)
	}
	if _, _, err := s.st.Get(s.ctx, missing, info.ETag); !errors.Is(err, fencepub.ErrObjectNotFound) {
		t.Fatalf("Get with If-Match of a missing key: %v, want ErrNotFound", err)
	}
	if _, err := s.st.Stat(s.ctx, missing); !errors.Is(err, fencepub.ErrObjectNotFound) {
		t.Fatalf("Stat of a missing key: %v, want ErrNotFound", err)
	}
}

func testList(t *testing.T, s suite) {
	keys := []string{s.prefix + "a", s.prefix + "b/c", s.prefix + "b/d/e"}
	etags := map[string]string{}
	for i, k := range keys {
		etags[k] = s.put(t, k, bytes.Repeat([]byte("x"), i+1), fencepub.PutOptions{}).ETag
	}
	s.put(t, strings.TrimSuffix(s.prefix, "/")+"-outside", []byte("x"), fencepub.PutOptions{})
	list := func(opts fencepub.ListOptions) ([]fencepub.ObjectInfo, error) {
		var out []fencepub.ObjectInfo
		for o, err := range s.st.List(s.ctx, s.prefix, opts) {
			if err != nil {
				return nil, err
			}
			out = append(out, o)
		}
		return out, nil
	}
	var got []fencepub.ObjectInfo
	eventually(t, "List shows every write", func() (bool, error) {
		var err error
		got, err = list(fencepub.ListOptions{})
		return len(got) >= len(keys), err
	})
	var names []string
	for i, o := range got {
		names = append(names, o.Key)
		if i < len(keys) && (o.Size != int64(i+1) || o.ETag != etags[o.Key] || o.LastModified.IsZero()) {
			t.Fatalf("listed %+v: want size %d, ETag %s and a time", o, i+1, etags[o.Key])
		}
	}
	if !slices.Equal(names, keys) {
		t.Fatalf("List: %q, want %q (recursive, in key order, only the prefix)", names, keys)
	}
	after, err := list(fencepub.ListOptions{StartAfter: keys[0], PageSize: 1})
	if err != nil || len(after) != 2 || after[0].Key != keys[1] {
		t.Fatalf("List after %s, one per page: %+v %v", keys[0], after, err)
	}
	n := 0
	for _, err := range s.st.List(s.ctx, s.prefix, fencepub.ListOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		if n++; n == 1 {
			break
		}
	}
}

func testListUploads(t *testing.T, s suite) {
	key := s.prefix + "upload"
	id, _ := s.upload(t, key, fencepub.PutOptions{})
	listed := func() (bool, error) {
		// MinIO answers only "" or an exact key as a prefix.
		for u, err := range s.st.ListUploads(s.ctx, "") {
			if err != nil {
				return false, err
			}
			if u.Key == key && u.UploadID == id {
				if u.Initiated.IsZero() {
					t.Fatalf("upload %+v has no initiation time", u)
				}
				return true, nil
			}
		}
		return false, nil
	}
	eventually(t, "ListUploads shows an incomplete upload", listed)
	if err := s.st.AbortUpload(s.ctx, key, id); err != nil {
		t.Fatalf("AbortUpload: %v", err)
	}
	eventually(t, "ListUploads drops an aborted upload", func() (bool, error) {
		ok, err := listed()
		return !ok, err
	})
	if err := s.st.AbortUpload(s.ctx, key, id); err != nil && !errors.Is(err, fencepub.ErrObjectNotFound) {
		t.Fatalf("AbortUpload of an aborted upload: %v, want nil or ErrNotFound", err)
	}
	if _, err := s.st.UploadPart(s.ctx, key, id, 1, strings.NewReader("x"), 1); !errors.Is(err, fencepub.ErrObjectNotFound) {
		t.Fatalf("UploadPart to an aborted upload: %v, want ErrNotFound", err)
	}
	if _, err := s.st.Stat(s.ctx, key); !errors.Is(err, fencepub.ErrObjectNotFound) {
		t.Fatalf("an aborted upload left an object: %v", err)
	}
}

func testDelete(t *testing.T, s suite) {
	keys := []string{s.prefix + "d1", s.prefix + "d2", s.prefix + "never-written"}
	s.put(t, keys[0], []byte("1"), fencepub.PutOptions{})
	s.put(t, keys[1], []byte("2"), fencepub.PutOptions{})
	errs := s.st.Delete(s.ctx, keys)
	if len(errs) != len(keys) {
		t.Fatalf("Delete returned %d errors for %d keys", len(errs), len(keys))
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Delete %s: %v (a missing key counts as deleted)", keys[i], err)
		}
	}
	for _, k := range keys {
		if _, err := s.st.Stat(s.ctx, k); !errors.Is(err, fencepub.ErrObjectNotFound) {
			t.Fatalf("Stat of deleted %s: %v, want ErrNotFound", k, err)
		}
	}
	for i, err := range s.st.Delete(s.ctx, keys) {
		if err != nil {
			t.Fatalf("Delete again %s: %v (idempotent)", keys[i], err)
		}
	}
	s.put(t, keys[0], []byte("again"), fencepub.PutOptions{}) // a deleted key can be created again
}

func testCancelled(t *testing.T, s suite) {
	ctx, cancel := context.WithCancel(s.ctx)
	cancel()
	key := s.prefix + "cancelled"
	if _, err := s.st.PutCreateOnly(ctx, key, strings.NewReader("x"), 1, fencepub.PutOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("PutCreateOnly on a cancelled context: %v, want context.Canceled", err)
	}
	if _, err := s.st.Stat(ctx, key); !errors.Is(err, context.Canceled) {
		t.Fatalf("Stat on a cancelled context: %v, want context.Canceled", err)
	}
	for _, err := range s.st.List(ctx, s.prefix, fencepub.ListOptions{}) {
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("List on a cancelled context: %v, want context.Canceled", err)
		}
	}
	if _, err := s.st.Stat(s.ctx, key); !errors.Is(err, fencepub.ErrObjectNotFound) {
		t.Fatalf("a cancelled PutCreateOnly wrote %s: %v", key, err)
	}
}
