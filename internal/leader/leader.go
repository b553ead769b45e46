// Package leader makes every etcd request of the product packages carry
// etcd's require-leader flag (clientv3.WithRequireLeader), as decorators of
// the KV and Lease clients they use.
//
// A member that has lost its leader (it is cut from the others, or the
// cluster has no quorum) cannot serve a linearizable read, a transaction or
// a lease request: without the flag it holds the request until the
// request's own deadline, for as long as it stays cut, while the etcd
// client's round-robin balancer keeps handing it a share of the requests.
// With the flag it refuses them at once with rpctypes.ErrNoLeader (gRPC
// Unavailable): the etcd client sends a read or a lease grant again on
// another member itself, and the product's retry loop (internal/retry) sends
// a transaction again after its backoff. A leader cut from its followers
// then costs its clients an election, not one attempt timeout in three for
// the whole cut (docs/partitions.md; DESIGN.md invariant 12).
//
// A serializable read is left alone: it is served from the member's own
// data, leader or not, and is documented as possibly stale.
package leader

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// KV returns kv with every request's context marked require-leader, a
// serializable Get or Do excepted. It is safe for concurrent use when kv
// is.
func KV(kv clientv3.KV) clientv3.KV { return requireKV{KV: kv} }

type requireKV struct{ clientv3.KV }

func (k requireKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	if !clientv3.OpGet(key, opts...).IsSerializable() {
		ctx = clientv3.WithRequireLeader(ctx)
	}
	return k.KV.Get(ctx, key, opts...)
}

func (k requireKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	return k.KV.Put(clientv3.WithRequireLeader(ctx), key, val, opts...)
}

func (k requireKV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	return k.KV.Delete(clientv3.WithRequireLeader(ctx), key, opts...)
}

func (k requireKV) Compact(ctx context.Context, rev int64, opts ...clientv3.CompactOption) (*clientv3.CompactResponse, error) {
	return k.KV.Compact(clientv3.WithRequireLeader(ctx), rev, opts...)
}

func (k requireKV) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	if !op.IsGet() || !op.IsSerializable() {
		ctx = clientv3.WithRequireLeader(ctx)
	}
	return k.KV.Do(ctx, op)
}

func (k requireKV) Txn(ctx context.Context) clientv3.Txn {
	return k.KV.Txn(clientv3.WithRequireLeader(ctx))
}

// Lease returns l with the context of each Grant, Revoke, TimeToLive,
// Leases and KeepAliveOnce marked require-leader. KeepAlive's stream is
// the etcd client's own and is left alone. It is safe for concurrent use
// when l is.
func Lease(l clientv3.Lease) clientv3.Lease { return requireLease{Lease: l} }

type requireLease struct{ clientv3.Lease }

func (l requireLease) Grant(ctx context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error) {
	return l.Lease.Grant(clientv3.WithRequireLeader(ctx), ttl)
}

func (l requireLease) Revoke(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseRevokeResponse, error) {
	return l.Lease.Revoke(clientv3.WithRequireLeader(ctx), id)
}

func (l requireLease) TimeToLive(ctx context.Context, id clientv3.LeaseID, opts ...clientv3.LeaseOption) (*clientv3.LeaseTimeToLiveResponse, error) {
	return l.Lease.TimeToLive(clientv3.WithRequireLeader(ctx), id, opts...)
}

func (l requireLease) Leases(ctx context.Context) (*clientv3.LeaseLeasesResponse, error) {
	return l.Lease.Leases(clientv3.WithRequireLeader(ctx))
}

func (l requireLease) KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	return l.Lease.KeepAliveOnce(clientv3.WithRequireLeader(ctx), id)
}
