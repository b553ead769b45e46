//go:build !unit

package reader

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/fencepub/fencepub"
)

// The reader when etcd never answers and when objects change behind the
// pointer's back (DESIGN.md invariant 6).

// TestUnreachableEtcd points a reader at an address where no etcd
// listens. The etcd client waits for a connection as long as the context
// allows, so before Config.RequestTimeout a `fencepub read` (no deadline)
// hung for ever and `fencepub watch` never printed its promised error
// lines. Each read now ends with fencepub.ErrUnavailable after RequestTimeout.
func TestUnreachableEtcd(t *testing.T) {
	e := newEnv(t)
	cli := unreachableEtcd(t)
	const timeout = 500 * time.Millisecond
	r := e.reader(cli, func(c *Config) { c.RequestTimeout = timeout })
	ctx := ctxT(t, time.Minute) // far longer than the request timeout

	for name, call := range map[string]func() error{
		"current": func() error { _, err := r.Current(ctx); return err },
		"open":    func() error { _, err := r.Open(ctx); return err },
	} {
		start := time.Now()
		err := call()
		if took := time.Since(start); !errors.Is(err, fencepub.ErrUnavailable) || took > 10*timeout {
			t.Fatalf("%s on an unreachable etcd: %v after %s; want fencepub.ErrUnavailable within ~%s", name, err, took, timeout)
		}
	}

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := r.Watch(wctx)
	select {
	case u := <-ch:
		if !errors.Is(u.Err, fencepub.ErrUnavailable) {
			t.Fatalf("first watch update %+v; want fencepub.ErrUnavailable", u)
		}
	case <-time.After(10 * timeout):
		t.Fatal("watch on an unreachable etcd reported nothing")
	}
	cancel()
	for range ch {
	}

	if _, err := New(Config{Env: fencepub.Env{Namespace: fencepub.Namespace(e.NS), Etcd: cli}, RequestTimeout: -time.Second}, res); !errors.Is(err, fencepub.ErrInvalid) {
		t.Fatalf("negative RequestTimeout: %v, want fencepub.ErrInvalid", err)
	}
}

// TestObjectOverwritten overwrites the published object out of
// band (a plain PUT on its key; objects are meant to be immutable). The
// reader must refuse every changed body, with the same size or not, and a
// pointer without an ETag still gets its bytes checked against sha256.
func TestObjectOverwritten(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	const body = "the published bytes"
	p := e.publish("k1", body)
	r := e.reader(e.Etcd)
	put := func(data string) {
		t.Helper()
		if _, err := e.Store.Client.PutObject(ctx, p.Object.Bucket, p.Object.Key, strings.NewReader(data), int64(len(data)),
			minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	put(strings.ToUpper(body)) // same size, other bytes
	if _, err := readAll(t, r); !errors.Is(err, ErrObjectChanged) {
		t.Fatalf("same-size overwrite: %v, want ErrObjectChanged", err)
	}
	put(body + " and more")
	if _, err := readAll(t, r); !errors.Is(err, ErrObjectChanged) {
		t.Fatalf("longer overwrite: %v, want ErrObjectChanged", err)
	}

	// Without the ETag condition (a pointer written without one), the
	// digest check catches it, and no unverified byte is passed as good:
	// the error comes with the end of the body.
	noETag := p
	noETag.Object.ETag = ""
	e.putPointer(noETag)
	put(strings.ToUpper(body))
	b, err := r.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	_, err = io.Copy(&got, b)
	b.Close()
	if !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("overwrite under a pointer without ETag: read %q, %v; want ErrDigestMismatch", got.String(), err)
	}

	// The exact bytes back: the same ETag and digest, served again.
	put(body)
	e.putPointer(p)
	if got, err := readAll(t, r); err != nil || got != body {
		t.Fatalf("restored bytes: %q, %v", got, err)
	}
}
