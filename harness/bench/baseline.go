package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// ErrFloorStale is returned (wrapped) by FloorPublish when its compare
// found a higher seq already in the floor pointer (concurrent floor
// publishes on one resource).
var ErrFloorStale = errors.New("bench: floor compare failed (a higher seq got there first)")

// Target is the pair of servers a benchmark runs against.
type Target struct {
	Etcd  *clientv3.Client
	Store objstore.Store
	NS    layout.Namespace // every key the benchmark writes lives under it
}

// PutCreateOnly streams body to key in ONE create-only PUT (If-None-Match:
// *, never multipart: one request is the least a store round trip can
// cost) while hashing it, and returns the hex sha256. The same store
// client and signing as fencepub's writes (objstore.Store.PutCreateOnly).
// Errors: objstore's (ErrExists, ErrUnavailable, ...).
func (t Target) PutCreateOnly(ctx context.Context, key string, body []byte) (string, error) {
	h := sha256.New()
	_, err := t.Store.PutCreateOnly(ctx, key, io.TeeReader(bytes.NewReader(body), h), int64(len(body)),
		objstore.PutOptions{ContentType: "application/octet-stream"})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// getBufs holds BareGet's copy buffers (128 KiB, reader.Body.WriteTo's
// read size).
var getBufs = sync.Pool{New: func() any { b := make([]byte, 128<<10); return &b }}

// BareGet is the floor of reading an object: ONE GET of key
// (objstore.Store.Get, no Stat) copied to dst in 128 KiB reads,
// the read size reader.Body uses, so the comparison with reader.Open
// isolates the pointer read and the verification. setSize, if not nil,
// receives the object's size before the first byte is copied (an HTTP proxy
// sets Content-Length from it). It returns the bytes copied.
func (t Target) BareGet(ctx context.Context, key string, dst io.Writer, setSize func(int64)) (int64, error) {
	body, info, err := t.Store.Get(ctx, key, "")
	if err != nil {
		return 0, err
	}
	defer body.Close()
	if setSize != nil {
		setSize(info.Size)
	}
	bp := getBufs.Get().(*[]byte)
	defer getBufs.Put(bp)
	// Hide dst's ReadFrom (io.Discard's reads 8 KiB at a time) so the
	// buffer sets the read size.
	return io.CopyBuffer(struct{ io.Writer }{dst}, body, *bp)
}

// ErrFloorDigest is returned (wrapped) by VerifyingGet when the bytes read
// do not hash to the expected sha256.
var ErrFloorDigest = errors.New("bench: object bytes do not match the expected sha256")

// VerifyingGet is the honest floor of reading a published object: ONE GET
// of key (as BareGet, 128 KiB reads) hashing every byte with sha256 and
// comparing the hex digest with sha at the end, as a reader must before it
// uses the bytes (DESIGN.md invariant 6). It returns the bytes read, and
// ErrFloorDigest (wrapped) on a mismatch.
func (t Target) VerifyingGet(ctx context.Context, key, sha string) (int64, error) {
	h := sha256.New()
	n, err := t.BareGet(ctx, key, h, nil)
	if err != nil {
		return n, err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sha {
		return n, fmt.Errorf("%w: %s: %s, want %s", ErrFloorDigest, key, got, sha)
	}
	return n, nil
}

// ReadThenGet is the sequential floor of reading the current object: one
// linearizable etcd Get of pointerKey, then, when it answered, ONE bare GET
// of key (BareGet into io.Discard). The pointer's value is not decoded and
// the bytes are not hashed. It returns the bytes read.
func (t Target) ReadThenGet(ctx context.Context, pointerKey, key string) (int64, error) {
	if _, err := t.Etcd.Get(ctx, pointerKey); err != nil {
		return 0, err
	}
	return t.BareGet(ctx, key, io.Discard, nil)
}

// FloorPublish is the physical floor of one publish: sha256 of the body
// while one create-only PUT streams it, then one bare etcd compare-and-put
// transaction on the resource's floor pointer key (a value compare, as a
// publish does, with none of fencepub's other compares or records). seq
// must grow per resource; InitFloor must have run for resource.
//
// It returns ErrFloorStale (wrapped) when the compare failed because a
// higher seq got there first (concurrent floor publishes on one resource):
// the floor's equivalent of a stale publish, one round trip like an applied
// one.
func (t Target) FloorPublish(ctx context.Context, resource string, seq uint64, body []byte) error {
	sum, err := t.FloorPut(ctx, resource, seq, body)
	if err != nil {
		return err
	}
	return t.FloorCommit(ctx, resource, seq, sum)
}

// FloorPut is the object half of FloorPublish: the create-only PUT of body
// under a fresh key of resource's seq, hashing it. It returns the hex
// sha256.
func (t Target) FloorPut(ctx context.Context, resource string, seq uint64, body []byte) (string, error) {
	v := layout.Version{Epoch: 1, Fence: 1, Seq: seq}
	return t.PutCreateOnly(ctx, t.NS.Root()+"floor/"+resource+"/"+layout.EncodeVersion(v)+"-"+layout.NewNonce(), body)
}

// FloorCommit is the etcd half of FloorPublish: one bare compare-and-put
// of (seq, sum) on resource's floor pointer. Errors: ErrFloorStale, etcd's.
func (t Target) FloorCommit(ctx context.Context, resource string, seq uint64, sum string) error {
	v := layout.Version{Epoch: 1, Fence: 1, Seq: seq}
	key := t.floorPointer(resource)
	r, err := t.Etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(key), "<", layout.EncodeVersion(v))).
		Then(clientv3.OpPut(key, layout.EncodeVersion(v)+"|"+sum)).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return err
	}
	if !r.Succeeded {
		return fmt.Errorf("%w: %s at %s", ErrFloorStale, resource, v)
	}
	return nil
}

func (t Target) floorPointer(resource string) string {
	return t.NS.Root() + "floor-pointers/" + resource
}

// InitFloor writes the zero version to resource's floor pointer, as a
// resource init does before the first publish (a value compare on a missing
// key always fails).
func (t Target) InitFloor(ctx context.Context, resource string) error {
	_, err := t.Etcd.Put(ctx, t.floorPointer(resource), layout.EncodeVersion(layout.Version{}))
	return err
}

// FloorAcquire is the physical floor of one authority grant: a lease grant
// (TTL ttl, whole seconds), one bare transaction creating a leased holder
// key if absent, and one create-only PUT of a small marker object, the
// three steps every Acquire needs (authority.Acquire's warm path adds its
// compares, its records and the marker listing). i names the keys and must
// be unique within t.NS. The leases expire by their TTL.
func (t Target) FloorAcquire(ctx context.Context, i uint64, ttl time.Duration) error {
	l, err := t.Etcd.Grant(ctx, int64(ttl/time.Second))
	if err != nil {
		return err
	}
	key := t.NS.Root() + "floor/holder/" + layout.EncodeNumber(i)
	if _, err := t.Etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, "x", clientv3.WithLease(l.ID))).
		Commit(); err != nil {
		return err
	}
	_, err = objstore.PutSmallCreateOnly(ctx, t.Store, t.NS.Root()+"floor/markers/"+layout.EncodeNumber(i), []byte(`{"request_id":"x"}`), "application/json")
	return err
}

// Peer is what users write today without fencepub: per publish, take an etcd
// lock (concurrency.Mutex) on the resource, PUT the object, put the pointer,
// unlock. Mutual exclusion that a pause breaks, and no fence reaches the
// pointer: a paused holder can overwrite a newer pointer after its lease
// expired. One Peer per worker; Close releases its session.
type Peer struct {
	t       Target
	session *concurrency.Session
}

// NewPeer opens the worker's etcd session (a 10 s lease kept alive).
func (t Target) NewPeer(ctx context.Context) (*Peer, error) {
	s, err := concurrency.NewSession(t.Etcd, concurrency.WithTTL(10), concurrency.WithContext(ctx))
	if err != nil {
		return nil, err
	}
	return &Peer{t: t, session: s}, nil
}

// Close ends the peer's session.
func (p *Peer) Close() error { return p.session.Close() }

// Mutex returns the peer's lock on resource (held across publishes by the
// lease-holding variant).
func (p *Peer) Mutex(resource string) *concurrency.Mutex {
	return concurrency.NewMutex(p.session, p.t.NS.Root()+"peer-locks/"+resource+"/")
}

// LockPublish is one lock-per-publish operation on resource.
func (p *Peer) LockPublish(ctx context.Context, resource string, seq uint64, body []byte) error {
	m := p.Mutex(resource)
	if err := m.Lock(ctx); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	err := p.LeasePublish(ctx, resource, seq, body)
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if uerr := m.Unlock(uctx); err == nil && uerr != nil {
		err = fmt.Errorf("unlock: %w", uerr)
	}
	return err
}

// LeasePublish is the lease-holding variant without fencing: the worker
// believes it holds a long lease and just writes the object and the pointer.
func (p *Peer) LeasePublish(ctx context.Context, resource string, seq uint64, body []byte) error {
	v := layout.Version{Epoch: 1, Fence: 1, Seq: seq}
	key := p.t.NS.Root() + "peer/" + resource + "/" + layout.EncodeVersion(v) + "-" + layout.NewNonce()
	sum, err := p.t.PutCreateOnly(ctx, key, body)
	if err != nil {
		return err
	}
	_, err = p.t.Etcd.Put(ctx, p.t.NS.Root()+"peer-pointers/"+resource, key+"|"+sum)
	return err
}
