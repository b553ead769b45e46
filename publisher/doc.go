// Package publisher publishes the results of batch workers as immutable
// objects in an S3-compatible store, made visible only by one fenced etcd
// transaction per publish (DESIGN.md "Publish, in one round trip to etcd";
// protocol source, §Term and §Resources).
//
// # Protocol
//
// A Publisher is bound to one grant of the authority (a Term: resource,
// owner, epoch, fence). Each Publish
//
//  1. streams the body create-only (If-None-Match: *) to a fresh key
//     "<prefix>/<domain>/<resource>/<epoch>-<fence>-<seq>-<nonce>", computing
//     its sha256 on the way: a body of known length (Operation.Size, a
//     file, an in-memory reader) in one streamed PUT holding none of it,
//     any other body in Config.PartSize parts, filling the next part while
//     the current one is sent (two parts in memory at most);
//  2. runs one etcd transaction. If: no op record for the idempotency key,
//     pointer < version, seal < version, epoch == the version's epoch, the
//     grant record of the fence names the owner in that epoch [strict mode:
//     the grant's holder key is unchanged; contiguous mode: the pointer is at
//     seq-1 of the term]. Then: the pointer, the op record
//     and a history entry. Else: read them all and classify.
//
// Every outcome is one of applied, duplicate, conflict, stale (reason
// pointer, seal, epoch, grant, lease or gap) and unknown; nothing is lost
// silently (DESIGN.md invariant 8). A transaction whose answer was lost is
// re-sent unchanged — same version, key and digest — so it applies at most
// once; if no answer comes before the deadline the outcome is unknown and
// Client.Resolve settles it for good by finding the op record or raising the
// seal over the version.
//
// # Newer state wins
//
// Versions (epoch, fence, seq) are compared lexicographically and a publish
// is accepted only above the pointer. That is "newer state wins": if seq 2
// is committed before seq 1 arrives, seq 1 is stale and its content is never
// published, and before a newer fence's publish is durably accepted an older
// fence may still publish (fencing allows it; protocol source, §Timeline,
// "key limitation"). Use it
// for state that supersedes itself (a snapshot, a model, a report). When
// every increment must take effect, use Term.Contiguous: a publish with seq
// s > 1 then also requires the pointer to be exactly at seq s-1 of its term,
// and one that arrives after a gap is stale with reason "gap", to be retried
// in order once the missing seq is published. A lost seq is never reported
// as success.
//
// # Idempotency
//
// Every logical operation carries a stable idempotency key; its request
// digest is sha256 over the body's sha256, content type and user metadata
// (never version, owner, attempt or time). The same key and digest, retried
// in any term, gets duplicate with the original version and object, and does
// not move the pointer; the same key with another digest gets conflict, never
// someone else's success. Op records are removed by GC after the retention
// window (default 7 days): a retry after that window is a new operation.
//
// # What it does not do
//
// The publisher never deletes objects: stale, conflicting and abandoned
// attempts leave orphans, which GC collects. Strict mode rejects a publish
// once etcd has expired or revoked the grant's lease, with etcd's timing
// (leader changes restart lease TTLs); it is not wall-clock revocation.
// Without strict mode the resource alone arbitrates: a fenced publish of an
// expired grant is accepted until a newer fence publishes, which is safe
// (the lease only saves duplicate work). Side effects outside the pointer are
// not made exactly-once by any of this.
package publisher
