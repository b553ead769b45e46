package gc

import (
	"fmt"

	"github.com/fencepub/fencepub/internal/layout"
)

// historyEntry is one decoded history record: the key it lives at, its
// ModRevision (when its version was published, at the latest) and the
// pointer value it holds.
type historyEntry struct {
	key     string
	mod     int64
	pointer layout.Pointer
	// keep is the grace judgement, set once the successor is known.
	keep   bool
	reason string
}

// retention computes which history entries keep their objects, streaming
// the history in version order with memory bounded by the entries it keeps
// (Policy.Retain plus those superseded within the grace), not by the
// history's length. Supersession is measured on the domain clock: entry k
// was superseded when entry k+1 was written, and that is past the grace
// when its ModRevision is below graceCutoff (never the publishers'
// CommittedAt).
type retention struct {
	p           Policy
	graceCutoff int64

	queue []*historyEntry // undecided entries, oldest first
	// objects maps a retained object key to its reason; keys is the set of
	// retained history keys.
	objects map[string]string
	keys    map[string]bool
	expired int
	// datasets are the kept entries of dataset versions.
	datasets []datasetRef
}

func newRetention(p Policy, graceCutoff int64) *retention {
	return &retention{p: p, graceCutoff: graceCutoff, objects: make(map[string]string), keys: make(map[string]bool)}
}

// judge sets e's grace judgement from the revision its successor was
// written at.
func (r *retention) judge(e *historyEntry, supersededRev int64) {
	e.keep = supersededRev >= r.graceCutoff
	if e.keep {
		e.reason = fmt.Sprintf("version %s was superseded at etcd revision %d, within the reader grace %s + skew %s on the domain clock (cutoff revision %d)",
			e.pointer.Version, supersededRev, r.p.Grace, r.p.ClockSkew, r.graceCutoff)
	}
}

// add takes the next history entry in version order.
func (r *retention) add(e *historyEntry) {
	if n := len(r.queue); n > 0 {
		r.judge(r.queue[n-1], e.mod)
	}
	r.queue = append(r.queue, e)
	// Entries with Retain successors are out of the last N and judged.
	for len(r.queue) > r.p.Retain {
		r.decide(r.queue[0])
		r.queue = r.queue[1:]
	}
}

func (r *retention) decide(e *historyEntry) {
	if !e.keep {
		r.expired++
		return
	}
	r.keep(e, e.reason)
}

func (r *retention) keep(e *historyEntry, reason string) {
	r.keys[e.key] = true
	if _, dup := r.objects[e.pointer.Object.Key]; !dup && e.pointer.Object.Key != "" {
		r.objects[e.pointer.Object.Key] = reason
		if e.pointer.IsDataset() {
			r.datasets = append(r.datasets, datasetRef{e.pointer, reason})
		}
	}
}

// finish decides the remaining entries: they are the last Retain
// published versions and are kept.
func (r *retention) finish() {
	for _, e := range r.queue {
		r.keep(e, fmt.Sprintf("version %s is one of the last %d published versions", e.pointer.Version, r.p.Retain))
	}
	r.queue = nil
}
