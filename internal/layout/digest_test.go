package layout

import "testing"

// A group's digest is the members' digests in resource-name order,
// whatever order they are given in; any member's content changes it.
func TestGroupDigestOrder(t *testing.T) {
	d1 := GroupDigest([]string{"a", "b"}, []string{"x", "y"})
	if d2 := GroupDigest([]string{"b", "a"}, []string{"y", "x"}); d1 != d2 {
		t.Fatalf("order changed the digest: %s %s", d1, d2)
	}
	for _, other := range []string{GroupDigest([]string{"a", "b"}, []string{"y", "x"}), GroupDigest([]string{"a", "c"}, []string{"x", "y"}), GroupDigest([]string{"a"}, []string{"x"})} {
		if other == d1 {
			t.Fatal("different groups share a digest")
		}
	}
}
