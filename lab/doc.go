// Package lab is an exhaustive event model of fencepub's lease/fence protocol
// and of three deliberately broken variants of it. It is the model behind
// `fencepub lab` and the reference a replay against the real etcd/MinIO
// implementation compares with. Source: the seed's section
// "可运行实验：事件模型与三种故意缺陷" (docs/protocol-source.zh.txt)
// and docs/DESIGN.md "Invariants" 1–3 and 5.
//
// # Model
//
// Actors are clients ("A", "B", …) and the authority ([Authority]). There is
// one authority domain and one resource. The authority's issuer starts at a
// configurable value (40 in the seed). Every change is a discrete [Step]:
// acquire, mint, pause, resume, lease expiry, authority recovery and write.
// Each authority grant and each resource transaction is one indivisible
// transition; only the order of steps varies.
//
// The resource compares the incoming (fence, op_seq) with the committed pair
// lexicographically and applies the write only if it is larger (the seed's
// "一个任期多次写" section). Before that it looks up the business key's
// idempotency record: same key and same params return `duplicate` with no
// effect; same key and other params return `conflict` (DESIGN invariant 5, and
// DESIGN "Publish" step 2 for the classification order).
//
// # Properties
//
// The model knows which grant each token belongs to; the resource does not (it
// sees only the number). Each grant gets an ordinal in grant order. Two
// properties are checked on every transition of every explored history:
//
//   - [RevokedGenerationOverwrite]: a write is applied whose grant is older
//     than the grant of a write the resource already committed (DESIGN
//     invariant 1). Comparing grant ordinals, not fence numbers, is what
//     catches two grants that share a number. A write from an old grant that
//     lands before the newer grant's first commit is allowed; fencing does not
//     forbid it (seed, "关键限定" and "第二问").
//   - [UnauthorizedAccept]: a write is applied whose token is bound to no
//     grant: it was minted while its holder's grant was no longer the valid
//     lease (DESIGN invariant 2).
//
// # Scenarios and their counts
//
// [NewScenario] builds the seed's scenarios as a declared partial order: a
// fixed prefix, then per-actor threads whose steps keep their program order
// but interleave freely with the other threads. [Scenario.Interleavings]
// enumerates every linearization. For case fencing the prefix is
// acquire A → A pauses → the lease expires → the authority recovers → acquire
// B; the threads are A: resume, write and B: write. That gives the seed's
// three interleavings for correct, no-fence and rollback-issuer.
//
// A's late write carries op_seq 2 and B's first write op_seq 1. With distinct
// fences the seq decides nothing. When two grants share a fence
// (rollback-issuer), the old term's larger op_seq is what lets it overwrite B.
// That is the seed's case "旧 A 的较大 op_seq 甚至可能覆盖 B". With equal seqs
// the resource would reject A and this bounded scenario would not show the
// defect.
//
// In split-authority the grant carries no number. Each worker mints from an
// independent counter after its grant, so A holds 41 and B holds 42. After
// resuming, A still believes it holds the lease and mints again to "catch up"
// (forbidden by DESIGN invariant 2). It gets issuer+3 (43 for issuer 40, 10
// for issuer 7). Thread A is resume, mint, write, so this model explores four
// interleavings, and all four violate unauthorized_accept. The seed counts two
// because it also orders A's late mint after B's commit ("B 获授权并取 42、提交；
// A 恢复后才调用独立自增服务取得 43"). Nothing in the protocol forces that order,
// so this model does not declare it. The seed's two histories are
// interleavings 3 and 4 here; in the other two, A mints 43 before B commits,
// and either A's 43 is applied first and B's legitimate 42 is rejected as
// stale, or both are applied.
//
// Case operations is one fixed history in the correct protocol: seq 1 and
// seq 2 in A's term, then in B's later term a retry of the same key, the same
// key with other params, and finally a late write of A's term with a new key
// and the old seq 1. The expected outcomes are applied, applied, duplicate,
// conflict and stale, with exactly two effects. A duplicate is read-only: it
// does not raise the committed fence (seed, end of "一个任期多次写").
//
// # Beyond the seed
//
// [Explore] checks N clients with W writes each by depth-first search over
// the transition system, with state hashing. It stops at the first violation,
// and reports the number of states explored. It generates only the steps that
// can change an outcome (see its doc).
//
// # What it does not show
//
// The model covers only the declared finite orders and bounds. It has no
// network, no clocks, no storage faults and no real etcd or MinIO. It does not
// model epochs: the correct variant recovers from durable state, which is the
// property DESIGN's epochs exist to keep across an etcd restore (invariant 3).
// The resource here compares (fence, op_seq) only, as in the seed. DESIGN's
// extra compare of the grant record in the publish transaction is not modelled.
package lab
