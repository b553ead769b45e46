package layout

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// nestResources are the resource names whose keys apart checks: plain ones
// and ones that are also layout words.
var nestResources = []string{"r", "x", "epoch", "history", "prod"}

// keysOf returns keys of every kind n writes, in etcd and in the bucket,
// for nestResources.
func keysOf(n Namespace) []string {
	v := Version{Epoch: 1, Fence: 2, Seq: 3}
	out := []string{n.EpochKey(), n.DeploymentKey(), n.RollbackKey(), n.EpochRecord(1), n.ClockHeadKey(), n.ClockPointKey(1),
		n.VerifyKey(), n.OwnershipObject(), n.EpochMarker(1), n.CreateOnlyProbeObject()}
	for _, r := range nestResources {
		out = append(out, n.GenerationKey(r), n.HolderKey(r), n.GrantKey(r, 2), n.RequestKey(r, "q"),
			n.PointerKey(r), n.SealKey(r), n.OpKey(r, "k"), n.HistoryKey(r, v), n.RestoredKey(r, 1),
			n.GrantMarker(r, 1, 2), n.SettledMarker(r, v), n.ObjectKey(r, v, "0123456789abcdef"))
	}
	return out
}

// rangesOf returns the prefixes n reads or deletes as ranges, lists, or
// grants to a role: its root (roles, init's emptiness check, recover's
// bucket scan) and every subtree under it.
func rangesOf(n Namespace) []string {
	out := []string{n.Root(), n.AuthorityPrefix(), n.PointersPrefix(), n.EpochRecordsPrefix(), n.ClockPointsPrefix(),
		n.MetaPrefix(), n.EpochMarkersPrefix()}
	for _, r := range nestResources {
		out = append(out, n.GrantsPrefix(r), n.RequestsPrefix(r), n.OpsPrefix(r), n.HistoryPrefix(r),
			n.RestoredPrefix(r), n.GrantMarkersPrefix(r), n.SettledMarkersPrefix(r), n.ObjectsPrefix(r))
	}
	return out
}

// apart returns an error when a key of n2 lies inside a range of n1 or is
// one of n1's keys, for namespaces of different roots: the rule of DESIGN.md
// "etcd layout" (no two namespaces nest). The create-only probe is shared
// by the domains of a prefix on purpose; it lies beside every root.
func apart(n1, n2 Namespace) error {
	if n1.Root() == n2.Root() {
		return nil
	}
	if strings.HasPrefix(n2.Root(), n1.Root()) {
		return fmt.Errorf("the root %q of %+v lies inside the root %q of %+v", n2.Root(), n2, n1.Root(), n1)
	}
	keys1 := map[string]bool{}
	for _, k := range keysOf(n1) {
		keys1[k] = true
	}
	for _, k := range keysOf(n2) {
		if keys1[k] && k != n2.CreateOnlyProbeObject() {
			return fmt.Errorf("key %q is of both %+v and %+v", k, n1, n2)
		}
		for _, p := range rangesOf(n1) {
			if strings.HasPrefix(k, p) {
				return fmt.Errorf("key %q of %+v lies under range %q of %+v", k, n2, p, n1)
			}
		}
	}
	return nil
}

// TestNamespacesNeverNest checks apart over every pair of namespaces built
// from names that include the layout's own words, and that the namespaces
// that once nested are refused: prefix "p/d/history" with domain "r" had
// the root of resource "r"'s history of domain "d" (GC's history pruning
// deleted its epoch and generation keys), and prefix "results/prod" put its
// probe and objects inside domain "prod" of prefix "results", whose init
// then met another history for good.
func TestNamespacesNeverNest(t *testing.T) {
	parts := []string{"p", "d", "r", "results", "prod", "authority", "pointers", "seals", "ops", "history", "restored",
		"epochs", "clock", "_fencepub", "epoch", "x"}
	seen := map[Namespace]bool{}
	var nss []Namespace
	for _, a := range parts {
		for _, b := range parts {
			for _, c := range parts {
				for _, prefix := range []string{a, a + "/" + b} {
					ns, err := NewNamespace(prefix, c)
					switch {
					case err == nil && !seen[ns]:
						seen[ns] = true
						nss = append(nss, ns)
					case err != nil && !errors.Is(err, ErrInvalidName):
						t.Fatal(err)
					}
				}
			}
		}
	}
	for _, n1 := range nss {
		for _, n2 := range nss {
			if err := apart(n1, n2); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, bad := range [][2]string{{"p/d/history", "r"}, {"results/prod", "x"}, {"results/prod/x", "y"}, {"p/d", "authority"},
		{"p/ops/x", "d"}, {"p", "_fencepub"}, {"/p", "d"}, {"p/", "d"}} {
		if _, err := NewNamespace(bad[0], bad[1]); !errors.Is(err, ErrInvalidName) || !strings.Contains(err.Error(), "namespace.") {
			t.Errorf("NewNamespace(%q, %q): %v; want ErrInvalidName naming the field", bad[0], bad[1], err)
		}
	}
	if len(nss) < 40 {
		t.Fatalf("only %d namespaces checked", len(nss))
	}
}

// FuzzNamespacesNeverNest: for any two namespaces NewNamespace accepts,
// apart holds both ways (DESIGN.md "etcd layout": no key of one namespace
// lies inside another's).
func FuzzNamespacesNeverNest(f *testing.F) {
	for _, s := range [][4]string{
		{"results", "prod", "results/prod", "x"}, {"p", "d", "p/d/history", "r"}, {"p", "d", "p", "d2"},
		{"p", "d", "p2", "d"}, {"fencepub", "prod", "fencepub", "_fencepub"}, {"a.b", "c", "a", "b.c"},
		{"a", "b-c", "a-b", "c"}, {"p", "%2F", "p", "d"}, {"p", "d", "p", "d%2Fx"},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, p1, d1, p2, d2 string) {
		n1, err1 := NewNamespace(p1, d1)
		n2, err2 := NewNamespace(p2, d2)
		for _, err := range []error{err1, err2} {
			if err != nil && !errors.Is(err, ErrInvalidName) {
				t.Fatalf("NewNamespace: %v; want nil or ErrInvalidName", err)
			}
		}
		if err1 != nil || err2 != nil {
			return
		}
		if err := apart(n1, n2); err != nil {
			t.Fatal(err)
		}
		if err := apart(n2, n1); err != nil {
			t.Fatal(err)
		}
	})
}

// PointerResource is PointerKey's inverse, and refuses a key outside the
// pointers, a reserved name and one that is not a resource name.
func TestPointerResource(t *testing.T) {
	ns, err := NewNamespace("pq", "d")
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range []string{"r", "nightly-report", "a.b_c-9", strings.Repeat("x", MaxResourceLen)} {
		if got, err := ns.PointerResource(ns.PointerKey(res)); err != nil || got != res {
			t.Errorf("PointerResource(PointerKey(%q)) = %q, %v", res, got, err)
		}
	}
	other, err := NewNamespace("pq", "e")
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
