// Package wallclock gives a gc.Config or a publisher.Config another wall
// clock than time.Now, for the programs of this repository that skew
// clocks on purpose (the chaos soak's collector and workers, GC's clock
// tests): fencepub's safety never reads a wall clock (DESIGN.md "Ages come
// from one clock"), and they check that. Packages gc and publisher register
// their setter when they are initialised, so it is set in any program that
// imports them.
package wallclock

import (
	"fmt"
	"time"
)

// setters are the registered setters: each returns cfg with the clock set
// and true, or false for a cfg of another type.
var setters []func(cfg any, now func() time.Time) (any, bool)

// Register adds set, the setter of one package's config type C.
func Register[C any](set func(cfg *C, now func() time.Time)) {
	setters = append(setters, func(cfg any, now func() time.Time) (any, bool) {
		c, ok := cfg.(C)
		if ok {
			set(&c, now)
		}
		return c, ok
	})
}

// With returns cfg (a gc.Config or a publisher.Config) with the wall clock
// now; nil restores time.Now. It panics for a config no package registered.
func With[C any](cfg C, now func() time.Time) C {
	for _, set := range setters {
		if out, ok := set(cfg, now); ok {
			return out.(C)
		}
	}
	panic(fmt.Sprintf("wallclock: no setter for %T", cfg))
}
