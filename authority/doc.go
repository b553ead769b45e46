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
//     back makes every grant fail with ErrRolledBack until Recover moves the
//     domain to a new epoch (`fencepub authority recover`, docs/operations.md runbook).
//   - Init refuses a bucket that holds another etcd history
//     (ErrForeignHistory); Recover with FromBucket takes it over.
//   - Errors are this package's sentinels and fencepub's shared ones
//     (fencepub.ErrUnavailable: retry later), tested with errors.Is.
//
// DESIGN.md has the transactions, keys and markers.
package authority
