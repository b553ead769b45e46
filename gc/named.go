package gc

import (
	"cmp"
	"hash/maphash"
	"slices"
)

// namedSet is the set of files the retained dataset manifests reuse from
// older versions (state.Named), each with the index in state.NamedBy of
// the first version naming it. It holds a 64-bit hash of each key, not
// the key: 16 bytes a file, sorted after each manifest and searched by
// bisection, so a pass over a million reused files holds about 16 MB,
// not their keys.
//
// The hash is maphash with a seed drawn for each set, so keys cannot be
// chosen to collide. A collision can only keep an object: a key that is
// not named but hashes as a named one is kept as named (its reason then
// names a version whose manifest does not name it), and two named keys
// that collide share the first one's version; no named key is ever
// missed, so a named file is never deleted. With n named files and m
// listed keys, the chance that any listed key is kept this way is at most
// n·m/2^64 a pass (below 10^-7 for a million of each).
type namedSet struct {
	seed maphash.Seed
	// es[:sealed] is sorted by hash, one entry per hash; es[sealed:] are
	// the entries added since, none of a hash in es[:sealed].
	es     []namedEntry
	sealed int
}

type namedEntry struct {
	hash uint64
	ref  int32
}

// newNamedSet returns an empty set with a fresh random seed.
func newNamedSet() *namedSet { return &namedSet{seed: maphash.MakeSeed()} }

// add records key as named by ref, unless a sealed entry holds it. Refs
// are added in increasing order of preference: the set keeps the
// smallest for each key. Sealing after each manifest keeps a file that
// several manifests name from being added again by each.
func (n *namedSet) add(key string, ref int32) {
	h := maphash.String(n.seed, key)
	if _, ok := n.find(h); ok {
		return
	}
	n.es = append(n.es, namedEntry{h, ref})
}

// seal sorts the set and keeps the smallest ref of each hash; lookup
// sees only what was added before the last seal.
func (n *namedSet) seal() {
	slices.SortFunc(n.es, func(a, b namedEntry) int {
		return cmp.Or(cmp.Compare(a.hash, b.hash), cmp.Compare(a.ref, b.ref))
	})
	n.es = slices.CompactFunc(n.es, func(a, b namedEntry) bool { return a.hash == b.hash })
	if cap(n.es) > len(n.es)+len(n.es)/4 {
		n.es = slices.Clone(n.es) // give back what appending and duplicates left over
	}
	n.sealed = len(n.es)
}

// find returns the sealed entry of hash h.
func (n *namedSet) find(h uint64) (namedEntry, bool) {
	es := n.es[:n.sealed]
	i, ok := slices.BinarySearchFunc(es, h, func(e namedEntry, h uint64) int { return cmp.Compare(e.hash, h) })
	if !ok {
		return namedEntry{}, false
	}
	return es[i], true
}

// lookup returns the ref of key, or false when key is not in the set as
// last sealed. A nil set holds nothing.
func (n *namedSet) lookup(key string) (int32, bool) {
	if n == nil || n.sealed == 0 {
		return 0, false
	}
	e, ok := n.find(maphash.String(n.seed, key))
	return e.ref, ok
}
