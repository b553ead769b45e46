// Package gc is fencepub's garbage collector: it removes the objects that can
// never be published or are no longer retained, aborts the multipart uploads
// of the same kind, and keeps the domain's etcd records bounded
// (DESIGN.md "Garbage collection", invariant 7).
//
// Decisions come from fences, not only from clocks. For each resource the
// collector reads the epoch, pointer, seal, holder, restored-pointer records
// and history at ONE etcd revision (State), then streams the object listing
// under the resource's prefix and classifies every key (Classify):
//
//   - published: the key the pointer names. Kept.
//   - retained: named by one of the last Policy.Retain history entries, or
//     superseded less than Policy.Grace + Policy.ClockSkew ago on the domain
//     clock (version k was superseded when version k+1's history entry was
//     written, at its ModRevision). Kept.
//   - unpublishable: version <= max(pointer, seal), or of an older epoch.
//     Deleted: the publish transaction can never accept it again.
//   - quarantined: an old-epoch object above the pointer `recover` recorded
//     for that epoch; it may be the only copy of a publish the restore lost.
//     Kept and reported.
//   - in_flight: current epoch, above max(pointer, seal), and its grant is
//     live, its fence is newer than the snapshot, or it is younger than
//     Policy.AbandonAfter. Kept.
//   - abandoned: in flight otherwise. The seal is raised to the highest
//     abandoned version in one transaction that requires the pointer, the
//     seal and the epoch unchanged since the snapshot (so the seal only
//     rises, whatever other collectors do), and only then are they deleted.
//     A worker that resumes later gets stale (reason seal). An abandoned
//     object that is not below every kept in-flight object is kept, so the
//     seal never covers an object this pass keeps.
//   - foreign: does not parse as an object key of the resource. Never
//     deleted.
//
// Reading metadata before listing is safe because versions are fenced:
// whatever is published after the snapshot has a version above the
// snapshot's pointer and is kept as in flight. A key missing from a listing
// never causes a deletion, and every deletion is justified on its own by
// durable, monotonic state (pointer, seal and epoch only rise), so several
// collectors may run at once; the Daemon's lease only saves duplicate work.
//
// Incomplete multipart uploads under the resource's prefix follow the same
// rules (an upload of a live grant is in flight however old) and are
// aborted instead of deleted; abandoned uploads are aborted without a seal
// (aborting never removes an object).
//
// After a resource's objects, its etcd records are pruned in transactions
// (each deletion guarded by its own compare): expired history entries, op
// records older than Config.OpRetention, acquire request records (through
// authority.PruneRequests) and grant records whose fence can no longer
// publish. The epoch, generation, pointer and seal keys are never deleted.
//
// Ages come from one clock that publishers do not control (clock.go,
// DESIGN.md "Ages come from one clock"): every pass advances a domain clock
// kept in etcd by min(its own wall-clock delta, the elapsed time of a
// witness lease by etcd's timer) and checkpoints (clock time, revision); a
// record's age is that of its ModRevision on this clock. Ages are lower
// bounds of real elapsed time; a publisher's clock never enters, and a
// collector clock jumping ahead cannot shorten any record's life. Only the
// abandon period compares an object's LastModified (the store's clock) with
// the collector's clock, plus Policy.ClockSkew.
package gc
