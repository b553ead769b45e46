package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"

	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/minio/minio-go/v7"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Target is the pair of servers a benchmark runs against.
type Target struct {
	Etcd  *clientv3.Client
	Store *objstore.Store
	NS    layout.Namespace // every key the benchmark writes lives under it
}

// putCreateOnly streams body to key with If-None-Match: * while hashing it,
// the same way a publish writes its object, and returns the hex sha256.
func (t Target) putCreateOnly(ctx context.Context, key string, body []byte) (string, error) {
	h := sha256.New()
	opts := minio.PutObjectOptions{ContentType: "application/octet-stream", PartSize: 16 << 20}
	opts.SetMatchETagExcept("*")
	_, err := t.Store.Client.PutObject(ctx, t.Store.Bucket, key, io.TeeReader(bytes.NewReader(body), h), int64(len(body)), opts)
	if err != nil {
		return "", objstore.Classify(err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// FloorPublish is the physical floor of one publish: sha256 of the body while
// a create-only PUT streams it, then one bare etcd compare-and-put
// transaction on the resource's pointer key (value compare, as a publish
// does, with none of fencepub's other compares or records). seq must grow
// per resource.
func (t Target) FloorPublish(ctx context.Context, resource string, seq uint64, body []byte) error {
	v := layout.Version{Epoch: 1, Fence: 1, Seq: seq}
	sum, err := t.putCreateOnly(ctx, t.NS.Root()+"floor/"+resource+"/"+v.Encode()+"-"+layout.NewNonce(), body)
	if err != nil {
		return err
	}
	key := t.floorPointer(resource)
	r, err := t.Etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(key), "<", v.Encode())).
		Then(clientv3.OpPut(key, v.Encode()+"|"+sum)).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return err
	}
	if !r.Succeeded {
		return fmt.Errorf("floor: compare failed for %s at %s (was InitFloor called?)", resource, v)
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
	_, err := t.Etcd.Put(ctx, t.floorPointer(resource), layout.Version{}.Encode())
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

// LockPublish is one lock-per-publish operation on resource.
func (p *Peer) LockPublish(ctx context.Context, resource string, seq uint64, body []byte) error {
	m := concurrency.NewMutex(p.session, p.t.NS.Root()+"peer-locks/"+resource+"/")
	if err := m.Lock(ctx); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	err := p.LeasePublish(ctx, resource, seq, body)
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5e9)
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
	key := p.t.NS.Root() + "peer/" + resource + "/" + v.Encode() + "-" + layout.NewNonce()
	sum, err := p.t.putCreateOnly(ctx, key, body)
	if err != nil {
		return err
	}
	_, err = p.t.Etcd.Put(ctx, p.t.NS.Root()+"peer-pointers/"+resource, key+"|"+sum)
	return err
}
