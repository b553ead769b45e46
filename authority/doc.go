// Package authority is the single source of fencing tokens for a fencepub
// domain: it grants leases on resources and mints each grant's generation
// (the fence a publisher carries) in the same etcd transaction.
//
// Contracts (DESIGN.md invariants 2, 3 and 9; "etcd layout"):
//
//   - Acquire returns a Grant whose Generation is strictly above every
//     earlier grant of the resource, in every epoch; a retried request id
//     gets the original grant, never a second one. It is one etcd
//     transaction after the lease grant when uncontended.
//   - Renew, Release and Session never mint: a lost grant stays lost
//     (ErrLeaseLost). A Session closes Lost before the local deadline.
//     Neither gives wall-clock revocation; fencing at the publish is what
//     protects a resource from a paused worker.
//   - Release (and Session.Close) ends a term for good: it raises the
//     resource's seal to (epoch, fence, fencepub.MaxNumber) in a fenced
//     transaction of its own, so GC collects every object the term left
//     above the pointer at its next pass and a later publish of the term is
//     stale (DESIGN.md "Leftovers of finished work").
//   - Epochs survive an etcd restore: each is reserved by a create-only
//     marker object in the bucket before etcd uses it. A history that went
//     back makes every grant fail with ErrRolledBack until `fencepub
//     authority recover` moves the domain to a new epoch (docs/operations.md
//     runbook).
//   - The first Acquire of a domain (or `fencepub init`) initialises it,
//     and refuses a bucket that holds another etcd history
//     (ErrForeignHistory); `fencepub authority recover --from-bucket` takes
//     it over.
//   - Errors are this package's sentinels and fencepub's shared ones
//     (fencepub.ErrUnavailable: retry later), tested with errors.Is.
//
// DESIGN.md has the transactions, keys and markers.
//
// # How a grant is made
//
// Acquire's etcd transaction checks that no live holder exists, that the
// domain epoch and the resource's durable generation are the ones it read,
// that no grant record exists for the next generation, that the request id
// is unused and that no rollback was detected; it then writes generation+1
// (its own key: never leased, never deleted), the holder key attached to a
// fresh lease, the durable grant record grants/<generation> (the epoch and
// the owner) and the request record. A failed compare returns the current
// state in the same round trip (an Else branch), as etcd's concurrency
// package does.
//
// Before returning, the grant is recorded create-only in the bucket under
// its (epoch, generation) marker, and the bucket is checked for a marker of
// the same (epoch, generation) from another request or a marker above it
// that etcd does not know: either means etcd's history went back, so
// Acquire revokes the new lease, sets the domain's rollback flag and refuses
// every grant until `fencepub authority recover` (DESIGN.md invariant 3).
// Without AcquireRequest.Wait the listing for a marker above is sent with
// the lease grant, before the grant transaction, so it costs no round trip
// of its own (DESIGN.md "Rollback detection").
//
// Every etcd request is sent again while etcd cannot serve it (no answer
// within Config.RequestTimeout, for the lease grant and the grant
// transaction at most TTL/3; no leader; a leader change), within ctx's
// deadline or Config.RetryTimeout (DESIGN.md invariant 12); a re-sent grant
// transaction never mints twice, because the request record guards it. A
// deadline that ends a wait is an ErrHeld error naming the holder and its
// expected expiry that also wraps ctx's error. ErrLeaseLost means the grant
// was superseded before it could be confirmed: the caller was paused past
// its TTL.
//
// # How a term ends
//
// Release's first transaction checks that the holder key's CreateRevision is
// Grant.HolderRevision, that it is attached to Grant.LeaseID and that the
// grant record of Grant.Generation names Grant.Owner in Grant.Epoch, so one
// owner can never drop another's lease, and reads the resource's pointer and
// seal at the same revision. Then, for an ordinary resource, the seal is
// raised over the term in a transaction of its own that requires the grant
// record unchanged: every object the term left above the pointer is
// unpublishable from then on, so GC collects it at its next pass instead of
// after the abandon period. Reserved resources ('_', the GC lease) have no
// seal and get none. Last, the lease is revoked, which deletes the holder
// key with it. Revoking the grant's own lease can only ever remove its
// holder, whatever happened in between, so the check and the revoke need not
// be one transaction, and the holder never outlives its lease (Renew relies
// on it). The grant record stays: it is durable (DESIGN.md "etcd layout").
// The seal is raised even when the lease is already gone: the grant record
// proves the term is the caller's, and a caller that releases publishes no
// more.
//
// # Why a live lease is a live holder
//
// Renew is one lease keepalive, with no read of the holder key. The holder
// key is attached to the grant's lease and is only ever removed together
// with it — Release revokes the lease, etcd expires it, recover revokes
// every holder's lease when the epoch moves — and the grant transaction
// never overwrites a present holder, so "the grant's lease is alive" means
// "the grant still holds the resource".
//
// # How recover works
//
// `fencepub authority recover`, in order:
//
//  1. reads etcd's epoch, deployment and rollback flag, checks the bucket's
//     ownership marker names the same deployment, and reads every pointer.
//     On an etcd with no epoch for the domain it refuses a bucket that holds
//     anything under the root (another history: DESIGN.md invariant 9)
//     unless --from-bucket, which takes the bucket over: it
//     adopts the marker's deployment id and, with no pointers in etcd,
//     quarantines every object found (step 4 records the zero pointer for
//     each epoch). FromBucket on an etcd that has an epoch is refused
//     (ErrInitialized);
//  2. scans the bucket: epoch markers, grant markers and object keys;
//  3. reserves the new epoch, 1 + the highest epoch of all of those and
//     etcd's, create-only in the bucket (the next free number if taken);
//  4. records each resource's restored pointer under
//     restored/<resource>/<epoch> (create-only) for the old epoch and for
//     every epoch of an object above that pointer, so GC quarantines those
//     objects (the zero pointer for a resource the restore left without one);
//  5. sets the epoch in one transaction that requires it unchanged, clears
//     the rollback flag and records the new and the old epoch as epochs this
//     etcd issued (GC deletes older-epoch objects only of recorded epochs);
//     from here every publish and grant of an older epoch is rejected;
//  6. revokes the lease of every holder created before that transaction;
//  7. reports the objects above each restored pointer.
//
// The bucket listings of steps 1 and 2 are not retried. A corrupt epoch key
// is repaired the same way (the report's corrupt_epoch); any other corrupt
// value it needs (a pointer) stops it before it changes anything. A user
// whose etcd role may not write the epoch key gets etcd's permission denied
// before anything is written (DESIGN.md "Security").
//
// # How a Session counts its deadline
//
// A Session renews with Renew (a keepalive, which is a holder check: "Why
// a live lease is a live holder"). A keepalive that gets no answer within
// TTL/6 (or Config.RequestTimeout, if shorter) or that etcd cannot serve is
// sent again until the deadline, so a stalled member costs one attempt, not
// the lease. The local deadline is counted
// from when each renew request was sent, not when its answer arrived: etcd
// restarts the TTL when it processes the keepalive, which is after the send,
// so Session.Deadline is never later than the earliest moment etcd may
// expire the lease (assuming the two clocks advance at the same rate; leader
// changes only extend leases). Lost closes a margin (TTL/20, at most 1 s)
// before that deadline if no renewal confirmed a later one, or at once when
// a renewal reports ErrLeaseLost.
//
// # How a domain is initialised
//
// The first Acquire or AcquireGroup of a domain, or `fencepub init`,
// initialises it. It reads etcd first, so an unreachable etcd writes
// nothing. It checks that the store honours create-only writes (a probe
// key), then requires the bucket to hold nothing under the domain's root: it
// claims etcd's deployment key with a fresh id (or the id another init of
// this etcd claimed), writes the bucket's ownership marker create-only,
// reserves epoch 1 + the highest epoch marker by writing that marker
// create-only, then creates the epoch key and the epoch's record in one
// transaction that requires the epoch key absent. A bucket that already
// holds an ownership marker of another deployment, epoch or grant markers,
// or objects belongs to another etcd history: initialising refuses it with
// ErrForeignHistory.
package authority
