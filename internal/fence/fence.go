// Package fence holds the etcd compare that ties a transaction to a live
// authority grant. The authority renews and releases a grant under it, and a
// publisher in strict mode adds it to its publish transaction (DESIGN.md
// "Publish, in one round trip to etcd"), so both use this one definition.
package fence

import (
	"github.com/fencepub/fencepub/internal/layout"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Holder returns the compare that holds only while the grant of resource
// whose holder key etcd created at revision holderRevision is still the live
// holder: CreateRevision(holder key) == holderRevision. Once etcd expires or
// revokes the grant's lease the holder key is gone and the compare fails
// (like etcd's concurrency.Mutex.IsOwner).
func Holder(ns layout.Namespace, resource string, holderRevision int64) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(ns.HolderKey(resource)), "=", holderRevision)
}
