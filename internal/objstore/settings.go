package objstore

import "strings"

// BucketSettings are the bucket's settings that defeat or bypass GC, or
// keep the bytes of an overwritten object (DESIGN.md "Garbage collection",
// "Security"; docs/security-object-store.md).
type BucketSettings struct {
	// Versioning is "" (never enabled), "Enabled" or "Suspended".
	Versioning string
	// LifecycleRules are the bucket's lifecycle rules, in the store's order.
	LifecycleRules []LifecycleRule
}

// LifecycleRule is what fencepub reads of one bucket lifecycle rule.
type LifecycleRule struct {
	// ID is the rule's name.
	ID string
	// Enabled is true when the rule's status is "Enabled".
	Enabled bool
	// Prefix is the key prefix the rule's filter names ("" for every key).
	Prefix string
	// Narrowed is true when the filter also names tags or object sizes, so
	// the rule may skip keys under Prefix.
	Narrowed bool
	// NoncurrentDays is the rule's noncurrent-version expiration: a version
	// is removed this many days after it stopped being current (overwritten
	// or deleted). 0 when the rule has none.
	NoncurrentDays int
	// OtherActions is true when the rule does anything beyond expiring
	// noncurrent versions and removing expired delete markers: expiring
	// current objects (after days, on a date), transitions, aborting
	// incomplete uploads. Such a rule acts behind GC's back.
	OtherActions bool
}

// NoncurrentExpiry returns the enabled rule that expires the noncurrent
// versions of every key under prefix soonest, and false when no enabled
// rule does (none has a noncurrent expiration, or each names another
// prefix, tags or sizes). prefix is a key prefix such as a domain's root.
func (s BucketSettings) NoncurrentExpiry(prefix string) (LifecycleRule, bool) {
	var best LifecycleRule
	found := false
	for _, r := range s.LifecycleRules {
		if !r.Enabled || r.Narrowed || r.NoncurrentDays <= 0 || !strings.HasPrefix(prefix, r.Prefix) {
			continue
		}
		if !found || r.NoncurrentDays < best.NoncurrentDays {
			best, found = r, true
		}
	}
	return best, found
}

// BypassingRules returns the rules with OtherActions, enabled or not (a
// disabled rule is one status change from acting): the rules that may
// expire or move objects GC keeps. A rule that only expires noncurrent
// versions and expired delete markers is not among them.
func (s BucketSettings) BypassingRules() []LifecycleRule {
	var out []LifecycleRule
	for _, r := range s.LifecycleRules {
		if r.OtherActions {
			out = append(out, r)
		}
	}
	return out
}
