package authority

import (
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/fence"
	"github.com/fencepub/fencepub/internal/layout"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Grant is one lease granted on a resource together with the fencing token
// minted for it in the same etcd transaction (DESIGN.md invariant 2;
// protocol source, §Mint). Generation is the token, called the fence where
// it travels with a write (DESIGN.md "Words").
//
// A Grant is a plain value: it can be printed as JSON, passed to another
// process and given back to Renew, Release or NewSession there. A grant made
// in this process carries Go's monotonic clock in GrantedAt and one decoded
// from JSON does not, so compare grants by (Resource, Epoch, Generation,
// HolderRevision), not with ==.
type Grant struct {
	Resource  string `json:"resource"`
	Owner     string `json:"owner"`
	RequestID string `json:"request_id"`
	Epoch     uint64 `json:"epoch"`
	// Generation is the fencing token (the "fence" the publisher carries),
	// strictly larger than every earlier grant of Resource. Together with
	// Epoch it orders grants: (Epoch, Generation), epoch first.
	Generation uint64           `json:"generation"`
	LeaseID    clientv3.LeaseID `json:"lease_id"`
	// TTL is the lease's time to live, whole seconds, at least 2 s.
	TTL time.Duration `json:"ttl"`
	// GrantedAt is the authority client's clock when it SENT the request
	// that created the lease, so GrantedAt+TTL is no later than the
	// earliest moment etcd may expire the lease unless renewed.
	// Informative: liveness is judged by etcd, never by this clock.
	GrantedAt time.Time `json:"granted_at"`
	// HolderRevision is the etcd revision of the grant transaction, which is
	// the CreateRevision of the holder key while this grant holds it.
	HolderRevision int64 `json:"holder_revision"`
}

// Version returns the version of the grant's seq-th publish:
// (Epoch, Generation, seq) (DESIGN.md "Words").
func (g Grant) Version(seq uint64) fencepub.Version {
	return layout.Version{Epoch: g.Epoch, Fence: g.Generation, Seq: seq}
}

// expiresAt is the client's estimate of the earliest moment etcd may expire
// the lease if it is never renewed: GrantedAt + TTL. Renewals move the real
// expiry later; a Session tracks that (Session.Deadline).
func (g Grant) expiresAt() time.Time { return g.GrantedAt.Add(g.TTL) }

// holderCmp returns the compare that holds only while g is still the live
// holder of its resource (fence.Holder).
func (g Grant) holderCmp(ns layout.Namespace) clientv3.Cmp {
	return fence.Holder(ns, g.Resource, g.HolderRevision)
}

// grantCmp returns the compare the publish transaction makes on the durable
// grant record: Value(grants/<Generation>) == layout.GrantRecordValue(Epoch,
// Owner). It fails for a fence of another resource, a fence never granted,
// another owner's grant and a grant of another epoch (DESIGN.md invariant 2).
func (g Grant) grantCmp(ns layout.Namespace) clientv3.Cmp {
	return clientv3.Compare(clientv3.Value(ns.GrantKey(g.Resource, g.Generation)), "=", layout.GrantRecordValue(g.Epoch, g.Owner))
}

// epochCmp returns the compare Value(epoch) == Epoch (20 digits): it holds
// while the domain is still in the grant's epoch.
func (g Grant) epochCmp(ns layout.Namespace) clientv3.Cmp {
	return clientv3.Compare(clientv3.Value(ns.EpochKey()), "=", layout.EncodeNumber(g.Epoch))
}
