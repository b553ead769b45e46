// Package lab is an exhaustive event model of fencepub's lease/fence
// protocol and of three deliberately broken variants of it (no-fence,
// split-authority, rollback-issuer), of dataset publishes with reuse and GC
// (defect variant no-base-compare) and of a two-member group publish read at
// one revision (defect variant split-group). It is the model behind
// `fencepub lab` and the reference that a replay against real etcd and MinIO
// (package replay) compares with. Source: the protocol source, §Lab
// (docs/protocol-source.en.md), and docs/DESIGN.md invariants 1–3, 5, 14
// and 15.
//
// Contracts:
//
//   - Every change is a discrete [Step] (acquire, mint, pause, resume, lease
//     expiry, authority recovery, write, base read, GC pass, group read);
//     each grant and each resource transaction is one indivisible
//     transition.
//   - The resource applies a write only if its (fence, op_seq) is above the
//     committed pair, after the idempotency lookup (same key and params:
//     duplicate, read-only; other params: conflict).
//   - Two properties are checked on every transition:
//     [RevokedGenerationOverwrite] (a write of a grant older than one the
//     resource already committed; grant ordinals, not fence numbers, so two
//     grants sharing a number are caught) and [UnauthorizedAccept] (a write
//     whose token is bound to no valid grant). Cases dataset and group add
//     [MissingFile] (a published manifest names a file GC deleted) and
//     [TornRead] (a reader sees group members of two group publishes).
//   - [NewScenario] enumerates every interleaving of a declared partial
//     order; [Explore] searches N clients with W writes each, depth first
//     with state hashing, and stops at the first violation.
//
// The model has no network, clocks, storage faults or epochs, and does not
// model the publish transaction's grant-record compare. internal/lab/README.md
// explains each scenario's interleaving count and how it relates to the
// protocol source's.
package lab
