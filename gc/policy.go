package gc

import (
	"cmp"
	"time"

	"github.com/fencepub/fencepub/internal/errkind"
)

// Defaults of Policy (DESIGN.md "Garbage collection"; DefaultConfig).
const (
	defaultRetain       = 2
	defaultGrace        = 10 * time.Minute
	defaultClockSkew    = time.Minute
	defaultAbandonAfter = time.Hour
)

// Policy says what a pass keeps. A zero field takes its default, so the zero
// Policy is DefaultConfig().Policy; fields are never negative.
type Policy struct {
	// Retain is how many of the newest published versions (history entries,
	// the current one included) keep their objects, besides the grace rule.
	// 1 keeps only the current version. Default 2.
	Retain int `json:"retain"`
	// Grace is the reader grace period: an object superseded less than
	// Grace + ClockSkew ago is kept, so a reader that read the pointer just
	// before it moved can still fetch it. Default 10 min.
	Grace time.Duration `json:"grace"`
	// ClockSkew is added to the reader grace (measured on the domain clock,
	// whose one-second steps and etcd's lease timer it covers) and to the
	// abandon period (the store's clock, LastModified, against this
	// process's clock). Publishers' clocks never enter. Default 1 min.
	ClockSkew time.Duration `json:"clock_skew"`
	// AbandonAfter is how old an in-flight object (current epoch, above
	// max(pointer, seal)) of a grant that is no longer live must be before
	// it is sealed and deleted. Age is measured from the object's
	// LastModified (an upload's Initiated) with this process's clock, so
	// the allowance ClockSkew is added. Default 1 h.
	AbandonAfter time.Duration `json:"abandon_after"`
}

// withDefaults replaces zero fields with the defaults.
func (p Policy) withDefaults() Policy {
	d := DefaultConfig().Policy
	if p.Retain == 0 {
		p.Retain = d.Retain
	}
	if p.Grace == 0 {
		p.Grace = d.Grace
	}
	if p.ClockSkew == 0 {
		p.ClockSkew = d.ClockSkew
	}
	if p.AbandonAfter == 0 {
		p.AbandonAfter = d.AbandonAfter
	}
	return p
}

// validate checks that no field is negative. Errors: fencepub.ErrInvalid
// naming the field.
func (p Policy) validate() error {
	return cmp.Or(
		errkind.Negative("gc.Config.Policy.Retain", p.Retain),
		errkind.Negative("gc.Config.Policy.Grace", p.Grace),
		errkind.Negative("gc.Config.Policy.ClockSkew", p.ClockSkew),
		errkind.Negative("gc.Config.Policy.AbandonAfter", p.AbandonAfter),
	)
}
