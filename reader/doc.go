// Package reader follows a resource's published pointer and serves its
// object (DESIGN.md "Reading", invariant 6): readers see only published
// objects, never a version lower than one they already saw, and only bytes
// that match the pointer's sha256.
//
// Current reads the pointer (linearizable by default; concurrent calls on one
// Reader share a read sent after each of them began). Open reads the
// pointer, GETs its object with If-Match on the pointer's ETag (one GET,
// overlapping the pointer read: "How Open reads") and verifies sha256 and
// size while the caller reads: a mismatch is an error at the end of the
// body, so callers must read to EOF and check the error (and Close) before
// trusting or exposing the bytes — write them to a temporary file and
// rename it on success, for example. Watch follows the pointer through an etcd watch starting at the
// header revision of a Get plus one, and re-syncs with a fresh Get after
// compaction; a service that follows it opens the pointer it holds with
// OpenPointer (no etcd read per request: one store round trip). A Reader
// never returns a version below one it returned before: if etcd's history
// went back, it says so (ErrWentBack).
//
// History lists a resource's retained versions and OpenVersion reads one,
// verified as Open verifies the current one; Resources lists the domain's
// resources and State reads one resource's pointer and seal. A resource
// never granted in the domain is ErrUnknownResource, told apart from one
// granted and not yet published (ErrNotPublished).
//
// An object may be collected by GC once it has been superseded and its
// retention passed; Open then re-reads the pointer and retries with the newer
// object (bounded). A pointer whose object is missing while it is still the
// pointer is reported as ErrObjectMissing: that is data loss, never hidden.
//
// # How Open reads
//
// When the Reader opened an object before, Open sends the GET of that object
// while it reads the pointer (speculation: the pointer rarely moves between
// reads) and returns that body only if the pointer read names the same
// version and object; otherwise it drops the speculative GET and opens what
// the pointer names. Either way the bytes are those of the pointer the read
// returned (linearizable by default), so an Open costs about the longer of
// the two round trips instead of their sum. The first Open of a Reader reads
// the pointer, then GETs its object.
//
// # Listings
//
// History reads the resource's history entries at one etcd revision, and
// Resources reads the domain's pointers, then its seals, at one etcd
// revision; both ask etcd for 1000 keys per read, so a listing costs one
// round trip per 1000 entries.
package reader
