// Package gc is fencepub's garbage collector: it deletes the objects that
// can never be published or are no longer retained, aborts the multipart
// uploads of the same kind, and keeps the domain's etcd records bounded
// (DESIGN.md "Garbage collection", invariants 7, 10 and 13).
//
// Contracts:
//
//   - Decisions come from fences, not only from clocks: for each resource a
//     pass reads the epoch, pointer, seal, holder and history at one etcd
//     revision, then classifies every listed key as published, retained,
//     unpublishable, quarantined, in_flight, abandoned or foreign (DESIGN.md
//     for the rules; Report.ByDecision counts them). Only unpublishable and
//     abandoned keys are deleted; abandoned ones only after a seal raised
//     over them (an abandoned upload is aborted without one: it can never
//     complete), and the seal stays below every in-flight object or upload
//     the pass keeps. A released term's objects are unpublishable at once:
//     authority Release seals the term (DESIGN.md "Leftovers of finished
//     work"), so only the leftovers of a term that ended without a release
//     wait for the abandon period.
//   - Every deletion is justified by durable, monotonic state (pointer, seal
//     and epoch only rise), so several collectors may run at once; the
//     lease of `fencepub gc daemon` only saves duplicate work. A key missing
//     from a listing never causes a deletion. For the same reason one pass
//     collects many resources at once, each still snapshot first, then
//     listing: an All pass goes by windows of 64 resources in object-key
//     order (4 at once), reading their snapshots in transactions of 12 and
//     then listing the window's key range ONCE; named resources go 8 at
//     once, each with its own listing. At most Config.DeleteConcurrency
//     multi-object deletes are in flight in all.
//   - Ages come from one domain clock kept in etcd (DESIGN.md "Ages come from
//     one clock"): a publisher's clock never shortens a record's life.
//   - Nothing is deleted under a prefix whose ownership marker names another
//     deployment (authority.ErrForeignDeployment, ErrNoOwnership).
//
// # A pass
//
// Collector.Run first checks that the bucket's ownership marker names etcd's
// deployment, then advances the domain clock that every record age is
// measured on (a dry run only reads it; DESIGN.md "Ages come from one
// clock"), warns when bucket versioning or lifecycle rules are on, lists the
// bucket's incomplete multipart uploads once, then collects the resources:
// with RunOptions.All, in windows of 64 in object-key order, each window's
// snapshots then one listing of its key range, 4 windows at once; named
// resources 8 at once, each with its own listing. The order of
// Report.Errors across resources is not fixed.
// ErrIncomplete wraps the per-resource errors joined, so errors.Is sees
// each.
//
// # Decommissioning
//
// `fencepub resource delete` raises the seal instead of deleting the
// pointer. Its transaction requires the epoch, generation, pointer and seal
// unchanged since it read them (and, unless forced, no holder), and records
// the version it seals as the seal's Retired. GC then deletes the resource's
// objects (the published and retained ones after the reader grace) and, at
// its next pass, every op record at or below Retired whatever its age, so
// the resource's idempotency keys end with it; the generation counter,
// pointer and seal stay, so a later grant (generation+1) re-creates the
// resource above them, with no keys. The seal never goes down: when it is
// already at or above the target, nothing is written, except that a seal at
// the target from authority.Authority.Release (which seals each finished
// term at (epoch, fence, max)) is rewritten with the decommission reason, at
// the same version.
//
// # Probes and metrics
//
// The /healthz and /readyz of `fencepub gc daemon` answer the daemon's
// state as JSON: owner, running, leader, standby, generation, passes,
// last_pass, last_success and last_error ("" after a pass without errors).
// /healthz (liveness) is 200 while the daemon runs, else 503; it never
// contacts etcd or the store, so an etcd outage does not restart the
// daemon, and it says nothing about readiness. /readyz (readiness) adds the
// fields ready and reason, which say why not. It is 503 when etcd or the
// object store does not answer (one linearizable etcd read and one bucket
// call, bounded and cached), when this replica leads and its last pass
// without errors is older than two cycles (a cycle is the interval plus that
// pass's duration), or while the replica has not settled into a role
// (campaigning, or its first pass as leader not finished); it is 200 for a
// fresh leader and for a standby (reason "standby").
//
// Metrics, registered on the registry NewMetrics is given:
//
//   - fencepub_gc_deleted_objects_total, fencepub_gc_deleted_bytes_total:
//     objects (and their bytes) real passes deleted;
//   - fencepub_gc_kept_objects{decision}: objects the last complete pass
//     kept, by decision (published, retained, in_flight, quarantined,
//     foreign); a gauge, set per pass;
//   - fencepub_gc_quarantined_objects: objects the last complete pass
//     quarantined (old-epoch objects that may be a lost publish's only copy,
//     DESIGN.md "Garbage collection"); alert when it is above 0;
//   - fencepub_gc_pass_duration_seconds: wall time of each pass;
//   - fencepub_gc_last_success_timestamp_seconds: Unix time of the last pass
//     that finished without errors;
//   - fencepub_gc_last_success_duration_seconds: wall time of that pass, so an
//     alert can allow for passes longer than the interval;
//   - fencepub_gc_passes_total{result}: passes by result ("ok", "error"); a
//     pass cut short by its context (shutdown, lost lease) is not counted;
//   - fencepub_gc_records_deleted_total{kind}: etcd records pruned (history,
//     ops, requests, grants);
//   - fencepub_gc_leader: 1 while this daemon holds the GC lease.
package gc
