// Package publisher publishes the results of batch workers as immutable
// objects in an S3-compatible store, made visible only by one fenced etcd
// transaction per publish (DESIGN.md "Publish, in one round trip to etcd").
//
// Contracts (DESIGN.md invariants 1, 4, 5, 8 and 11):
//
//   - A Publisher is bound to one grant (a Term). Each Publish writes its
//     body create-only to a fresh key and then runs one transaction that
//     moves the pointer only above the current pointer and seal, in the
//     current epoch, for a fence whose grant record names the owner.
//   - Every outcome is one of applied, duplicate, conflict, stale (with a
//     Reason) and unknown; nothing is lost silently. A lost answer is
//     re-sent unchanged, so a publish applies at most once; Client.Resolve
//     settles an unknown outcome for good.
//   - Newer state wins: a version below the pointer is stale. For
//     operations where every increment counts, Term.Contiguous also
//     requires the previous seq; a publish after a gap is stale ("gap").
//   - The same idempotency key and request digest get duplicate in any term;
//     the same key with another digest gets conflict. Op records live for
//     GC's retention window (default 7 days).
//   - The publisher never deletes objects; GC collects the orphans.
//     Client.RestoreLost republishes what an etcd restore lost.
//
// A holder publishing a stream uses Publisher.Pipeline: it writes the
// objects of up to depth operations while the transaction of the oldest
// is in flight, and sends the transactions one at a time in seq order,
// each exactly Publish's. Every submitted operation gets its own answer; a
// stale or unknown one stops the pipeline, and the operations behind it
// are reported not sent (ErrPipelineStopped), never dropped (DESIGN.md
// "Pipelined publishing").
//
// Strict mode (Term.Strict) also refuses a publish once etcd has expired
// the grant's lease, with etcd's timing; it is not wall-clock revocation.
package publisher
