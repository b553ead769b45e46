package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Summary counts what a run did and found.
type Summary struct {
	Seed     int64         `json:"seed"`
	Duration time.Duration `json:"duration"`
	// Store is the object store's kind (Schedule.Store; empty: MinIO).
	Store string `json:"store,omitempty"`
	// Publishes counts publish operations by final outcome; Unknown how many
	// were reported unknown (and then settled by Resolve), Settled how many
	// open publishes of killed processes the harness settled, Forged how
	// many carried a token never granted to their owner on the resource.
	Publishes map[string]int `json:"publishes"`
	Unknown   int            `json:"unknown_resolved"`
	Settled   int            `json:"settled_by_harness"`
	Forged    int            `json:"forged"`
	// Reads counts reads logged; ReadProblems those with a missing object
	// that still existed at the end (a store glitch, not a deletion).
	Reads        int `json:"reads"`
	ReadProblems int `json:"read_problems"`
	// DatasetPublishes counts the dataset publishes (part of Publishes) by
	// final outcome, DatasetReused the files their applied versions reused;
	// DatasetReads counts the dataset reads of the run, DatasetSwept those
	// of the final sweep.
	DatasetPublishes map[string]int `json:"dataset_publishes"`
	DatasetReused    int64          `json:"dataset_reused"`
	DatasetReads     int            `json:"dataset_reads"`
	DatasetSwept     int            `json:"dataset_swept"`
	// DatasetUnpublished and DatasetUnjudged count the dataset reads not
	// logged: of a resource with nothing published yet, and failed ones
	// (a server that did not answer).
	DatasetUnpublished int `json:"dataset_reads_unpublished"`
	DatasetUnjudged    int `json:"dataset_reads_unjudged"`
	// GroupPublishes counts the group publishes (their members are part of
	// Publishes, one each) by final outcome, GroupMembers their members,
	// GroupUnknown those reported unknown (then settled by ResolveGroup);
	// GroupCuts counts the cuts read of group resources, GroupCutsUnjudged
	// those not logged (a resource not granted yet, a failed read).
	GroupPublishes    map[string]int `json:"group_publishes"`
	GroupMembers      int            `json:"group_members"`
	GroupUnknown      int            `json:"group_unknown_resolved"`
	GroupCuts         int            `json:"group_cuts"`
	GroupCutsUnjudged int            `json:"group_cuts_unjudged"`
	Grants            int            `json:"grants"`
	Resources         int            `json:"resources"`
	// Faults counts injected faults by kind; FaultErrors those that failed
	// to inject or heal.
	Faults      map[FaultKind]int `json:"faults"`
	FaultErrors int               `json:"fault_errors"`
	GCPasses    int               `json:"gc_passes"`
	GCDeleted   int64             `json:"gc_deleted"`
	GCSealed    int64             `json:"gc_sealed"`
	Objects     int               `json:"objects_checked"`
	Changes     int               `json:"etcd_changes"`
	Violations  int               `json:"violations"`
	// Liveness sums each server fault kind's liveness figures (Liveness);
	// QuorumUpFailures counts the operations that failed while a quorum
	// of both services was up, over every kind (goal: 0).
	Liveness         map[FaultKind]KindLiveness `json:"liveness"`
	QuorumUpFailures int                        `json:"quorum_up_failures"`
	// CheckTime is how long Verify took.
	CheckTime time.Duration `json:"check_time"`
}

// Summarize counts h.
func Summarize(h *History, s Schedule, v []Violation, check time.Duration) Summary {
	sum := Summary{
		Seed: s.Seed, Duration: s.Duration, Store: s.Store, Publishes: map[string]int{}, Faults: map[FaultKind]int{},
		DatasetPublishes: map[string]int{}, GroupPublishes: map[string]int{}, GroupCuts: len(h.GroupCuts), Reads: len(h.Reads), Grants: len(h.Grants), Objects: h.Objects, Changes: len(h.Changes),
		Violations: len(v), CheckTime: check,
	}
	resources := map[string]bool{}
	groups := map[string]bool{}
	for _, p := range h.Publishes {
		if p.Group != "" {
			sum.GroupMembers++
			if !groups[p.Group] {
				groups[p.Group] = true
				sum.GroupPublishes[p.Outcome]++
				if p.Reported == Unknown {
					sum.GroupUnknown++
				}
			}
		}
		sum.Publishes[p.Outcome]++
		resources[p.Resource] = true
		if p.Reported == Unknown {
			sum.Unknown++
		}
		if p.ResolvedBy == "harness" {
			sum.Settled++
		}
		if p.Forged {
			sum.Forged++
		}
		if p.Files != nil {
			sum.DatasetPublishes[p.Outcome]++
			if p.Outcome == Applied {
				sum.DatasetReused += p.Reused
			}
		}
	}
	sum.DatasetUnpublished, sum.DatasetUnjudged = h.Counters[countDatasetUnpublished], h.Counters[countDatasetUnjudged]
	sum.GroupCutsUnjudged = h.Counters[countCutUnknownResource] + h.Counters[countCutFailed]
	for _, r := range h.DatasetReads {
		if r.Client == DatasetSweep {
			sum.DatasetSwept++
		} else {
			sum.DatasetReads++
		}
	}
	sum.Resources = len(resources)
	for _, r := range h.Reads {
		if r.Problem == ReadMissing && !slices.Contains(h.Missing, r.Object) {
			sum.ReadProblems++
		}
	}
	for _, f := range h.Faults {
		sum.Faults[f.Kind]++
		if f.Err != "" {
			sum.FaultErrors++
		}
	}
	sum.Liveness = sumLiveness(Liveness(h))
	for _, l := range sum.Liveness {
		if l.QuorumUp {
			sum.QuorumUpFailures += l.Failed
		}
	}
	for _, p := range h.GCPasses {
		sum.GCPasses++
		sum.GCDeleted += p.Deleted
		sum.GCSealed += p.Sealed
	}
	return sum
}

// sumCounts returns the sum of m's counts.
func sumCounts(m map[string]int) int {
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

// Print writes s as a few lines of text, in one write.
func (s Summary) Print(w io.Writer) {
	var b strings.Builder
	total := sumCounts(s.Publishes)
	fmt.Fprintf(&b, "chaos seed %d, %s\n", s.Seed, s.Duration)
	fmt.Fprintf(&b, "  publishes %d on %d resources:", total, s.Resources)
	for _, o := range []string{Applied, Duplicate, Conflict, Stale, ResolvedNotApplied, Failed, Unknown} {
		if n := s.Publishes[o]; n > 0 {
			fmt.Fprintf(&b, " %s %d", o, n)
		}
	}
	fmt.Fprintf(&b, "\n  unknown then resolved %d (by the harness after a kill %d), forged tokens %d\n", s.Unknown, s.Settled, s.Forged)
	fmt.Fprintf(&b, "  reads %d (transient missing-object errors %d), grants %d, etcd changes watched %d\n", s.Reads, s.ReadProblems, s.Grants, s.Changes)
	fmt.Fprintf(&b, "  dataset publishes %d:", sumCounts(s.DatasetPublishes))
	for _, o := range []string{Applied, Duplicate, Conflict, Stale, ResolvedNotApplied, Failed, Unknown} {
		if n := s.DatasetPublishes[o]; n > 0 {
			fmt.Fprintf(&b, " %s %d", o, n)
		}
	}
	fmt.Fprintf(&b, "; files reused %d\n  dataset reads %d (not logged: nothing published yet %d, failed %d), files and manifests swept at the end %d\n",
		s.DatasetReused, s.DatasetReads, s.DatasetUnpublished, s.DatasetUnjudged, s.DatasetSwept)
	fmt.Fprintf(&b, "  group publishes %d (%d members):", sumCounts(s.GroupPublishes), s.GroupMembers)
	for _, o := range []string{Applied, Duplicate, Conflict, Stale, ResolvedNotApplied, Failed, Unknown} {
		if n := s.GroupPublishes[o]; n > 0 {
			fmt.Fprintf(&b, " %s %d", o, n)
		}
	}
	fmt.Fprintf(&b, "; unknown then resolved %d; cuts read %d (not logged: a member not granted yet or a failed read %d)\n", s.GroupUnknown, s.GroupCuts, s.GroupCutsUnjudged)
	fmt.Fprintf(&b, "  gc passes %d: deleted %d, sealed %d; objects checked at the end %d\n", s.GCPasses, s.GCDeleted, s.GCSealed, s.Objects)
	var faults []string
	n := 0
	for _, k := range append(append(WorkerFaults(), ServerFaultsOf(s.Store)...), PartitionFaults()...) {
		if s.Faults[k] == 0 && slices.Contains(PartitionFaults(), k) {
			continue // a run without a Network
		}
		faults = append(faults, fmt.Sprintf("%s %d", k, s.Faults[k]))
		n += s.Faults[k]
	}
	fmt.Fprintf(&b, "  faults %d (%d failed to inject or heal): %s\n", n, s.FaultErrors, strings.Join(faults, ", "))
	fmt.Fprintf(&b, "  liveness (operations attempted / failed during each fault kind's windows, slowest first success after a fault):\n")
	for _, k := range append(ServerFaultsOf(s.Store), PartitionFaults()...) {
		l, ok := s.Liveness[k]
		if !ok {
			continue
		}
		quorum := "quorum down or clients cut off"
		if l.QuorumUp {
			quorum = "quorum up"
		}
		first := "none"
		if l.FirstSuccessMax >= 0 {
			first = l.FirstSuccessMax.Round(time.Millisecond).String()
		}
		down := ""
		if l.StoreDown > 0 {
			down = fmt.Sprintf(" (and %d while the store served the canary no write)", l.StoreDown)
		}
		fmt.Fprintf(&b, "    %-20s %2d windows, %s: %d attempted, %d failed%s, first success within %s\n", k, l.Windows, quorum, l.Attempted, l.Failed, down, first)
	}
	fmt.Fprintf(&b, "  failures while a quorum was up %d\n", s.QuorumUpFailures)
	fmt.Fprintf(&b, "  violations %d (checked in %s)\n", s.Violations, s.CheckTime.Round(time.Millisecond))
	_, _ = io.WriteString(w, b.String())
}

// Failure is the content of a failure file: enough to understand a
// violation and to replay its schedule (`make chaos SEED=... DURATION=...`).
type Failure struct {
	Seed       int64       `json:"seed"`
	Duration   string      `json:"duration"`
	Replay     string      `json:"replay"`
	Summary    Summary     `json:"summary"`
	Violations []Violation `json:"violations"`
	Schedule   Schedule    `json:"schedule"`
	History    *History    `json:"history"`
}

// writeFailure writes dir/chaos-failure-<seed>.json and returns its path.
func writeFailure(dir string, r *Result) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	f := Failure{
		Seed: r.Schedule.Seed, Duration: r.Schedule.Duration.String(),
		Replay:  fmt.Sprintf("make chaos SEED=%d DURATION=%s", r.Schedule.Seed, r.Schedule.Duration),
		Summary: r.Summary, Violations: r.Violations, Schedule: r.Schedule, History: r.History,
	}
	b, err := json.MarshalIndent(f, "", " ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, fmt.Sprintf("chaos-failure-%d.json", r.Schedule.Seed))
	return path, os.WriteFile(path, b, 0o644)
}
