package layout

import (
	"errors"
	"strings"
	"testing"
)

// TestNamespacesNeverNest checks, over every pair of namespaces
// built from a set of components that includes the names of a domain's key
// subtrees, that no key of one namespace falls under a range prefix of
// another (the prefixes GC prunes and recover scans). Before the fix,
// prefix "p/d/history" with domain "r" was accepted: its root is the history
// prefix of resource "r" of domain "d" under "p", so that domain's history
// pruning deleted the nested domain's epoch, generation, pointer and seal
// keys — a generation counter reset, the bug invariant 3 forbids.
func TestNamespacesNeverNest(t *testing.T) {
	parts := []string{"p", "d", "r", "authority", "pointers", "seals", "ops", "history", "restored", "epochs", "_fencepub", "epoch", "x"}
	var nss []Namespace
	for _, a := range parts {
		for _, b := range parts {
			for _, c := range parts {
				for _, prefix := range []string{a, a + "/" + b} {
					if ns, err := NewNamespace(prefix, c); err == nil {
						nss = append(nss, ns)
					} else if !errors.Is(err, ErrInvalidName) {
						t.Fatal(err)
					}
				}
			}
		}
	}
	res := []string{"r", "x", "epoch", "history"}
	keysOf := func(n Namespace) []string {
		out := []string{n.EpochKey(), n.DeploymentKey(), n.EpochRecord(1), n.OwnershipObject(), n.EpochMarker(1)}
		for _, r := range res {
			v := Version{Epoch: 1, Fence: 2, Seq: 3}
			out = append(out, n.GenerationKey(r), n.HolderKey(r), n.GrantKey(r, 2), n.RequestKey(r, "q"),
				n.PointerKey(r), n.SealKey(r), n.OpKey(r, "k"), n.HistoryKey(r, v), n.RestoredKey(r, 1),
				n.GrantMarker(r, 1, 2))
		}
		return out
	}
	rangesOf := func(n Namespace) []string {
		out := []string{n.AuthorityPrefix(), n.PointersPrefix(), n.EpochRecordsPrefix(), n.MetaPrefix(), n.EpochMarkersPrefix()}
		for _, r := range res {
			out = append(out, n.GrantsPrefix(r), n.RequestsPrefix(r), n.OpsPrefix(r), n.HistoryPrefix(r),
				n.RestoredPrefix(r), n.GrantMarkersPrefix(r))
		}
		return out
	}
	for _, n1 := range nss {
		ranges := rangesOf(n1)
		for _, n2 := range nss {
			// A key of n2 starts with n2's root and a range of n1 with n1's,
			// so only nested (or equal) roots can overlap.
			if r1, r2 := n1.Root(), n2.Root(); r1 == r2 || !strings.HasPrefix(r2, r1) && !strings.HasPrefix(r1, r2) {
				continue
			}
			for _, k := range keysOf(n2) {
				for _, p := range ranges {
					if strings.HasPrefix(k, p) {
						t.Fatalf("key %q of %+v lies under range prefix %q of %+v", k, n2, p, n1)
					}
				}
			}
		}
	}
	for _, bad := range [][2]string{{"p/d/history", "r"}, {"p/d", "authority"}, {"p/ops/x", "d"}, {"p", "_fencepub"}} {
		if _, err := NewNamespace(bad[0], bad[1]); !errors.Is(err, ErrInvalidName) {
			t.Errorf("NewNamespace(%q, %q): %v; want ErrInvalidName", bad[0], bad[1], err)
		}
	}
	if len(nss) < 100 {
		t.Fatalf("only %d namespaces checked", len(nss))
	}
}

// PointerResource is PointerKey's inverse, and refuses a key outside the
// pointers, a reserved name and one that is not a resource name.
func TestPointerResource(t *testing.T) {
	ns, err := NewNamespace("p/q", "d")
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range []string{"r", "nightly-report", "a.b_c-9", strings.Repeat("x", MaxResourceLen)} {
		if got, err := ns.PointerResource(ns.PointerKey(res)); err != nil || got != res {
			t.Errorf("PointerResource(PointerKey(%q)) = %q, %v", res, got, err)
		}
	}
	other, err := NewNamespace("p/q", "e")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{
		other.PointerKey("r"),       // another domain
		ns.SealKey("r"),             // not a pointer
		ns.PointersPrefix(),         // no name
		ns.PointersPrefix() + "_gc", // reserved
		ns.PointersPrefix() + "a%2Fb",
		ns.PointersPrefix() + "%zz",
	} {
		if got, err := ns.PointerResource(key); !errors.Is(err, ErrInvalidName) {
			t.Errorf("PointerResource(%q) = %q, %v; want ErrInvalidName", key, got, err)
		}
	}
}
