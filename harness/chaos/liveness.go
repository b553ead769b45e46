package chaos

import (
	"slices"
	"time"
)

// FaultLiveness is the liveness figure of one server fault's window, from
// the fault's start to its end (a restart and the wait for readiness
// included).
type FaultLiveness struct {
	Kind   FaultKind `json:"kind"`
	Target string    `json:"target"`
	Start  int64     `json:"start"`
	End    int64     `json:"end"`
	// QuorumUp: a quorum of both services served throughout (QuorumKept).
	QuorumUp bool `json:"quorum_up"`
	// Attempted counts the client operations (Attempt) that count in this
	// window (Liveness says which); Failed those of them that failed
	// because a service did not serve them. With QuorumUp, the goal for
	// Failed is 0 (DESIGN.md invariant 12).
	Attempted int `json:"attempted"`
	Failed    int `json:"failed"`
	// StoreDown counts the failed operations of a store-side window
	// (storeSide) during which the store served none of the canary's
	// writes, from the operation's call to ProbeSpan after it or its
	// return, whichever is later: the store did not serve, so a client
	// retrying until its deadline could not have succeeded. They are not
	// in Failed. An operation that gave up while the store served again
	// within that span is in Failed.
	StoreDown int `json:"store_down,omitempty"`
	// FirstSuccess is the time from the fault's start to the return of the
	// first operation that began at or after it and succeeded; -1 when none
	// did before the run ended.
	FirstSuccess time.Duration `json:"first_success"`
}

// KindLiveness sums the liveness figures of every window of one fault kind.
type KindLiveness struct {
	Windows   int  `json:"windows"`
	QuorumUp  bool `json:"quorum_up"`
	Attempted int  `json:"attempted"`
	Failed    int  `json:"failed"`
	StoreDown int  `json:"store_down,omitempty"`
	// FirstSuccessMax is the longest FirstSuccess of its windows (-1 when a
	// window had no success).
	FirstSuccessMax time.Duration `json:"first_success_max"`
}

// Liveness returns the liveness figure of each server and partition fault
// of h, in order of start. Operations of a worker process while a worker
// fault hit it (a pause, a kill, a skewed clock) or a partition cut it
// (its Target) are left out: they fail or stall because of that fault. A
// partition's window counts the operations of the majority side.
//
// Each operation counts in one window: the first it overlaps whose fault
// leaves a quorum down or the clients cut off (QuorumKept false), else the
// first it overlaps. An operation that began under a quorum-keeping fault
// and was still waiting when the next fault cut the quorum or the clients
// off failed, if it did, while no quorum was up.
func Liveness(h *History) []FaultLiveness {
	worker, partition := map[FaultKind]bool{}, map[FaultKind]bool{}
	for _, k := range WorkerFaults() {
		worker[k] = true
	}
	for _, k := range PartitionFaults() {
		partition[k] = true
	}
	var server, workerFaults []FaultRecord
	for _, f := range h.Faults {
		if worker[f.Kind] || partition[f.Kind] {
			workerFaults = append(workerFaults, f)
		}
		if !worker[f.Kind] {
			server = append(server, f)
		}
	}
	slices.SortFunc(server, func(a, b FaultRecord) int { return int(a.Start - b.Start) })
	hitByWorkerFault := func(a Attempt) bool {
		for _, f := range workerFaults {
			if f.Target == a.Client && a.Call <= f.End && a.Return >= f.Start {
				return true
			}
		}
		return false
	}
	overlaps := func(a Attempt, f FaultRecord) bool { return a.Call <= f.End && a.Return >= f.Start }
	// window returns the index in server of the window a counts in, or -1.
	window := func(a Attempt) int {
		first := -1
		for i, f := range server {
			if !overlaps(a, f) {
				continue
			}
			if !QuorumKept(f.Kind) {
				return i
			}
			if first < 0 {
				first = i
			}
		}
		return first
	}
	out := make([]FaultLiveness, len(server))
	firsts := make([]int64, len(server))
	for i, f := range server {
		out[i] = FaultLiveness{Kind: f.Kind, Target: f.Target, Start: f.Start, End: f.End, QuorumUp: QuorumKept(f.Kind), FirstSuccess: -1}
		firsts[i] = -1
	}
	for _, a := range h.Attempts {
		if hitByWorkerFault(a) {
			continue
		}
		for i, f := range server {
			if a.Call >= f.Start && !a.Failed && (firsts[i] < 0 || a.Return < firsts[i]) {
				firsts[i] = a.Return
			}
		}
		if i := window(a); i >= 0 {
			out[i].Attempted++
			switch {
			case !a.Failed:
			case storeSide(server[i].Kind) && !storeServed(h, a.Call, max(a.Return, a.Call+h.ProbeSpan)):
				out[i].StoreDown++
			default:
				out[i].Failed++
			}
		}
	}
	for i, first := range firsts {
		if first >= 0 {
			out[i].FirstSuccess = time.Duration(first - server[i].Start)
		}
	}
	return out
}

// storeSide reports whether a fault of kind k keeps the store's quorum
// while acting on the store alone (one MinIO node killed or stalled): its
// failed operations are judged against the store canary.
func storeSide(k FaultKind) bool { return k == MinIOKillNode || k == MinIOPauseNode }

// storeServed reports whether a write of h's store canary that began at
// or after from succeeded by to. A run without a canary (ProbeSpan 0)
// counts as served: every failure is then the client's.
func storeServed(h *History, from, to int64) bool {
	if h.ProbeSpan == 0 {
		return true
	}
	for _, p := range h.StoreProbes {
		if p.OK && p.Call >= from && p.Return <= to {
			return true
		}
	}
	return false
}

// sumLiveness sums ls by kind.
func sumLiveness(ls []FaultLiveness) map[FaultKind]KindLiveness {
	out := map[FaultKind]KindLiveness{}
	for _, l := range ls {
		k := out[l.Kind]
		if k.Windows == 0 || k.FirstSuccessMax >= 0 && (l.FirstSuccess < 0 || l.FirstSuccess > k.FirstSuccessMax) {
			k.FirstSuccessMax = l.FirstSuccess
		}
		k.Windows++
		k.QuorumUp = l.QuorumUp
		k.Attempted += l.Attempted
		k.Failed += l.Failed
		k.StoreDown += l.StoreDown
		out[l.Kind] = k
	}
	return out
}
