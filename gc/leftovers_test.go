//go:build !unit

package gc

import (
	"errors"
	"testing"
	"time"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/publisher"
)

// Leftovers of finished work (DESIGN.md "Leftovers of finished work"): a
// released term's objects above the pointer go at the next pass; a live
// term's never do.

// A term's duplicate, conflict, never-sent and late attempts are collected
// by the first pass after its release, with the default policy and the
// real clock; the published object and the other term's stay.
func TestLeftoversCollectedAtNextPass(t *testing.T) {
	e := newEnv(t)
	const res = "nightly"
	a, pa := e.worker(res, "run-1")
	first := e.publish(pa, "run-2026-12-01", publisher.Applied)
	e.release(a)

	// A re-run of the same job: duplicate; one with other output:
	// conflict; one whose transaction never arrived.
	b, pb := e.worker(res, "run-2")
	dup := e.publish(pb, "run-2026-12-01", publisher.Duplicate)
	conf, err := pb.Publish(ctxT(t, 30*time.Second), op("run-2026-12-01", "other output"))
	if conf.Outcome != publisher.Conflict || !errors.Is(err, publisher.ErrConflict) {
		t.Fatalf("conflict: %+v %v", conf, err)
	}
	lost := e.inFlight(b, "run-2026-12-02")
	left := []string{dup.Attempt.Object.Key, conf.Attempt.Object.Key, lost.Attempt.Object.Key}
	rep := e.run(e.collector(nil), res)
	for _, k := range left {
		mustDecide(t, rep, k, kindInFlight, "kept", "is live")
	}
	e.release(b)
	late := e.publish(pb, "run-2026-12-03", publisher.Stale)
	if late.Reason != publisher.ReasonSeal {
		t.Fatalf("publish after release: reason %q; want seal", late.Reason)
	}
	left = append(left, late.Attempt.Object.Key)

	rep = e.run(e.collector(nil), res)
	for _, k := range left {
		mustDecide(t, rep, k, kindUnpublishable, "deleted", "<= seal")
		if e.Exists(k) {
			t.Fatalf("%s not deleted", k)
		}
	}
	mustDecide(t, rep, first.Object.Key, kindPublished, "kept", "")
	if rep.Deleted != int64(len(left)) || rep.Sealed != 0 || !e.Exists(first.Object.Key) {
		t.Fatalf("report %+v", rep)
	}
}

// A release never touches a live term: not one of another resource, and
// not the live term that followed a term whose lease expired and that is
// released late. Its in-flight objects are kept by passes right after the
// release and by a pass that sees them hours old, and it publishes on.
func TestLiveTermUntouchedByRelease(t *testing.T) {
	e := newEnv(t)
	const res, other = "shared", "neighbour"
	old, po := e.worker(res, "old")
	e.publish(po, "o1", publisher.Applied)
	e.expire(old) // paused past its lease
	live, pl := e.worker(res, "live")
	inflight := e.inFlight(live, "l1")
	g2, p2 := e.worker(other, "w")
	inflight2 := e.inFlight(g2, "n1")
	done, pd := e.worker(other+"-done", "w")
	e.publish(pd, "d1", publisher.Applied)

	// The old term comes back and releases: its lease is gone, its term is
	// sealed, below the live term's versions.
	if err := e.auth.Release(ctxT(t, 10*time.Second), old); !errors.Is(err, authority.ErrLeaseLost) {
		t.Fatalf("late release: %v; want ErrLeaseLost", err)
	}
	if s := e.seal(res); s.Version != old.Version(layout.MaxNumber) || s.Version.Compare(live.Version(1)) >= 0 {
		t.Fatalf("seal after the late release %+v", s)
	}
	e.release(done)
	for _, c := range []*Collector{e.collector(nil), e.collector(later(3 * time.Hour))} {
		rep := e.run(c)
		mustDecide(t, rep, inflight.Attempt.Object.Key, kindInFlight, "kept", "is live")
		mustDecide(t, rep, inflight2.Attempt.Object.Key, kindInFlight, "kept", "is live")
		if rep.Sealed != 0 {
			t.Fatalf("a pass raised %d seals over live terms: %+v", rep.Sealed, rep)
		}
	}
	for _, k := range []string{inflight.Attempt.Object.Key, inflight2.Attempt.Object.Key} {
		if !e.Exists(k) {
			t.Fatalf("%s of a live term deleted", k)
		}
	}
	e.publish(pl, "l2", publisher.Applied)
	e.publish(p2, "n2", publisher.Applied)
}
