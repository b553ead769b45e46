//go:build !unit

package reader

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/layout"
)

// readPointer opens ptr through OpenPointer and reads it to EOF.
func readPointer(t *testing.T, r *Reader, ptr layout.Pointer) (string, error) {
	t.Helper()
	return drain(r.OpenPointer(ctxT(t, 30*time.Second), ptr))
}

// OpenPointer serves the version the caller holds (from a watch), verified
// against that pointer, and needs no etcd at all: a reader whose etcd is
// unreachable still opens it, while Open fails.
func TestOpenPointer(t *testing.T) {
	e := newEnv(t)
	p1 := e.publish("k1", "first")
	p2 := e.publish("k2", "second")

	dead := unreachableEtcd(t)
	r := e.reader(dead, func(c *Config) { c.RequestTimeout = 300 * time.Millisecond })

	for _, tc := range []struct {
		ptr  layout.Pointer
		want string
	}{{p2, "second"}, {p1, "first"}} {
		if got, err := readPointer(t, r, tc.ptr); err != nil || got != tc.want {
			t.Fatalf("OpenPointer(%s) = %q, %v; want %q", tc.ptr.Version, got, err, tc.want)
		}
	}
	if _, err := r.Open(ctxT(t, 30*time.Second)); !errors.Is(err, fencepub.ErrUnavailable) {
		t.Fatalf("Open with etcd unreachable: %v; want fencepub.ErrUnavailable (Open reads the pointer)", err)
	}

	bad := p2
	bad.Object.SHA256 = strings.Repeat("0", 64)
	if _, err := readPointer(t, r, bad); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("pointer with another sha256: %v; want ErrDigestMismatch", err)
	}
	long := p2
	long.Object.Size++
	if _, err := readPointer(t, r, long); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("pointer with another size: %v; want ErrDigestMismatch", err)
	}
	changed := p2
	changed.Object.ETag = "0123456789abcdef0123456789abcdef"
	if _, err := readPointer(t, r, changed); !errors.Is(err, ErrObjectChanged) {
		t.Fatalf("pointer with another ETag: %v; want ErrObjectChanged", err)
	}
	if _, err := r.OpenPointer(ctxT(t, 10*time.Second), layout.Pointer{}); !errors.Is(err, fencepub.ErrInvalid) {
		t.Fatalf("zero pointer: %v; want fencepub.ErrInvalid", err)
	}
}

// When the held pointer's object was collected after supersession,
// OpenPointer follows the newer pointer as Open does.
func TestOpenPointerFollowsNewer(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	p1 := e.publish("k1", "old")
	e.publish("k2", "new")
	if err := e.Store.Client.RemoveObject(ctx, e.Store.Bucket, p1.Object.Key, minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	r := e.reader(e.Etcd)
	b, err := r.OpenPointer(ctx, p1)
	if err != nil {
		t.Fatalf("OpenPointer of a collected superseded object: %v", err)
	}
	defer b.Close()
	data, err := io.ReadAll(b)
	if err != nil || string(data) != "new" || b.Pointer.Version == p1.Version {
		t.Fatalf("read %q at %s, %v; want the newer object", data, b.Pointer.Version, err)
	}
}

// io.Copy drives Body.WriteTo: it copies verified bytes and returns nil,
// and for a pointer whose sha256 or size the bytes do not match it returns
// ErrDigestMismatch, never a silent success.
func TestBodyWriteTo(t *testing.T) {
	e := newEnv(t)
	body := strings.Repeat("0123456789", 50_000) // several WriteTo reads
	good := e.publish("k1", body)
	r := e.reader(e.Etcd)
	badSHA := good
	badSHA.Object.SHA256 = strings.Repeat("0", 64)
	for _, tc := range []struct {
		name string
		ptr  layout.Pointer
		want error
	}{{"matching", good, nil}, {"another sha256", badSHA, ErrDigestMismatch}} {
		b, err := r.OpenPointer(ctxT(t, 30*time.Second), tc.ptr)
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		n, err := io.Copy(&out, b)
		b.Close()
		if !errors.Is(err, tc.want) || tc.want == nil && (err != nil || n != int64(len(body)) || out.String() != body) {
			t.Fatalf("%s: io.Copy = %d bytes, %v; want %v", tc.name, n, err, tc.want)
		}
	}
}

// Open speculatively GETs the object it opened last while it reads the
// pointer; the bytes returned are always those of the pointer read: the
// same object while the pointer stays, the newer one once it moved (the
// speculative GET dropped), and a pointer gone back is refused.
func TestOpenSpeculation(t *testing.T) {
	e := newEnv(t)
	p1 := e.publish("k1", "one")
	r := e.reader(e.Etcd)
	for _, want := range []string{"one", "one"} {
		if got, err := readAll(t, r); err != nil || got != want {
			t.Fatalf("open: %q, %v; want %q", got, err, want)
		}
	}
	p2 := e.publish("k2", "two")
	b, err := r.Open(ctxT(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := drain(b, nil); err != nil || got != "two" || b.Pointer.Version != p2.Version {
		t.Fatalf("open after the pointer moved: %q at %s, %v; want %q at %s", got, b.Pointer.Version, err, "two", p2.Version)
	}
	e.putPointer(p1)
	if _, err := r.Open(ctxT(t, 30*time.Second)); !errors.Is(err, ErrWentBack) {
		t.Fatalf("open after the pointer went back to the speculated-on version's predecessor: %v; want ErrWentBack", err)
	}
}
