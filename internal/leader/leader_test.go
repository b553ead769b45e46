package leader

import (
	"context"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
)

// requires reports whether ctx carries etcd's require-leader flag.
func requires(ctx context.Context) bool {
	md, _ := metadata.FromOutgoingContext(ctx)
	v := md.Get(rpctypes.MetadataRequireLeaderKey)
	return len(v) == 1 && v[0] == rpctypes.MetadataHasLeader
}

// recorder is a KV and a Lease that record whether each request's context
// required a leader.
type recorder struct {
	clientv3.KV
	clientv3.Lease
	got map[string]bool
}

func (r *recorder) note(name string, ctx context.Context) { r.got[name] = requires(ctx) }

func (r *recorder) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	name := "get"
	if clientv3.OpGet(key, opts...).IsSerializable() {
		name = "get serializable"
	}
	r.note(name, ctx)
	return nil, nil
}

func (r *recorder) Put(ctx context.Context, _, _ string, _ ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	r.note("put", ctx)
	return nil, nil
}

func (r *recorder) Delete(ctx context.Context, _ string, _ ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	r.note("delete", ctx)
	return nil, nil
}

func (r *recorder) Compact(ctx context.Context, _ int64, _ ...clientv3.CompactOption) (*clientv3.CompactResponse, error) {
	r.note("compact", ctx)
	return nil, nil
}

func (r *recorder) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	name := "do"
	if op.IsSerializable() {
		name = "do serializable"
	}
	r.note(name, ctx)
	return clientv3.OpResponse{}, nil
}

func (r *recorder) Txn(ctx context.Context) clientv3.Txn {
	r.note("txn", ctx)
	return nil
}

func (r *recorder) Grant(ctx context.Context, _ int64) (*clientv3.LeaseGrantResponse, error) {
	r.note("grant", ctx)
	return nil, nil
}

func (r *recorder) Revoke(ctx context.Context, _ clientv3.LeaseID) (*clientv3.LeaseRevokeResponse, error) {
	r.note("revoke", ctx)
	return nil, nil
}

func (r *recorder) TimeToLive(ctx context.Context, _ clientv3.LeaseID, _ ...clientv3.LeaseOption) (*clientv3.LeaseTimeToLiveResponse, error) {
	r.note("ttl", ctx)
	return nil, nil
}

func (r *recorder) Leases(ctx context.Context) (*clientv3.LeaseLeasesResponse, error) {
	r.note("leases", ctx)
	return nil, nil
}

func (r *recorder) KeepAliveOnce(ctx context.Context, _ clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	r.note("keepalive", ctx)
	return nil, nil
}

// TestRequestsRequireLeader checks that KV and Lease mark every request
// require-leader except a serializable read, and that a request made on
// the clients themselves carries no such mark (the recorder sees it).
func TestRequestsRequireLeader(t *testing.T) {
	ctx := context.Background()
	send := func(kv clientv3.KV, l clientv3.Lease) {
		_, _ = kv.Get(ctx, "k")
		_, _ = kv.Get(ctx, "k", clientv3.WithSerializable())
		_, _ = kv.Put(ctx, "k", "v")
		_, _ = kv.Delete(ctx, "k")
		_, _ = kv.Compact(ctx, 1)
		_, _ = kv.Do(ctx, clientv3.OpPut("k", "v"))
		_, _ = kv.Do(ctx, clientv3.OpGet("k", clientv3.WithSerializable()))
		kv.Txn(ctx)
		_, _ = l.Grant(ctx, 2)
		_, _ = l.Revoke(ctx, 1)
		_, _ = l.TimeToLive(ctx, 1)
		_, _ = l.Leases(ctx)
		_, _ = l.KeepAliveOnce(ctx, 1)
	}
	plain := &recorder{got: map[string]bool{}}
	send(plain, plain)
	for name, rl := range plain.got {
		if rl {
			t.Errorf("%s on the bare client requires a leader; the test cannot tell", name)
		}
	}
	r := &recorder{got: map[string]bool{}}
	send(KV(r), Lease(r))
	if len(r.got) != len(plain.got) {
		t.Fatalf("%d kinds of request reached the client, want %d: %v", len(r.got), len(plain.got), r.got)
	}
	for name, rl := range r.got {
		want := name != "get serializable" && name != "do serializable"
		if rl != want {
			t.Errorf("%s: requires a leader %v, want %v", name, rl, want)
		}
	}
}
