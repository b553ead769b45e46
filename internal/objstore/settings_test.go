package objstore_test

import (
	"testing"

	"github.com/fencepub/fencepub/internal/objstore"
)

// TestBucketSettingsRules: the noncurrent expiry of a domain root comes
// from the soonest enabled rule whose prefix covers the whole root and that
// names no tags or sizes; only rules with other actions bypass GC.
func TestBucketSettingsRules(t *testing.T) {
	root := "fencepub/nightly/"
	rule := func(id, prefix string, days int, mut func(*objstore.LifecycleRule)) objstore.LifecycleRule {
		r := objstore.LifecycleRule{ID: id, Enabled: true, Prefix: prefix, NoncurrentDays: days}
		if mut != nil {
			mut(&r)
		}
		return r
	}
	for _, tc := range []struct {
		name   string
		rules  []objstore.LifecycleRule
		want   string // the expiring rule's ID, "" for none
		bypass int
	}{
		{"no rules", nil, "", 0},
		{"whole bucket", []objstore.LifecycleRule{rule("all", "", 30, nil)}, "all", 0},
		{"the prefix", []objstore.LifecycleRule{rule("p", "fencepub/", 30, nil)}, "p", 0},
		{"another domain", []objstore.LifecycleRule{rule("other", "fencepub/weekly/", 30, nil)}, "", 0},
		{"part of the root", []objstore.LifecycleRule{rule("sub", "fencepub/nightly/job/", 30, nil)}, "", 0},
		{"disabled", []objstore.LifecycleRule{rule("off", "", 30, func(r *objstore.LifecycleRule) { r.Enabled = false })}, "", 0},
		{"tags", []objstore.LifecycleRule{rule("tags", "", 30, func(r *objstore.LifecycleRule) { r.Narrowed = true })}, "", 0},
		{"no noncurrent expiry", []objstore.LifecycleRule{rule("exp", "", 0, func(r *objstore.LifecycleRule) { r.OtherActions = true })}, "", 1},
		{"soonest wins", []objstore.LifecycleRule{rule("long", "", 90, nil), rule("short", "fencepub/", 7, func(r *objstore.LifecycleRule) { r.OtherActions = true })}, "short", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := objstore.BucketSettings{Versioning: "Enabled", LifecycleRules: tc.rules}
			r, ok := set.NoncurrentExpiry(root)
			if ok != (tc.want != "") || ok && r.ID != tc.want {
				t.Fatalf("NoncurrentExpiry(%q) = %+v, %v; want %q", root, r, ok, tc.want)
			}
			if got := len(set.BypassingRules()); got != tc.bypass {
				t.Fatalf("BypassingRules: %d, want %d", got, tc.bypass)
			}
		})
	}
}
