package chaos

import (
	"cmp"
	"fmt"
	"io"
	"iter"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fencepub/fencepub/internal/layout"
)

// Invariants Verify checks: DESIGN.md "Invariants".
const (
	// InvLinearizable: each resource's publishes, reads and seal raises are
	// linearizable with respect to Model (invariants 1, 2, 4, 5, 6, 8).
	InvLinearizable = "linearizable"
	// InvSettled: every publish ended with a definite outcome, or unknown
	// and then settled by Resolve (invariant 8).
	InvSettled = "settled"
	// InvFenceOnce: no (resource, epoch, fence) was granted to two requests,
	// no grant record was written twice, generations only rise (invariant 3).
	InvFenceOnce = "fence_issued_once"
	// InvKeyOnce: each idempotency key was applied at most once; op records
	// are never overwritten or deleted within the retention (invariant 5).
	InvKeyOnce = "key_applied_once"
	// InvUnauthorized: no publish with a token that was not granted to its
	// owner on its resource in its epoch was applied (invariant 2).
	InvUnauthorized = "no_unauthorized_accept"
	// InvPointerMonotonic: in etcd's own order of commits, each resource's
	// pointer only moves to higher versions (invariant 1: no
	// revoked-generation overwrite).
	InvPointerMonotonic = "pointer_monotonic"
	// InvNoPhantom: every version the pointer held was reported applied to
	// its publisher, and every applied publish moved the pointer
	// (invariant 8: nothing is lost silently).
	InvNoPhantom = "no_phantom_apply"
	// InvSealMonotonic: a seal only rises.
	InvSealMonotonic = "seal_monotonic"
	// InvReaderMonotonic: a reader never saw a version lower than one it saw
	// before (invariant 6).
	InvReaderMonotonic = "reader_monotonic"
	// InvReaderBytes: a reader saw only published versions, with bytes that
	// match the pointer's digest and the body published at that version
	// (invariant 6).
	InvReaderBytes = "reader_bytes"
	// InvObjectKept: no published or retained object was deleted: every
	// object an applied publish or a read named still exists at the end of
	// the run, whose GC keeps everything superseded within the run
	// (invariant 7).
	InvObjectKept = "object_kept"
	// InvDatasetFile: every read of a dataset version's file returned the
	// bytes (sha256 and size) its manifest's entry names, and a listing of
	// its manifest returned exactly the entries its publish wrote, for a
	// version an applied publish wrote (DESIGN.md invariants 6 and 14).
	InvDatasetFile = "dataset_file"
	// InvDatasetFileKept: no file a retained manifest names is missing: a
	// read of a dataset file that found it gone (the final sweep of every
	// retained version's files, or a read during the run that no later
	// restore explains and the sweep did not find again) breaks DESIGN.md
	// invariants 7 and 14.
	InvDatasetFileKept = "dataset_file_kept"
	// InvDatasetBase: a dataset publish that reused files from a base
	// moved the pointer only from that base, in etcd's commit order
	// (DESIGN.md invariant 15).
	InvDatasetBase = "dataset_base"
	// InvGroupTorn: the members of a group publish moved together
	// (DESIGN.md invariant 16): the watch saw every member's pointer move
	// to its version at one etcd revision; no cut showed a member at its
	// version of a group publish beside another member of it below its
	// version of that group; and a cut in the group's segment at a
	// revision at or after the group's commit showed every member at or
	// above the group's versions, one before it none.
	InvGroupTorn = "group_torn"
	// InvGroupPartial: an applied group publish moved every member's
	// pointer, and one that was not applied (stale, conflict, duplicate,
	// failed, settled as never applied) moved none (DESIGN.md invariant
	// 16).
	InvGroupPartial = "group_partial"
	// InvAnomaly: a component returned an error that no injected fault
	// explains (History.Anomalies), a watched value did not decode, or the
	// epoch changed without a restore.
	InvAnomaly = "anomaly"
	// InvWatchComplete: the harness's watch saw every change. A watch that
	// lost events (History.WatchGaps) leaves "every applied publish moved
	// the pointer" unchecked, so the run fails instead of passing on less.
	InvWatchComplete = "watch_complete"
)

// Violation is one broken invariant.
type Violation struct {
	Invariant string `json:"invariant"`
	Resource  string `json:"resource,omitempty"`
	Detail    string `json:"detail"`
}

// String formats v as "invariant [resource]: detail".
func (v Violation) String() string {
	if v.Resource == "" {
		return v.Invariant + ": " + v.Detail
	}
	return v.Invariant + " [" + v.Resource + "]: " + v.Detail
}

// VerifyOptions configures Verify. The zero value takes the defaults.
type VerifyOptions struct {
	// Timeout bounds the linearizability check of one resource; an undecided
	// check is a violation. Default 30 s.
	Timeout time.Duration
	// Visualize, if set, is called for each resource whose history is not
	// linearizable; porcupine's HTML view of it is written to the writer it
	// returns, which Verify closes.
	Visualize func(resource string) (io.WriteCloser, error)
}

// Verify judges a run's history and returns every violation found (nil when
// the run was correct). It is a pure function of h, except for the time the
// linearizability checks take: resources are checked in parallel, each with
// opts.Timeout, and a check that takes longer than that is undecided, a
// violation, even if porcupine finished it.
func Verify(h *History, opts VerifyOptions) []Violation {
	if opts.Timeout == 0 {
		opts.Timeout = 30 * time.Second
	}
	v := &verifier{h: h, opts: opts}
	v.index()
	v.settled()
	v.fences()
	v.keys()
	v.pointers()
	v.seals()
	v.readers()
	v.objects()
	v.datasets()
	v.bases()
	v.groups()
	v.anomalies()
	v.linearizable()
	slices.SortStableFunc(v.out, func(a, b Violation) int {
		return cmp.Or(cmp.Compare(a.Invariant, b.Invariant), cmp.Compare(a.Resource, b.Resource))
	})
	return v.out
}

type grantID struct {
	res          string
	epoch, fence uint64
}

type versionID struct {
	res string
	v   layout.Version
}

type verifier struct {
	h    *History
	opts VerifyOptions

	mu  sync.Mutex
	out []Violation

	segs      []segment
	granted   map[grantID]map[string]bool // owners granted (resource, epoch, fence)
	placed    []placedPublish             // settled publishes, placed in their segment
	reads     []placedRead                // reads that got a pointer, placed
	applied   map[versionID]*PublishOp    // placed publishes whose outcome is applied
	unsettled map[string]bool             // resources with an unsettled publish
	group     map[string][]PublishOp      // group publish id → its members in name order
}

// segment is the part of a history between two etcd restores. Operations
// of a segment took effect within [start, end]; its watched changes have
// revisions in (the previous segment's rev, rev].
type segment struct {
	start, end int64
	rev        int64
	epoch      uint64
	states     map[string]InitialState // nil: every resource starts empty
}

// init returns the state res starts the segment in.
func (s segment) init(res string) InitialState {
	if st, ok := s.states[res]; ok {
		return st
	}
	return InitialState{Epoch: s.epoch}
}

// placedPublish is a publish as the segment it belongs to sees it.
type placedPublish struct {
	PublishOp
	seg int
}

type placedRead struct {
	ReadOp
	seg int
}

func (v *verifier) add(inv, res, format string, args ...any) {
	v.mu.Lock()
	v.out = append(v.out, Violation{Invariant: inv, Resource: res, Detail: fmt.Sprintf(format, args...)})
	v.mu.Unlock()
}

// segmentOfTime returns the segment whose span (from its start to the next
// segment's start) holds run time t.
func (v *verifier) segmentOfTime(t int64) int {
	i := 0
	for i+1 < len(v.segs) && v.segs[i+1].start <= t {
		i++
	}
	return i
}

// segmentOfRevision returns the segment a change at revision rev belongs to.
func (v *verifier) segmentOfRevision(rev int64) int {
	i := 0
	for i+1 < len(v.segs) && rev > v.segs[i].rev {
		i++
	}
	return i
}

func (v *verifier) index() {
	v.segs = []segment{{start: 0, end: math.MaxInt64, rev: math.MaxInt64, epoch: v.h.Epoch}}
	for _, r := range v.h.Restores {
		last := &v.segs[len(v.segs)-1]
		last.end, last.rev = r.Start, r.Revision
		v.segs = append(v.segs, segment{start: r.End, end: math.MaxInt64, rev: math.MaxInt64, epoch: r.NewEpoch, states: r.States})
	}
	v.granted = map[grantID]map[string]bool{}
	for _, g := range v.h.Grants {
		id := grantID{g.Resource, g.Epoch, g.Fence}
		if v.granted[id] == nil {
			v.granted[id] = map[string]bool{}
		}
		v.granted[id][g.Owner] = true
	}
	v.unsettled = map[string]bool{}
	v.group = map[string][]PublishOp{}
	for _, p := range v.h.Publishes {
		if p.Group != "" {
			v.group[p.Group] = append(v.group[p.Group], p)
		}
	}
	for _, ms := range v.group {
		slices.SortFunc(ms, func(a, b PublishOp) int { return cmp.Compare(a.Resource, b.Resource) })
	}
	v.place()
	v.applied = map[versionID]*PublishOp{}
	for i := range v.placed {
		if p := &v.placed[i]; p.Outcome == Applied {
			v.applied[versionID{p.Resource, p.Version}] = &p.PublishOp
		}
	}
}

// place assigns each settled publish and each read to a segment. An
// operation that spans a restore is judged by what it could have done:
// answered before clients were cut off, it stays in its segment (its return
// clamped to the cut); a publish whose version the pointer held before the
// restore applied there, whatever it was told after the restore lost it;
// anything else took effect after the restore, if at all, and moves to the
// segment it returned in (its call clamped to that segment's start). A read
// that was invoked before a restore and returned after it is dropped: its
// pointer read may have happened on either side.
//
// "The pointer held its version" is judged by the op record of its key at
// its version and by its owner, which the publish transaction writes
// together with the pointer: another attempt (another key, or a forged
// token of another owner) may carry the same version.
func (v *verifier) place() {
	type attemptID struct {
		res, key, owner string
		v               layout.Version
	}
	held := map[attemptID]bool{}
	for _, c := range v.h.Changes {
		if c.Kind == ChangeOpRecord && !c.Delete {
			held[attemptID{c.Resource, c.Key, c.Owner, c.Version}] = true
		}
	}
	for _, p := range v.h.Publishes {
		if !p.Done || p.Outcome == Failed || p.Outcome == Unknown || p.Outcome == "" {
			continue
		}
		first := v.first(p)
		if first.ID != p.ID && (p.Outcome == Duplicate || p.Outcome == Conflict) {
			// Only the first member's op record decides a group's key: the
			// other members of a duplicate or conflict did nothing, which
			// groups() judges.
			continue
		}
		s := v.segmentOfTime(p.Call)
		if s+1 < len(v.segs) && p.Return > v.segs[s].end {
			switch {
			case p.Return < v.segs[s+1].start && p.Call >= v.segs[s].end:
				continue // began and ended while etcd was out of reach: no effect
			case p.Return < v.segs[s+1].start:
				p.Return = v.segs[s].end
			case held[attemptID{first.Resource, first.Key, first.Owner, first.Version}]:
				// A group's pointers moved with its first member's op record.
				p.Outcome, p.Return = Applied, v.segs[s].end
			default:
				s = v.segmentOfTime(p.Return)
				p.Call = v.segs[s].start
			}
		}
		v.placed = append(v.placed, placedPublish{p, s})
	}
	for _, r := range append(slices.Clone(v.h.Reads), v.cutReads()...) {
		if r.Problem != "" {
			continue // judged by readers()
		}
		s := v.segmentOfTime(r.Call)
		if s+1 < len(v.segs) && r.Return > v.segs[s].end {
			switch {
			case r.Return < v.segs[s+1].start && r.Call >= v.segs[s].end:
				continue
			case r.Return < v.segs[s+1].start:
				r.Return = v.segs[s].end
			case r.Call >= v.segs[s].end:
				s = v.segmentOfTime(r.Return)
				r.Call = v.segs[s].start
			default:
				continue
			}
		}
		v.reads = append(v.reads, placedRead{r, s})
	}
}

// first returns the first member in name order of p's group publish,
// whose op record and seal decide the group's key and its resolution; p
// itself for a publish of no group.
func (v *verifier) first(p PublishOp) PublishOp {
	if ms := v.group[p.Group]; p.Group != "" && len(ms) > 0 {
		return ms[0]
	}
	return p
}

// cutReads returns each pointer of each group cut as a read of its
// resource: a cut is a linearizable read of every resource in it.
func (v *verifier) cutReads() []ReadOp {
	var out []ReadOp
	for _, c := range v.h.GroupCuts {
		for _, p := range c.Pointers {
			out = append(out, ReadOp{
				Client: c.Client, Resource: p.Resource, Call: c.Call, Return: c.Return,
				Version: p.Version, Object: p.Object, PointerSHA: p.SHA, SHA: p.SHA,
			})
		}
	}
	return out
}

func (v *verifier) authorized(p *PublishOp) bool {
	return v.granted[grantID{p.Resource, p.Version.Epoch, p.Version.Fence}][p.Owner]
}

// settled: every publish completed with a definite outcome.
func (v *verifier) settled() {
	for _, p := range v.h.Publishes {
		switch {
		case !p.Done:
			v.add(InvSettled, p.Resource, "publish %s (key %q, version %s) was invoked and never completed", p.ID, p.Key, p.Version)
		case p.Outcome == Unknown || p.Outcome == "":
			v.add(InvSettled, p.Resource, "publish %s (key %q, version %s) reported %q and was never settled: %s", p.ID, p.Key, p.Version, p.Reported, p.Err)
		default:
			continue
		}
		v.unsettled[p.Resource] = true
	}
}

// fences: no fence issued twice, by the grants clients got and by etcd's
// own writes of grant records and generation counters. After a restore the
// counters start again from the snapshot's values in a new epoch, which is
// why a grant record is identified by its epoch too.
func (v *verifier) fences() {
	requests := map[grantID]map[string]bool{}
	for _, g := range v.h.Grants {
		id := grantID{g.Resource, g.Epoch, g.Fence}
		if requests[id] == nil {
			requests[id] = map[string]bool{}
		}
		requests[id][g.RequestID] = true
	}
	for id, reqs := range requests {
		if len(reqs) > 1 {
			v.add(InvFenceOnce, id.res, "epoch %d fence %d was granted to %d requests: %v", id.epoch, id.fence, len(reqs), keys(reqs))
		}
		if len(v.granted[id]) > 1 {
			v.add(InvFenceOnce, id.res, "epoch %d fence %d was granted to %d owners: %v", id.epoch, id.fence, len(v.granted[id]), keys(v.granted[id]))
		}
	}
	created := map[grantID]int{}
	gen := map[string]uint64{}
	seg := 0
	for _, c := range v.changesByRevision() {
		if s := v.segmentOfRevision(c.Revision); s != seg {
			seg, gen = s, map[string]uint64{}
		}
		switch c.Kind {
		case ChangeGrant:
			epoch, _, _ := layout.ParseGrantRecord(c.Value)
			id := grantID{c.Resource, epoch, c.Number}
			switch {
			case c.Delete:
			case c.KVVersion > 1:
				v.add(InvFenceOnce, c.Resource, "grant record of fence %d overwritten at revision %d with %q", c.Number, c.Revision, c.Value)
			default:
				if created[id]++; created[id] > 1 {
					v.add(InvFenceOnce, c.Resource, "grant record of fence %d created again at revision %d (%q)", c.Number, c.Revision, c.Value)
				}
			}
		case ChangeGeneration:
			if c.Delete {
				v.add(InvFenceOnce, c.Resource, "generation counter deleted at revision %d", c.Revision)
				continue
			}
			if old, ok := gen[c.Resource]; ok && c.Number <= old {
				v.add(InvFenceOnce, c.Resource, "generation went from %d to %d at revision %d", old, c.Number, c.Revision)
			}
			gen[c.Resource] = c.Number
		}
	}
}

// keys: each idempotency key applied at most once per segment, by the
// clients' log and by etcd's writes of op records. (A restore loses the op
// records written after its snapshot, so a key can apply again after it:
// a documented limit of restores, not a violation.)
func (v *verifier) keys() {
	type keyID struct {
		res, key string
		seg      int
	}
	versions := map[keyID]map[layout.Version]bool{}
	for _, p := range v.placed {
		if p.Outcome == Applied {
			id := keyID{p.Resource, p.Key, p.seg}
			if versions[id] == nil {
				versions[id] = map[layout.Version]bool{}
			}
			versions[id][p.Version] = true
		}
	}
	for id, vs := range versions {
		if len(vs) > 1 {
			v.add(InvKeyOnce, id.res, "key %q was reported applied at %d versions: %v", id.key, len(vs), keys(vs))
		}
	}
	created := map[keyID]int{}
	for s, sg := range v.segs {
		for res, st := range sg.states {
			for k := range st.Ops {
				created[keyID{res, k, s}] = 1
			}
		}
	}
	for _, c := range v.changesByRevision() {
		if c.Kind != ChangeOpRecord {
			continue
		}
		id := keyID{c.Resource, c.Key, v.segmentOfRevision(c.Revision)}
		switch {
		case c.Delete:
			v.add(InvKeyOnce, c.Resource, "op record of key %q deleted at revision %d, within the retention", c.Key, c.Revision)
		case c.KVVersion > 1:
			v.add(InvKeyOnce, c.Resource, "op record of key %q overwritten at revision %d (now version %s)", c.Key, c.Revision, c.Version)
		default:
			if created[id]++; created[id] > 1 {
				v.add(InvKeyOnce, c.Resource, "op record of key %q created again at revision %d (version %s)", c.Key, c.Revision, c.Version)
			}
		}
	}
}

// pointers: in commit order each pointer only rises (within a segment,
// starting from the state the restore left); every pointer version is an
// applied publish's, and (with a complete watch) every applied publish
// moved its pointer.
func (v *verifier) pointers() {
	held := map[versionID]bool{}
	top := make([]uint64, len(v.segs)) // the highest pointer epoch of each segment
	for c, last := range v.versionChanges(ChangePointer, func(st InitialState) layout.Version { return st.Pointer }) {
		if c.Delete {
			v.add(InvPointerMonotonic, c.Resource, "pointer deleted at revision %d", c.Revision)
			continue
		}
		if c.Version.IsZero() {
			if !last[c.Resource].IsZero() {
				v.add(InvPointerMonotonic, c.Resource, "pointer reset from %s to the zero version at revision %d", last[c.Resource], c.Revision)
			}
			continue
		}
		if prev := last[c.Resource]; prev.Compare(c.Version) >= 0 {
			v.add(InvPointerMonotonic, c.Resource, "pointer went from %s to %s at revision %d (revoked-generation overwrite)", prev, c.Version, c.Revision)
		}
		last[c.Resource] = c.Version
		s := v.segmentOfRevision(c.Revision)
		top[s] = max(top[s], c.Version.Epoch)
		id := versionID{c.Resource, c.Version}
		held[id] = true
		switch p := v.applied[id]; {
		case p == nil:
			v.add(InvNoPhantom, c.Resource, "the pointer moved to %s (object %s) at revision %d, but no publish was reported or resolved applied at that version", c.Version, c.Object, c.Revision)
		case p.Object != "" && p.Object != c.Object:
			v.add(InvNoPhantom, c.Resource, "the pointer moved to %s with object %s, but publish %s applied object %s", c.Version, c.Object, p.ID, p.Object)
		}
	}
	// A restore (a replacement by an empty etcd too) moves to an epoch above
	// every pointer before it: the republished versions after a take-over
	// are above everything published before (DESIGN.md invariant 9).
	var before uint64
	for s := 1; s < len(v.segs); s++ {
		if before = max(before, top[s-1]); v.segs[s].epoch <= before {
			v.add(InvPointerMonotonic, "", "the recover at %.3fs moved to epoch %d, not above epoch %d of a pointer before it", float64(v.segs[s].start)/1e9, v.segs[s].epoch, before)
		}
	}
	if v.h.WatchGaps > 0 {
		v.add(InvWatchComplete, "", "the watch lost events %d times (compaction): applied publishes that never moved the pointer cannot be found", v.h.WatchGaps)
		return
	}
	for id, p := range v.applied {
		if !held[id] {
			v.add(InvNoPhantom, id.res, "publish %s was reported applied at %s, but the pointer never held that version", p.ID, id.v)
		}
	}
}

// seals: a seal only rises (within a segment).
func (v *verifier) seals() {
	for c, last := range v.versionChanges(ChangeSeal, func(st InitialState) layout.Version { return st.Seal }) {
		if c.Delete {
			v.add(InvSealMonotonic, c.Resource, "seal deleted at revision %d", c.Revision)
			continue
		}
		if c.Version.Compare(last[c.Resource]) < 0 {
			v.add(InvSealMonotonic, c.Resource, "seal went down from %s to %s at revision %d", last[c.Resource], c.Version, c.Revision)
		}
		last[c.Resource] = layout.MaxVersion(last[c.Resource], c.Version)
	}
}

// readers: versions never go back per reader and resource (within a
// segment: a restore takes the pointer back by design); bytes match the
// pointer's digest and the body published at the version.
func (v *verifier) readers() {
	for _, r := range v.h.Reads {
		switch r.Problem {
		case ReadDigest, ReadChanged:
			v.add(InvReaderBytes, r.Resource, "reader %s: %s", r.Client, r.Err)
		case ReadMissing:
			// The final listing decides whether the object was deleted: one
			// it found is a store that answered "not found" for an object it
			// holds (counted in Summary.ReadProblems), not a deletion.
			if v.h.Objects == 0 || slices.Contains(v.h.Missing, r.Object) {
				v.add(InvObjectKept, r.Resource, "reader %s at %.3fs: the pointer's object %s is missing: %s", r.Client, float64(r.Return)/1e9, r.Object, r.Err)
			}
		case ReadWentBack:
			if !v.restoredBetween(r.After, r.Return) {
				v.add(InvReaderMonotonic, r.Resource, "reader %s at %.3fs: %s, and no restore lies between its previous read at %.3fs and this one",
					r.Client, float64(r.Return)/1e9, r.Err, float64(r.After)/1e9)
			}
		}
	}
	type readerID struct {
		client, res string
		seg         int
	}
	byReader := map[readerID][]ReadOp{}
	for _, r := range v.reads {
		id := readerID{r.Client, r.Resource, r.seg}
		byReader[id] = append(byReader[id], r.ReadOp)
		if r.Version.IsZero() {
			continue
		}
		if r.SHA != r.PointerSHA {
			v.add(InvReaderBytes, r.Resource, "reader %s read %s with sha256 %s; the pointer says %s", r.Client, r.Version, r.SHA, r.PointerSHA)
		}
		switch p := v.applied[versionID{r.Resource, r.Version}]; {
		case p == nil:
			v.add(InvReaderBytes, r.Resource, "reader %s saw version %s, which no publish was reported or resolved applied at", r.Client, r.Version)
		case p.Digest != r.SHA:
			v.add(InvReaderBytes, r.Resource, "reader %s read %s with sha256 %s, but publish %s applied a body with sha256 %s", r.Client, r.Version, r.SHA, p.ID, p.Digest)
		}
	}
	for id, rs := range byReader {
		slices.SortFunc(rs, func(a, b ReadOp) int { return cmp.Compare(a.Call, b.Call) })
		for i := 1; i < len(rs); i++ {
			if rs[i].Version.Compare(rs[i-1].Version) < 0 {
				v.add(InvReaderMonotonic, id.res, "reader %s saw %s and then %s", id.client, rs[i-1].Version, rs[i].Version)
			}
		}
	}
}

// objects: nothing an applied publish or a read named was deleted.
func (v *verifier) objects() {
	for _, key := range v.h.Missing {
		named := "named by "
		for _, p := range v.applied {
			if p.Object == key {
				named += fmt.Sprintf("publish %s (%s) ", p.ID, p.Version)
			}
		}
		res := ""
		for _, r := range v.h.Reads {
			if r.Object == key {
				named += fmt.Sprintf("read by %s at %.3fs ", r.Client, float64(r.Return)/1e9)
				res = r.Resource
				break
			}
		}
		for _, p := range v.applied {
			if p.Object == key {
				res = p.Resource
			}
		}
		v.add(InvObjectKept, res, "object %s is gone: %s", key, strings.TrimSpace(named))
	}
}

// datasetFileID names one file of one dataset version.
type datasetFileID struct {
	res  string
	v    layout.Version
	path string
}

// datasets: every dataset read found what the manifest of the version it
// read names; no file a retained manifest names went missing. A file that
// a read during the run found missing is excused when the final sweep read
// it whole afterwards (the store answered "not found" for an object it
// holds) or when an etcd restore came after the read (the version may have
// been lost with it, and its files collected as orphans).
func (v *verifier) datasets() {
	swept := map[datasetFileID]bool{}
	for _, r := range v.h.DatasetReads {
		if r.Client == DatasetSweep && r.Problem == "" {
			swept[datasetFileID{r.Resource, r.Version, r.Path}] = true
		}
	}
	for _, r := range v.h.DatasetReads {
		what := fmt.Sprintf("file %q", r.Path)
		if r.Path == "" {
			what = "the manifest"
		}
		where := fmt.Sprintf("%s at %.3fs read %s of %s", r.Client, float64(r.Return)/1e9, what, r.Version)
		p := v.applied[versionID{r.Resource, r.Version}]
		isDataset := p != nil && p.Files != nil
		switch r.Problem {
		case ReadDigest, ReadChanged:
			v.add(InvDatasetFile, r.Resource, "%s: %s", where, r.Err)
		case ReadMissing:
			switch {
			case r.Client == DatasetSweep:
				v.add(InvDatasetFileKept, r.Resource, "%s, a retained version, at the end of the run: it is missing: %s", where, r.Err)
			case swept[datasetFileID{r.Resource, r.Version, r.Path}], v.restoredBetween(r.Call, math.MaxInt64):
			default:
				v.add(InvDatasetFileKept, r.Resource, "%s: it is missing, and no later restore explains it: %s", where, r.Err)
			}
		case ReadNoSuchFile:
			if _, ok := entryOf(p, r.Path); ok {
				v.add(InvDatasetFile, r.Resource, "%s: no such file, but publish %s named it in the manifest", where, p.ID)
			}
		case ReadNotDataset:
			if isDataset {
				v.add(InvDatasetFile, r.Resource, "%s: not a dataset, but publish %s applied a dataset there", where, p.ID)
			}
		case "":
			e, named := entryOf(p, r.Path)
			switch {
			case r.Version.IsZero():
			case p == nil:
				v.add(InvDatasetFile, r.Resource, "%s, which no publish was reported or resolved applied at", where)
			case !isDataset:
				v.add(InvDatasetFile, r.Resource, "%s, but publish %s applied a single object there", where, p.ID)
			case r.Path == "":
				if !slices.Equal(r.Listing, p.Files) {
					v.add(InvDatasetFile, r.Resource, "%s: %d entries %v, but publish %s wrote %d: %v", where, len(r.Listing), r.Listing, p.ID, len(p.Files), p.Files)
				}
			case !named:
				v.add(InvDatasetFile, r.Resource, "%s, which the manifest publish %s wrote does not name", where, p.ID)
			case e.SHA256 != r.SHA || e.Size != r.Size:
				v.add(InvDatasetFile, r.Resource, "%s: %d bytes with sha256 %s, but publish %s named %d bytes with sha256 %s", where, r.Size, r.SHA, p.ID, e.Size, e.SHA256)
			}
		}
	}
}

// entryOf returns the entry of path in dataset publish p (nil: none).
func entryOf(p *PublishOp, path string) (FileEntry, bool) {
	if p == nil {
		return FileEntry{}, false
	}
	i := slices.IndexFunc(p.Files, func(e FileEntry) bool { return e.Path == path })
	if i < 0 {
		return FileEntry{}, false
	}
	return p.Files[i], true
}

// bases: in etcd's commit order, a dataset publish that reused files from
// a base moved the pointer from that base (DESIGN.md invariant 15), else
// GC may have collected the files it reuses before the pointer named
// them. It needs every pointer change: a watch with gaps is reported by
// pointers().
func (v *verifier) bases() {
	if v.h.WatchGaps > 0 {
		return
	}
	for c, last := range v.versionChanges(ChangePointer, func(st InitialState) layout.Version { return st.Pointer }) {
		if c.Delete || c.Version.IsZero() {
			continue
		}
		if p := v.applied[versionID{c.Resource, c.Version}]; p != nil && p.Base != nil && last[c.Resource] != *p.Base {
			v.add(InvDatasetBase, c.Resource, "publish %s moved the pointer to %s from %s at revision %d, but it reused files from base %s",
				p.ID, c.Version, last[c.Resource], c.Revision, *p.Base)
		}
		last[c.Resource] = c.Version
	}
}

// restoredBetween reports whether an etcd restore overlaps the run times
// (from, to]: it ended after from and began at or before to.
func (v *verifier) restoredBetween(from, to int64) bool {
	for _, r := range v.h.Restores {
		if from < r.End && r.Start <= to {
			return true
		}
	}
	return false
}

// anomalies: errors no fault explains, undecodable values, epoch changes
// other than a restore's. An error a restore explains (AfterRestore) is
// excused only when a restore lies between the setup of the component that
// returned it (Since) and the error.
func (v *verifier) anomalies() {
	for _, a := range v.h.Anomalies {
		if a.AfterRestore && v.restoredBetween(a.Since, a.Time) {
			continue
		}
		v.add(InvAnomaly, "", "%s at %.3fs: %s: %s", a.Client, float64(a.Time)/1e9, a.What, a.Err)
	}
	for _, c := range v.h.Changes {
		switch {
		case c.Err != "":
			v.add(InvAnomaly, c.Resource, "%s value at revision %d does not decode: %s", c.Kind, c.Revision, c.Err)
		case c.Kind == ChangeEpoch:
			if s := v.segmentOfRevision(c.Revision); s == 0 || c.Number != v.segs[s].epoch {
				v.add(InvAnomaly, "", "the epoch changed to %d at revision %d, not by a restore's recover", c.Number, c.Revision)
			}
		}
	}
}

// versionChanges yields the changes of kind (pointer or seal) that carry no
// error, in etcd's commit order, each with last: the latest version of each
// resource so far within the change's segment, which the caller keeps up to
// date. The first segment starts with no versions; each later one starts
// from the state its restore left, the version that from picks.
func (v *verifier) versionChanges(kind ChangeKind, from func(InitialState) layout.Version) iter.Seq2[Change, map[string]layout.Version] {
	return func(yield func(Change, map[string]layout.Version) bool) {
		last := map[string]layout.Version{}
		seg := 0
		for _, c := range v.changesByRevision() {
			if c.Kind != kind || c.Err != "" {
				continue
			}
			if s := v.segmentOfRevision(c.Revision); s != seg {
				seg, last = s, map[string]layout.Version{}
				for res, st := range v.segs[s].states {
					last[res] = from(st)
				}
			}
			if !yield(c, last) {
				return
			}
		}
	}
}

// changesByRevision returns the changes in etcd's commit order.
func (v *verifier) changesByRevision() []Change {
	cs := slices.Clone(v.h.Changes)
	slices.SortStableFunc(cs, func(a, b Change) int { return cmp.Compare(a.Revision, b.Revision) })
	return cs
}

// linearizable checks each resource's history in each segment against
// the model started from the segment's state, in parallel.
func (v *verifier) linearizable() {
	byPart := v.histories()
	parts := make([]partKey, 0, len(byPart))
	for k := range byPart {
		parts = append(parts, k)
	}
	slices.SortFunc(parts, func(a, b partKey) int { return cmp.Or(cmp.Compare(a.res, b.res), cmp.Compare(a.seg, b.seg)) })
	work := make(chan partKey)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				v.check(p.res, p.seg, byPart[p])
			}
		}()
	}
	for _, p := range parts {
		if !v.unsettled[p.res] {
			work <- p
		}
	}
	close(work)
	wg.Wait()
}

// partKey names a resource's history within one segment.
type partKey struct {
	res string
	seg int
}

func (v *verifier) check(res string, seg int, ops []Op) {
	init := v.segs[seg].init(res)
	start := time.Now()
	err := CheckFrom(init, ops, v.opts.Timeout)
	if took := time.Since(start); err == nil && took >= v.opts.Timeout {
		// porcupine notices its timeout only between steps: a check that
		// finished late is undecided, as one it stopped would be.
		err = fmt.Errorf("chaos: linearizability check took %s, over its %s timeout: undecided", took, v.opts.Timeout)
	}
	if err == nil {
		return
	}
	where := ""
	if len(v.segs) > 1 {
		where = fmt.Sprintf(" in segment %d (epoch %d)", seg, v.segs[seg].epoch)
	}
	v.add(InvLinearizable, res, "%v%s (%d operations)", err, where, len(ops))
	if v.opts.Visualize == nil {
		return
	}
	name := res
	if seg > 0 {
		name = fmt.Sprintf("%s-%d", res, seg)
	}
	w, verr := v.opts.Visualize(name)
	if verr == nil {
		verr = Visualize(init, ops, v.opts.Timeout, w)
		if cerr := w.Close(); verr == nil {
			verr = cerr
		}
	}
	if verr != nil {
		v.add(InvLinearizable, res, "could not write the visualization: %v", verr)
	}
}

// histories builds each resource's model operations per segment: placed
// publishes and reads, and seal raises seen by the watch. A seal raise
// happened between the time a lower bound gives (the time GC wrote into it,
// or the call of the publish whose Resolve raised it, but not before its
// segment started) and the moment the watch delivered it.
func (v *verifier) histories() map[partKey][]Op {
	out := map[partKey][]Op{}
	clients := map[partKey]map[string]int{} // porcupine client ids
	id := func(k partKey, client string) int {
		m := clients[k]
		if m == nil {
			m = map[string]int{}
			clients[k] = m
		}
		if i, ok := m[client]; ok {
			return i
		}
		m[client] = len(m)
		return m[client]
	}
	calls := map[string]int64{} // "res\x00key\x00version" → call of the publish
	for _, p := range v.h.Publishes {
		calls[p.Resource+"\x00"+p.Key+"\x00"+layout.EncodeVersion(p.Version)] = p.Call
	}
	for _, p := range v.placed {
		k := partKey{p.Resource, p.seg}
		in := Input{
			Kind: KindPublish, Resource: p.Resource, Key: p.Key, Digest: cmp.Or(p.RequestDigest, p.Digest), Version: p.Version,
			Authorized: v.authorized(&p.PublishOp), Strict: p.Strict,
		}
		if p.Base != nil {
			in.HasBase, in.Base = true, *p.Base
		}
		in.Group = p.Group != "" && !p.Refused
		o := Output{Outcome: p.Outcome}
		if p.Outcome == ResolvedNotApplied && v.first(p.PublishOp).ID != p.ID {
			// ResolveGroup raised the first member's seal only: on the
			// others the group left nothing.
			o.Outcome = Stale
		}
		if p.Outcome == Duplicate {
			o.Version = p.Result
		}
		out[k] = append(out[k], Op{Client: id(k, p.Client), Input: in, Output: o, Call: p.Call, Return: p.Return})
		if p.Outcome == Applied && !in.Authorized {
			v.add(InvUnauthorized, p.Resource, "publish %s at %s by owner %q was applied, but no grant of fence %d in epoch %d names that owner",
				p.ID, p.Version, p.Owner, p.Version.Fence, p.Version.Epoch)
		}
	}
	for _, r := range v.reads {
		k := partKey{r.Resource, r.seg}
		out[k] = append(out[k], Op{
			Client: id(k, r.Client), Input: Input{Kind: KindRead, Resource: r.Resource},
			Output: Output{Version: r.Version}, Call: r.Call, Return: r.Return,
		})
	}
	for _, c := range v.h.Changes {
		if c.Kind != ChangeSeal || c.Delete || c.Err != "" || c.Version.IsZero() {
			continue
		}
		s := v.segmentOfRevision(c.Revision)
		call := c.At
		if key, ok := strings.CutPrefix(c.Value, "resolve "); ok {
			call = calls[c.Resource+"\x00"+key+"\x00"+layout.EncodeVersion(c.Version)]
		}
		k := partKey{c.Resource, s}
		out[k] = append(out[k], Op{
			Client: id(k, "seal"), Input: Input{Kind: KindSeal, Resource: c.Resource, Version: c.Version},
			Call: min(max(call, v.segs[s].start), c.Seen), Return: c.Seen,
		})
	}
	return out
}

// keys returns the keys of m, formatted and sorted.
func keys[K comparable, V any](m map[K]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, fmt.Sprint(k))
	}
	slices.Sort(out)
	return out
}

// groups judges group publishes (DESIGN.md invariant 16) by what the
// watch saw and what the cuts read:
//
//   - group_partial: with a complete watch, the members whose pointer
//     held their version of a group publish are all of them when it was
//     applied, none otherwise (a version another publish applied does not
//     count: the seqs of a group publish that sent nothing go back).
//   - group_torn: with a complete watch, an applied group's members moved
//     at one revision Rg; a cut showing any member at its version of a
//     group publish shows every other member of it that it read at or
//     above that member's version of the group; and a cut read in Rg's
//     segment, in a cluster whose revisions did not restart (no
//     replacement of etcd before it), at a revision R shows every member
//     it read at or above the group's version when R >= Rg, below it when
//     R < Rg.
func (v *verifier) groups() {
	if len(v.group) == 0 {
		return
	}
	ids := keys(v.group)
	isApplied := func(m PublishOp) bool {
		p := v.applied[versionID{m.Resource, m.Version}]
		return p != nil && p.ID == m.ID
	}
	// The members of applied group publishes by version. (A version of a
	// group that was not applied may be another publish's: the seqs of a
	// group publish that sent nothing go back.)
	memberOf := map[versionID]string{}
	for _, id := range ids {
		if slices.ContainsFunc(v.group[id], isApplied) {
			for _, m := range v.group[id] {
				memberOf[versionID{m.Resource, m.Version}] = id
			}
		}
	}
	for _, c := range v.h.GroupCuts {
		at := map[string]CutPointer{}
		for _, p := range c.Pointers {
			at[p.Resource] = p
		}
		reported := map[string]bool{}
		for _, p := range c.Pointers {
			id, ok := memberOf[versionID{p.Resource, p.Version}]
			if !ok || p.Version.IsZero() || reported[id] {
				continue
			}
			for _, m := range v.group[id] {
				if got, read := at[m.Resource]; read && got.Version.Compare(m.Version) < 0 {
					reported[id] = true
					v.add(InvGroupTorn, m.Resource, "%s's cut at revision %d (%.3fs) shows %s at %s of group publish %s, but %s at %s, below the group's %s",
						c.Client, c.Revision, float64(c.Return)/1e9, p.Resource, p.Version, id, m.Resource, got.Version, m.Version)
					break
				}
			}
		}
	}
	if v.h.WatchGaps > 0 {
		return // reported by pointers()
	}
	moved := map[versionID][]int64{} // the revisions the pointer moved to a version at
	for _, c := range v.h.Changes {
		if c.Kind == ChangePointer && !c.Delete && c.Err == "" && !c.Version.IsZero() {
			id := versionID{c.Resource, c.Version}
			moved[id] = append(moved[id], c.Revision)
		}
	}
	for _, id := range ids {
		ms := v.group[id]
		settled := true
		var movedRes, still []string
		revs := map[int64]bool{}
		applied := slices.ContainsFunc(ms, isApplied)
		for _, m := range ms {
			if !m.Done || m.Outcome == Unknown || m.Outcome == "" {
				settled = false
			}
			vid := versionID{m.Resource, m.Version}
			if rs := moved[vid]; len(rs) > 0 && (applied || v.applied[vid] == nil) {
				// A move to a version of a group that was not applied
				// counts unless another publish applied that version.
				movedRes = append(movedRes, m.Resource)
				for _, r := range rs {
					revs[r] = true
				}
			} else {
				still = append(still, m.Resource)
			}
		}
		switch {
		case !settled: // reported by settled()
		case applied && len(still) > 0:
			v.add(InvGroupPartial, ms[0].Resource, "group publish %s (key %q) was applied, but the pointers of %v never held its versions (those of %v did)", id, ms[0].Key, still, movedRes)
		case !applied && len(movedRes) > 0:
			v.add(InvGroupPartial, ms[0].Resource, "group publish %s (key %q) ended %s, but the pointers of %v held its versions", id, ms[0].Key, ms[0].Outcome, movedRes)
		}
		if len(revs) > 1 {
			v.add(InvGroupTorn, ms[0].Resource, "the members of group publish %s (key %q) moved at %d revisions %v, not in one transaction", id, ms[0].Key, len(revs), keys(revs))
			continue
		}
		if !applied || len(still) > 0 || len(revs) != 1 {
			continue
		}
		var rg int64
		for r := range revs {
			rg = r
		}
		v.cutsAround(id, ms, rg)
	}
}

// cutsAround judges the cuts read in the segment of revision rg, where
// group publish id (members ms) committed, by their revisions: at or after
// rg every member read is at or above its version of the group, before rg
// below it. A cut read while a restore began or ended is left out, and so
// is every cut after a replacement of etcd, whose revisions restarted (the
// cut logs the new cluster's own).
func (v *verifier) cutsAround(id string, ms []PublishOp, rg int64) {
	seg := v.segmentOfRevision(rg)
	for i := range seg {
		if v.h.Restores[i].Replaced {
			return
		}
	}
	in := map[string]layout.Version{}
	for _, m := range ms {
		in[m.Resource] = m.Version
	}
	for _, c := range v.h.GroupCuts {
		if v.segmentOfTime(c.Call) != seg || c.Call < v.segs[seg].start || c.Return > v.segs[seg].end {
			continue
		}
		for _, p := range c.Pointers {
			want, ok := in[p.Resource]
			if !ok {
				continue
			}
			if after := c.Revision >= rg; after == (p.Version.Compare(want) < 0) {
				v.add(InvGroupTorn, p.Resource, "%s's cut at revision %d (%.3fs) shows %s at %s; group publish %s moved it to %s at revision %d",
					c.Client, c.Revision, float64(c.Return)/1e9, p.Resource, p.Version, id, want, rg)
				break
			}
		}
	}
}
