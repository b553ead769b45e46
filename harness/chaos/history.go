package chaos

import (
	"fmt"
	"slices"
	"sync"

	"github.com/fencepub/fencepub/internal/layout"
)

// History is everything a run logged, in the form Verify judges and the
// failure file stores. Times are run times (Clock.Now, nanoseconds).
type History struct {
	Namespace layout.Namespace `json:"namespace"`
	// Epoch is the domain's epoch during the run (the model's initial
	// state; no restore happens within a history).
	Epoch     uint64        `json:"epoch"`
	Grants    []GrantEvent  `json:"grants"`
	Publishes []PublishOp   `json:"publishes"`
	Reads     []ReadOp      `json:"reads"`
	Changes   []Change      `json:"changes"`
	Faults    []FaultRecord `json:"faults"`
	GCPasses  []GCPass      `json:"gc_passes"`
	Anomalies []Anomaly     `json:"anomalies"`
	// Attempts is every acquire, publish and read of the workers and
	// readers, for the liveness figures (Liveness).
	Attempts []Attempt `json:"attempts"`
	// Restores are the etcd restores of the run, in order; the history is
	// split at each (Verify judges each part from the state the restore
	// left).
	Restores []RestoreEvent `json:"restores"`
	// Missing lists the object keys that an applied publish or a read named
	// and that no longer existed when the run ended (the harness's final
	// listing); nil when the listing was not made.
	Missing []string `json:"missing"`
	// Objects counts the objects the final listing checked.
	Objects int `json:"objects_checked"`
	// WatchGaps counts the times the etcd watch lost events (compaction):
	// the checks that need every change cannot run, and Verify reports
	// InvWatchComplete.
	WatchGaps int `json:"watch_gaps"`
	// Counters holds informative counts (read errors by kind, ...).
	Counters map[string]int `json:"counters"`
	// DatasetReads is every read of a dataset resource's file or manifest:
	// the readers' during the run and the final sweep's (DatasetSweep).
	DatasetReads []DatasetRead `json:"dataset_reads,omitempty"`
	// GroupCuts is every read of a group's member resources at one etcd
	// revision (reader.ReadCut).
	GroupCuts []GroupCut `json:"group_cuts,omitempty"`
	// StoreProbes is every write of the store canary (storeCanary): the
	// baseline that tells a store which served no write from a client that
	// gave up while it did (Liveness).
	StoreProbes []StoreProbe `json:"store_probes,omitempty"`
	// ProbeSpan is how long after an operation's call the canary must have
	// had no write served for the operation's failure to be the store's
	// (the workload's publish deadline); 0 when the run had no canary.
	ProbeSpan int64 `json:"probe_span,omitempty"`
}

// StoreProbe is one create-only write of a small object by the store
// canary, outside the domain, through the clients' path to the store.
type StoreProbe struct {
	Call   int64 `json:"call"`
	Return int64 `json:"return"`
	OK     bool  `json:"ok"`
}

// GroupCut is one read of the pointers of several resources at one etcd
// revision (reader.ReadCut), logged when it succeeded.
type GroupCut struct {
	Client string `json:"client"`
	Call   int64  `json:"call"`
	Return int64  `json:"return"`
	// Revision is the cut's etcd revision as the cluster of the time
	// numbered it (a replaced cluster starts again at 1).
	Revision int64 `json:"revision"`
	// Pointers are the resources' pointers in name order.
	Pointers []CutPointer `json:"pointers"`
}

// CutPointer is one resource's pointer in a GroupCut: its version (zero:
// nothing published), object key and the object's sha256.
type CutPointer struct {
	Resource string         `json:"resource"`
	Version  layout.Version `json:"version"`
	Object   string         `json:"object,omitempty"`
	SHA      string         `json:"sha256,omitempty"`
}

// GrantEvent is one grant a worker got from the authority.
type GrantEvent struct {
	Client    string `json:"client"`
	Time      int64  `json:"t"`
	Resource  string `json:"resource"`
	Owner     string `json:"owner"`
	RequestID string `json:"request_id"`
	Epoch     uint64 `json:"epoch"`
	Fence     uint64 `json:"fence"`
	// Expired: Acquire returned the grant of a retried request id together
	// with authority.ErrExpired. The grant was made; it may still publish.
	Expired bool `json:"expired,omitempty"`
}

// Attempt is one client operation as the liveness figures count it: an
// acquire, a publish or a read (Op), from its call to its return.
type Attempt struct {
	Client string `json:"client"`
	Op     string `json:"op"`
	Call   int64  `json:"call"`
	Return int64  `json:"return"`
	// Failed: the operation failed because a service did not serve it
	// (fencepub.ErrUnavailable, a publish whose outcome was unknown, or one
	// whose object write ran out of its deadline before it was sent). A
	// refused or lost lease, a stale or conflicting publish are answers.
	Failed bool `json:"failed,omitempty"`
	// Err is the error of a failed operation.
	Err string `json:"err,omitempty"`
}

// newAttempt returns the Attempt of op by client from call to now on clock,
// failed when failed holds (Err: err's text).
func newAttempt(clock Clock, client, op string, call int64, failed bool, err error) Attempt {
	a := Attempt{Client: client, Op: op, Call: call, Return: clock.Now(), Failed: failed}
	if failed && err != nil {
		a.Err = err.Error()
	}
	return a
}

// Publish outcomes besides the model's (Applied, Duplicate, Conflict, Stale,
// Unknown, ResolvedNotApplied).
const (
	// Failed: Publish returned an error that means the transaction was never
	// sent (objstore errors, ...): nothing was published. Not part of the
	// linearizability check; the pointer watch would expose it if it applied.
	Failed = "failed"
)

// PublishOp is one publish attempt from invoke to its final outcome.
type PublishOp struct {
	ID       string `json:"id"` // "<client>/<n>", unique in the run
	Client   string `json:"client"`
	Resource string `json:"resource"`
	Key      string `json:"key"`
	// Digest is the hex sha256 of the body (what a reader must read back).
	// The model compares RequestDigest, as op records hold it; a history
	// written before that field existed falls back to Digest.
	Digest  string         `json:"digest"`
	Size    int64          `json:"size"`
	Owner   string         `json:"owner"`
	Version layout.Version `json:"version"`
	Strict  bool           `json:"strict,omitempty"`
	// Forged marks a publish made with a token the authority never granted
	// to this owner on this resource (the checker derives authorization from
	// the grants, not from this flag).
	Forged bool  `json:"forged,omitempty"`
	Call   int64 `json:"call"`
	Return int64 `json:"return"`
	Done   bool  `json:"done"`
	// Reported is what Publish returned (an Outcome, Unknown or Failed);
	// empty when the worker process died first.
	Reported string `json:"reported"`
	// Outcome is the final outcome: Reported, or what Resolve settled an
	// unknown (or a dead worker's open publish) as; Unknown if it could not.
	Outcome string `json:"outcome"`
	Reason  string `json:"reason,omitempty"`
	// Result is the version that applied the key (duplicate), or Version.
	Result layout.Version `json:"result"`
	// Object is the object key of the result (applied: this attempt's).
	Object string `json:"object,omitempty"`
	// ResolvedBy is "worker" or "harness" when Resolve settled the outcome.
	ResolvedBy string `json:"resolved_by,omitempty"`
	Err        string `json:"err,omitempty"`

	// RequestDigest is the request digest as Publish computes it: Resolve
	// names the attempt by it (and by Object when known).
	RequestDigest string `json:"request_digest,omitempty"`

	// Files, set for a dataset publish only, are the entries of its
	// manifest in path order: what a read of the version must find. Object
	// is then the manifest's key.
	Files []FileEntry `json:"files,omitempty"`
	// Base is the version a dataset publish reused files from, which its
	// transaction required the pointer to be (DESIGN.md invariant 15); nil
	// when it reused nothing (BaseNone, or the pointer was no dataset).
	Base *layout.Version `json:"base,omitempty"`
	// Reused counts the files a dataset publish named from its base.
	Reused int64 `json:"reused,omitempty"`

	// Group, set for a member of a group publish only, is the group
	// publish's id, the same in each of its members' records (one per
	// member resource). Key is the group's key, RequestDigest its group
	// digest (what the op record under the first member in name order
	// holds), and Outcome the group's.
	Group string `json:"group,omitempty"`
	// Refused marks the member a stale group result named as the one that
	// refused it.
	Refused bool `json:"refused,omitempty"`
	// Revision is the etcd revision of the group result (its deciding
	// transaction, or the read of ResolveGroup), as the cluster of the time
	// numbered it; 0 when none.
	Revision int64 `json:"revision,omitempty"`
}

// FileEntry is one file of a dataset manifest as the checker compares it.
type FileEntry struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Dataset read problems (DatasetRead.Problem), besides ReadMissing,
// ReadChanged and ReadDigest.
const (
	// ReadNoSuchFile: reader.ErrNoSuchFile, the version's manifest has no
	// such path.
	ReadNoSuchFile = "no_such_file"
	// ReadNotDataset: reader.ErrNotDataset, the version is a single object.
	ReadNotDataset = "not_dataset"
)

// DatasetSweep is the Client of the DatasetReads of the final sweep: every
// file of every retained version of each dataset resource, read once the
// run is over and the cluster healed.
const DatasetSweep = "sweep"

// DatasetRead is one read of a dataset resource: one file by path
// (reader.OpenFile for the current version, reader.OpenPointerFile for a
// retained older one), or its manifest listed (reader.Files: Path empty).
type DatasetRead struct {
	Client   string `json:"client"`
	Resource string `json:"resource"`
	Call     int64  `json:"call"`
	Return   int64  `json:"return"`
	// Version is the version read (zero: nothing published yet).
	Version layout.Version `json:"version"`
	// Retained marks a read of a version taken from the resource's history
	// (reader.History) rather than the current pointer.
	Retained bool `json:"retained,omitempty"`
	// Path is the file read; empty for a listing.
	Path string `json:"path,omitempty"`
	// SHA and Size are what the harness hashed and counted of the bytes
	// read.
	SHA  string `json:"sha256,omitempty"`
	Size int64  `json:"size,omitempty"`
	// Listing is the manifest as reader.Files yielded it (a listing).
	Listing []FileEntry `json:"listing,omitempty"`
	// Problem is a read problem (ReadMissing, ReadChanged, ReadDigest,
	// ReadNoSuchFile, ReadNotDataset); Err holds the error.
	Problem string `json:"problem,omitempty"`
	Err     string `json:"err,omitempty"`
}

// Read problems (ReadOp.Problem).
const (
	// ReadMissing: reader.ErrObjectMissing, the pointer's object is gone.
	ReadMissing = "missing"
	// ReadChanged: reader.ErrObjectChanged.
	ReadChanged = "changed"
	// ReadDigest: reader.ErrDigestMismatch.
	ReadDigest = "digest"
	// ReadWentBack: reader.ErrWentBack, the pointer is below a version the
	// Reader returned before; only an etcd restore since the Reader's
	// previous read (ReadOp.After) explains it.
	ReadWentBack = "went_back"
)

// ReadOp is one read of a resource through reader.Open, logged when the
// pointer read succeeded or the read failed with one of the Read problems.
type ReadOp struct {
	Client   string `json:"client"`
	Resource string `json:"resource"`
	Call     int64  `json:"call"`
	Return   int64  `json:"return"`
	// Version is the pointer's version (zero: nothing published).
	Version    layout.Version `json:"version"`
	Object     string         `json:"object,omitempty"`
	PointerSHA string         `json:"pointer_sha256,omitempty"`
	// SHA is the hex sha256 of the bytes read, computed by the harness.
	SHA string `json:"sha256,omitempty"`
	// Problem is set when the read failed in a way that matters (ReadMissing,
	// ReadChanged, ReadDigest, ReadWentBack); Err holds the error.
	Problem string `json:"problem,omitempty"`
	Err     string `json:"err,omitempty"`
	// After is the call time of the previous Open of the same Reader (its
	// creation time for the first): a went-back read is legal only if an
	// etcd restore lies between it and this read.
	After int64 `json:"after,omitempty"`
}

// ChangeKind names the etcd key a Change is about.
type ChangeKind string

// Kinds of Change, from the watch on the domain's root.
const (
	ChangePointer    ChangeKind = "pointer"
	ChangeSeal       ChangeKind = "seal"
	ChangeOpRecord   ChangeKind = "op"
	ChangeGrant      ChangeKind = "grant"
	ChangeGeneration ChangeKind = "generation"
	ChangeEpoch      ChangeKind = "epoch"
)

// Change is one etcd event on a key the checker follows, as the harness's
// watch received it.
type Change struct {
	Kind     ChangeKind `json:"kind"`
	Resource string     `json:"resource,omitempty"`
	Key      string     `json:"key,omitempty"` // idempotency key (op records)
	// Version is the pointer's, seal's or op record's version.
	Version layout.Version `json:"version"`
	// Number is the fence of a grant record, the value of a generation or
	// epoch key.
	Number uint64 `json:"number,omitempty"`
	// Value is a grant record's value, a seal's reason or an op record's
	// digest.
	Value string `json:"value,omitempty"`
	// Object is the pointer's or op record's object key; Owner the owner
	// that published it.
	Object string `json:"object,omitempty"`
	Owner  string `json:"owner,omitempty"`
	// At bounds from below the real time of a seal change (ns): the time
	// written into the seal value, or the call time of the publish whose
	// Resolve raised it; 0 when unknown.
	At        int64  `json:"at,omitempty"`
	Revision  int64  `json:"revision"`
	KVVersion int64  `json:"kv_version"` // etcd's per-key version: 1 for a creation
	Delete    bool   `json:"delete,omitempty"`
	Seen      int64  `json:"seen"` // when the watch delivered it
	Err       string `json:"err,omitempty"`
}

// FaultRecord is one injected fault as it happened.
type FaultRecord struct {
	Kind   FaultKind `json:"kind"`
	Target string    `json:"target"`
	Start  int64     `json:"start"`
	End    int64     `json:"end"`
	Detail string    `json:"detail,omitempty"`
	Err    string    `json:"err,omitempty"`
}

// RestoreEvent is one etcd restore from an older snapshot followed by
// recovery.Recover. Every client was cut off from etcd from Start to End,
// so no operation took effect in between.
type RestoreEvent struct {
	Snapshot int64 `json:"snapshot"` // when the snapshot was taken
	Start    int64 `json:"start"`
	End      int64 `json:"end"`
	// Revision is the last revision before the restore: the watched changes
	// at or below it happened before, those above it after (the restore
	// bumps revisions past every revision used before).
	Revision int64  `json:"revision"`
	OldEpoch uint64 `json:"old_epoch"`
	NewEpoch uint64 `json:"new_epoch"`
	// States is every resource's state once Recover finished: the state the
	// part of the history after the restore starts from. A resource absent
	// here starts with nothing published.
	States map[string]InitialState `json:"states"`
	// Replaced marks a replacement of etcd by an empty cluster (EtcdReplaced):
	// a restore of history to nothing, Snapshot == Start. Recover took the
	// bucket over (recovery.Options.FromBucket) and NewEpoch is above every
	// epoch before.
	Replaced bool `json:"replaced,omitempty"`
}

// GCPass is one GC pass run concurrently with the workload.
type GCPass struct {
	Collector int    `json:"collector"`
	Start     int64  `json:"start"`
	End       int64  `json:"end"`
	Resources int    `json:"resources"`
	Deleted   int64  `json:"deleted"`
	Sealed    int64  `json:"sealed"`
	Errors    int    `json:"errors"`
	Err       string `json:"err,omitempty"`
}

// Anomaly is an error a component returned that can only mean a broken
// invariant somewhere (a rollback reported without a restore, an object
// under a key that is not the one written, a corrupt record, a GC refusing
// its own deployment). Every anomaly fails the run.
type Anomaly struct {
	Client string `json:"client"`
	Time   int64  `json:"t"`
	What   string `json:"what"`
	Err    string `json:"err"`
	// AfterRestore marks an error that an etcd restore explains when one
	// lies between Since and Time: a resource whose pointer and seal the
	// restore took away (created after the snapshot) answers publishes with
	// fencepub.ErrNotInitialized until it is bound again.
	AfterRestore bool `json:"after_restore,omitempty"`
	// Since is when the component that returned the error was set up (the
	// start of the publisher's Bind).
	Since int64 `json:"since,omitempty"`
}

// sink receives a worker's events: the Recorder in the harness process, a
// JSON-lines writer in a worker process.
type sink interface {
	Grant(GrantEvent)
	Invoke(PublishOp)
	Complete(PublishOp)
	Anomaly(Anomaly)
	Attempt(Attempt)
}

// Recorder collects a run's history. It is safe for concurrent use.
type Recorder struct {
	clock Clock

	mu   sync.Mutex
	h    History
	open map[string]int // publish id → index in h.Publishes
}

// NewRecorder returns an empty Recorder for a run of domain ns in epoch,
// timed by clock.
func NewRecorder(ns layout.Namespace, epoch uint64, clock Clock) *Recorder {
	return &Recorder{
		clock: clock,
		h:     History{Namespace: ns, Epoch: epoch, Counters: map[string]int{}},
		open:  map[string]int{},
	}
}

// appendLocked appends x to *list, a slice of r.h, under r.mu.
func appendLocked[T any](r *Recorder, list *[]T, x T) {
	r.mu.Lock()
	*list = append(*list, x)
	r.mu.Unlock()
}

// StoreProbe logs a write of the store canary.
func (r *Recorder) StoreProbe(p StoreProbe) { appendLocked(r, &r.h.StoreProbes, p) }

// Clock returns the run's clock.
func (r *Recorder) Clock() Clock { return r.clock }

// Grant logs a grant.
func (r *Recorder) Grant(g GrantEvent) { appendLocked(r, &r.h.Grants, g) }

// Invoke logs the start of a publish; Complete closes it by ID.
func (r *Recorder) Invoke(p PublishOp) {
	r.mu.Lock()
	r.open[p.ID] = len(r.h.Publishes)
	r.h.Publishes = append(r.h.Publishes, p)
	r.mu.Unlock()
}

// Complete logs the end of a publish invoked earlier (matched by ID); a
// PublishOp that is not Done updates the open record.
func (r *Recorder) Complete(p PublishOp) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, ok := r.open[p.ID]
	if !ok {
		r.h.Publishes = append(r.h.Publishes, p)
		return
	}
	r.h.Publishes[i] = p
	if p.Done {
		delete(r.open, p.ID)
	}
}

// Anomaly logs an anomaly.
func (r *Recorder) Anomaly(a Anomaly) { appendLocked(r, &r.h.Anomalies, a) }

// Attempt logs a client operation for the liveness figures.
func (r *Recorder) Attempt(a Attempt) { appendLocked(r, &r.h.Attempts, a) }

// OpenPublishes returns the publishes of client that were invoked and not
// completed (a killed worker's last one).
func (r *Recorder) OpenPublishes(client string) []PublishOp {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []PublishOp
	for _, i := range r.open {
		if p := r.h.Publishes[i]; p.Client == client {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b PublishOp) int { return int(a.Call - b.Call) })
	return out
}

// InFlight returns the number of publishes invoked and not yet completed.
func (r *Recorder) InFlight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.open)
}

// Read logs a read.
func (r *Recorder) Read(o ReadOp) { appendLocked(r, &r.h.Reads, o) }

// DatasetRead logs a read of a dataset resource.
func (r *Recorder) DatasetRead(o DatasetRead) { appendLocked(r, &r.h.DatasetReads, o) }

// GroupCut logs a read of several resources at one revision.
func (r *Recorder) GroupCut(c GroupCut) { appendLocked(r, &r.h.GroupCuts, c) }

// Change logs a watch event.
func (r *Recorder) Change(c Change) { appendLocked(r, &r.h.Changes, c) }

// Fault logs an injected fault.
func (r *Recorder) Fault(f FaultRecord) { appendLocked(r, &r.h.Faults, f) }

// GC logs a GC pass.
func (r *Recorder) GC(p GCPass) { appendLocked(r, &r.h.GCPasses, p) }

// Restore logs an etcd restore.
func (r *Recorder) Restore(e RestoreEvent) { appendLocked(r, &r.h.Restores, e) }

// Count adds n to the informative counter name.
func (r *Recorder) Count(name string, n int) {
	r.mu.Lock()
	r.h.Counters[name] += n
	r.mu.Unlock()
}

// WatchGap records that the watch lost events.
func (r *Recorder) WatchGap() {
	r.mu.Lock()
	r.h.WatchGaps++
	r.mu.Unlock()
}

// SetObjects records the final listing: how many objects were checked and
// which were missing.
func (r *Recorder) SetObjects(checked int, missing []string) {
	r.mu.Lock()
	r.h.Objects, r.h.Missing = checked, missing
	r.mu.Unlock()
}

// recentGrants returns up to n of the latest grants (the forger borrows
// their tokens for other resources).
func (r *Recorder) recentGrants(n int) []GrantEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.h.Grants[max(0, len(r.h.Grants)-n):])
}

// progress describes the counts logged so far in one line.
func (r *Recorder) progress() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprintf("publishes %d reads %d dataset reads %d group cuts %d grants %d faults %d gc passes %d restores %d",
		len(r.h.Publishes), len(r.h.Reads), len(r.h.DatasetReads), len(r.h.GroupCuts), len(r.h.Grants), len(r.h.Faults), len(r.h.GCPasses), len(r.h.Restores))
}

// History returns a copy of everything logged so far.
func (r *Recorder) History() *History {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.h
	h.Grants = slices.Clone(r.h.Grants)
	h.Publishes = slices.Clone(r.h.Publishes)
	h.Reads = slices.Clone(r.h.Reads)
	h.Changes = slices.Clone(r.h.Changes)
	h.Faults = slices.Clone(r.h.Faults)
	h.GCPasses = slices.Clone(r.h.GCPasses)
	h.Anomalies = slices.Clone(r.h.Anomalies)
	h.Attempts = slices.Clone(r.h.Attempts)
	h.Restores = slices.Clone(r.h.Restores)
	h.Missing = slices.Clone(r.h.Missing)
	h.DatasetReads = slices.Clone(r.h.DatasetReads)
	h.GroupCuts = slices.Clone(r.h.GroupCuts)
	h.StoreProbes = slices.Clone(r.h.StoreProbes)
	h.Counters = make(map[string]int, len(r.h.Counters))
	for k, v := range r.h.Counters {
		h.Counters[k] = v
	}
	return &h
}
