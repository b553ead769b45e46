package authority

import (
	"time"

	"github.com/fencepub/fencepub/internal/layout"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Grant is one lease granted on a resource together with the fencing token
// minted for it in the same etcd transaction (DESIGN.md invariant 2; the
// seed's "发号必须与授予同属一个原子权威"). Generation is the token: where it
// travels with a write it is called the fence; it is the same number.
type Grant struct {
	Resource  string `json:"resource"`
	Owner     string `json:"owner"`
	RequestID string `json:"request_id"`
	Epoch     uint64 `json:"epoch"`
	// Generation is the fencing token (the "fence" the publisher carries),
	// strictly larger than every earlier grant of Resource in Epoch.
	Generation uint64           `json:"generation"`
	LeaseID    clientv3.LeaseID `json:"lease_id"`
	TTL        time.Duration    `json:"ttl"`
	// GrantedAt is the authority client's clock when the grant transaction
	// returned; informative only, never used to judge liveness.
	GrantedAt time.Time `json:"granted_at"`
	// HolderRevision is the etcd revision of the grant transaction, which is
	// the CreateRevision of the holder key while this grant holds it.
	HolderRevision int64 `json:"holder_revision"`
}

// Fence returns the grant's fencing token; it equals Generation.
func (g Grant) Fence() uint64 { return g.Generation }

// HolderCmp returns an etcd compare that holds only while this grant is still
// the live holder of its resource: CreateRevision(holder) == HolderRevision.
// A publisher in strict mode adds it to its transaction (like etcd's
// concurrency.Mutex.IsOwner). Once etcd expires or revokes the lease the
// holder key is gone and the compare fails.
func (g Grant) HolderCmp(ns layout.Namespace) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(ns.HolderKey(g.Resource)), "=", g.HolderRevision)
}
