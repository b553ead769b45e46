package chaos

import (
	"time"

	"golang.org/x/sys/unix"
)

// Clock gives the times of a run's history: nanoseconds of the system's
// CLOCK_MONOTONIC since the run started. The clock is system-wide, so the
// harness and its worker processes stamp operations on one time line, and a
// process paused with SIGSTOP cannot make its stamps lie about the order of
// events (DESIGN.md invariant 8: every operation is logged with invoke and
// complete times). A Clock is a value and safe for concurrent use.
type Clock struct {
	base int64     // CLOCK_MONOTONIC at the start of the run, ns
	wall time.Time // the wall clock read together with base
}

// NewClock returns a Clock whose zero is now.
func NewClock() Clock {
	return Clock{base: monotonic(), wall: time.Now()}
}

// clockAt returns the Clock of a run that started at CLOCK_MONOTONIC base
// (a worker process rebuilds its parent's clock from the base).
func clockAt(base int64) Clock {
	return Clock{base: base, wall: time.Now().Add(-time.Duration(monotonic() - base))}
}

// Now returns the nanoseconds elapsed since the run started.
func (c Clock) Now() int64 { return monotonic() - c.base }

// Base returns CLOCK_MONOTONIC at the start of the run, in nanoseconds.
func (c Clock) Base() int64 { return c.base }

// Wall returns the wall-clock time of run time t (ns), derived from the
// monotonic clock: the harness gives it to GC as its clock, so the times GC
// writes into seal values convert back to run time exactly (At).
func (c Clock) Wall(t int64) time.Time { return c.wall.Add(time.Duration(t)) }

// At converts a time produced by Wall back to run time (ns).
func (c Clock) At(w time.Time) int64 { return int64(w.Sub(c.wall)) }

func monotonic() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("chaos: clock_gettime(CLOCK_MONOTONIC): " + err.Error()) // cannot fail on Linux
	}
	return ts.Nano()
}
