// Package authority is the single source of fencing tokens for a fencepub
// domain: it grants leases on resources and mints each grant's generation in
// the same etcd transaction (DESIGN.md invariants 2 and 3; protocol
// source, §Mint). The generation is the fence the publisher
// carries: one number, two names.
//
// # Grant
//
// Acquire is one etcd transaction (after a lease grant) in the uncontended
// case. Its compares: no live holder (CreateRevision(holder) == 0), the
// epoch and the durable generation unchanged, no grant record for the next
// generation, the request id unused, no rollback flag. Its writes:
//
//	authority/<res>/generation     generation+1, 20 digits; never leased, never deleted
//	authority/<res>/holder         the Grant as JSON, attached to the grant's lease
//	authority/<res>/grants/<gen>   layout.GrantRecordValue(epoch, owner); durable
//	authority/<res>/requests/<id>  the Grant and its creation time; no lease,
//	                               pruned after RequestRetention (PruneRequests)
//
// A failed compare reads the same keys in the Else branch, so a contended
// acquire learns the holder, a retried request id gets its original grant
// (ErrExpired if it no longer holds), and a stale cached state is refreshed,
// all in the same round trip. With Wait, a held resource is awaited by
// watching its holder key from the read revision, not by polling.
//
// Renew is a lease keepalive plus a compare that the holder is still this
// grant in the current epoch; Release deletes the holder only if its
// CreateRevision, lease and grant record (owner, epoch) match. Neither ever
// mints: a lost grant stays lost (ErrLeaseLost). A Session renews in the
// background and closes Lost before the local deadline, counted from when
// each renew request was sent. Grant.HolderCmp is the strict-mode compare
// (like concurrency.Mutex.IsOwner); Grant.GrantCmp and Grant.EpochCmp are the
// compares the publish transaction makes.
//
// Strict mode and Session give no wall-clock revocation: etcd expires
// leases with its own timing (a leader change restarts TTLs), and expiry
// does not stop a paused worker. Fencing at the resource is what protects it
// (protocol source, §Timeline: 41, 42, 41).
//
// # Epochs and rollback
//
// Epochs survive an etcd restore because each is reserved first by a
// create-only marker object in the bucket (layout.EpochMarker), and etcd
// records each epoch it issued (layout.EpochRecord). Init runs only on an
// empty bucket root: an etcd with no epoch never initialises itself over a
// bucket that holds another history (ErrForeignHistory, DESIGN.md invariant
// 9); Recover with FromBucket takes such a bucket over. Before Acquire returns a token it records the grant
// create-only under layout.GrantMarker(res, epoch, generation) and lists the
// markers above it: a marker of the same (epoch, generation) from another
// request, or a higher marker etcd does not know, means etcd's history went
// back. Acquire then sets a sticky rollback flag (etcd key
// "<root>authority-rollback") that every grant transaction requires absent,
// and the domain refuses all grants with ErrRolledBack until Recover. Grant
// markers are pruned to the newest MarkerKeep (+ up to MarkerKeep more
// between prunes) per resource; the newest always survives, which is all the
// "marker above" check needs, so no separate floor object is kept.
//
// Recover (`fencepub authority recover`, the restore runbook in README.md) moves the domain to an
// epoch above every marker, pointer and object key, records each resource's
// restored pointer under layout.RestoredKey for GC's quarantine, revokes
// every restored holder lease and reports the objects above the restored
// pointers.
//
// Bucket markers are JSON: the ownership marker is internal/ownership.Marker; epoch
// markers hold {epoch, deployment_id, reason, nonce, created_at}; grant
// markers {request_id, owner, lease_id, granted_at}.
package authority
