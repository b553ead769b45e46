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
//     operations where every increment counts, Term.WithContiguous also
//     requires the previous seq; a publish after a gap is stale ("gap").
//   - The same idempotency key and request digest get duplicate in any term;
//     the same key with another digest gets conflict. Op records live for
//     GC's retention window (default 7 days).
//   - The publisher never deletes objects; GC collects the orphans.
//     `fencepub authority recover --republish` republishes what an etcd
//     restore lost.
//
// A holder publishing a stream uses Publisher.Pipeline: it writes the
// objects of up to depth operations while the transaction of the oldest
// is in flight, and sends the transactions one at a time in seq order,
// each exactly Publish's. Every submitted operation gets its own answer; a
// stale or unknown one stops the pipeline, and the operations behind it
// are reported not sent (ErrPipelineStopped), never dropped (DESIGN.md
// "Pipelined publishing"). Pipeline.SubmitDataset pipelines dataset
// versions the same way; with BaseCurrent each one reuses the files of the
// version submitted before it, and applies only over exactly that version.
//
// Strict mode (GrantTerm's strict) also refuses a publish once etcd has
// expired the grant's lease, with etcd's timing; it is not wall-clock
// revocation.
//
// # Resolving an attempt
//
// Client.Resolve reads the op record of the attempt's idempotency key in
// one transaction:
//
//   - the record exists and names the attempt (its object key is
//     AttemptID.ObjectKey, or else its digest is AttemptID.Digest, the same
//     logical operation): Applied when it is at the attempt's version, else
//     Duplicate;
//   - it exists and names neither: another attempt under the same key took
//     effect, and this one never will: Conflict. Whenever the record exists,
//     the Result's Digest, Version and Object are its (the winner's);
//   - it is absent: the seal is raised to the attempt's version unless it is
//     already at or above it, in the same transaction that saw the record
//     absent, so the attempt never applies: Stale with reason "seal". A
//     retired resource's seal keeps its decommission reason and time (its
//     readers still get reader.ErrDecommissioned); the transaction then also
//     requires the pointer and the seal unchanged since Resolve read them;
//   - it is absent and the version's epoch is older than the domain's: no
//     publish of it can apply any more: Stale with reason "epoch".
//
// The same transaction requires that the version could have been carried by
// a real publish (its epoch at most the domain's, its fence at most the
// resource's durable generation); otherwise nothing is written and Resolve
// returns fencepub.ErrInvalid, since a seal never goes down and sealing a
// future version would refuse every later grant's publishes. Resolve seals
// every version up to the one passed, so a seq from the future would still
// block that fence's later seqs.
//
// A Stale answer is then also written to the bucket: a create-only settled
// marker of the version, because the seal is lost with etcd and
// the republish after a restore must never republish the attempt
// (DESIGN.md invariant 8). When that write fails, Resolve returns the Stale
// Result with fencepub.ErrUnavailable (fencepub.ErrInvalid when the store
// refused the write) instead of ErrStale; calling it again answers the same
// and writes the marker.
//
// # Publishing a dataset
//
// Publisher.PublishDataset first reads the base: the current pointer and,
// when that is a dataset, its manifest index. Then it streams the files in
// path order through Dataset.Parallel uploads, each create-only under the
// version's key and retried per file (Dataset.FileSends), while the manifest
// is written in order, one page at a time: memory holds about one page of
// entries and the files in flight, whatever the file count. A file whose
// path, size, sha256 and content type equal a base entry is not uploaded
// (its sha256 is computed by reading it once). The request digest covers
// the entries' paths, sizes, sha256 and content types, never object keys,
// so a retried job with the same output is Duplicate. With a base, the
// transaction also requires the pointer to be the base exactly. The
// AttemptID of an unknown outcome names the manifest key and the request
// digest.
//
// Errors before the transaction was sent publish nothing and give the seq
// back (the files written are orphans GC removes): fencepub.ErrInvalid (a
// field; a path that is not clean and relative, out of order, given twice or
// inside another file's), ErrBody (a file's Open or read failed, or its
// length is not its Size), an error Dataset.Files yielded, the store's
// errors, fencepub.ErrCorruptState (the base's manifest does not match its
// pointer), fencepub.ErrCorruptRecord and fencepub.ErrNotInitialized.
// Dataset.Progress runs on the calling goroutine.
//
// # Dataset paths
//
// A file's path in a dataset is relative and '/'-separated: 1 to 768 bytes
// of valid UTF-8 in Unicode normal form C (so no two paths collide after
// normalisation), segments of 1 to 255 bytes, none "." or "..", and no
// control byte (below 0x20, or 0x7f) or backslash anywhere. Paths sort in
// byte order with '/' below every other byte, the order a directory walk
// visits files in: "a" before "a/b" before "a-c". A manifest holds its
// entries in that order, so a directory streams into it with memory bounded
// by one page.
//
// # Publishing a directory
//
// DirFiles walks a directory in path order. It refuses, with
// fencepub.ErrInvalid naming the path: a symbolic link (unless
// DirOptions.FollowSymlinks, which yields the regular file a link points
// to; a link to a directory, or one that cannot be followed, such as a loop
// or a missing target, is refused either way); a special file (device,
// pipe, socket); a path a dataset cannot hold (Dataset paths). The
// directory itself may be a symbolic link. A File's Open refuses a file that
// is no longer regular when opened (replaced since the walk by a pipe, a
// device or, unless followed, a symbolic link) instead of blocking on it or
// reading elsewhere. Ranging over DirFiles once before acquiring a grant
// checks a directory first, as `fencepub publish --dir` does (docs/datasets.md).
//
// # Restoring lost publishes
//
// For each resource, `fencepub authority recover --republish` acquires a grant (waiting up to a
// minute for the holder), copies the object to a fresh key of the grant's
// next version and publishes it there, then releases the grant with its own
// bounded context. The idempotency key recover-<old version, 62-byte
// encoding> makes a second run a duplicate. An object of epoch E written
// after the marker of epoch E+1 was reserved is an attempt rejected by the
// epoch check (a worker that reached the store after recover), never a lost
// publish, so it is skipped; both times are the object store's own clock.
// So is every object at a version with a settled marker: an attempt Resolve
// settled as never applied, which must stay so although etcd's seal was lost
// (DESIGN.md invariant 8). The newest object above a restored pointer is
// normally a publish the restore lost, but it may also be an attempt that
// failed for another reason: hence the dry run first. A resource's failure
// (listing its settled markers, acquire, bind or republish) does not stop
// the others.
//
// # What Publish gives back
//
// A body whose Read blocks (a stalled pipe) does not hold Publisher.Publish
// past its context: such bodies are read on a goroutine of their own, which
// ends when the body's Read returns. When Publish fails without an outcome,
// the seq is given back unless the transaction was re-sent (an earlier send
// may still be on its way), so the next publish takes it and a contiguous
// term sees no gap (DESIGN.md "Publish" step 6). A re-send that finds the
// resource gone (etcd restored or replaced since an earlier send) is
// ErrUnknown, not fencepub.ErrNotInitialized.
package publisher
