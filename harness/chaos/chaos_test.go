//go:build !unit

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

// TestMain runs the binary as a worker process when the harness started it
// as one, and otherwise starts the shared servers and the tests.
func TestMain(m *testing.M) {
	if IsWorker() {
		os.Exit(WorkerMain())
	}
	testenv.Main(m)
}

// livenessGoal is the fault kinds during which no operation may fail: an
// etcd member stalled, one MinIO node of four killed (DESIGN.md invariant
// 12).
var livenessGoal = map[FaultKind]bool{
	EtcdPauseMember: true, EtcdPauseLeader: true, EtcdPauseFollower: true, MinIOKillNode: true,
}

// logWriter passes each write to t.Log.
type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestChaos is the bounded chaos run: for every seed, the
// full workload and fault schedule against real servers, judged by Verify.
// Any violation fails the test and leaves chaos-failure-<seed>.json in
// $TMPDIR/fencepub-chaos; `make chaos SEED=<seed> DURATION=30s` replays the
// schedule. It also checks that the runs made progress, that every fault was
// injected and healed, and (on the first seed's real history that has a
// resource with two applied versions seen by readers; one run at least must
// have one) that Verify rejects histories a broken implementation would have
// produced; likewise for datasets, on the first history with an applied
// incremental dataset publish whose files the final sweep read.
func TestChaos(t *testing.T) {
	lc := testenv.StartCluster(t, Topology)
	cl := &Cluster{Etcd: lc.Etcd, MinIO: lc.MinIO}
	random := rand.Int64N(1_000_000_000)
	t.Logf("random seed %d (replay: make chaos SEED=%d DURATION=%s)", random, random, ciDuration)
	failures := filepath.Join(os.TempDir(), "fencepub-chaos")
	injected := map[FaultKind]int{}
	mutated, mutatedDatasets, mutatedGroups := false, false, false
	for _, seed := range append(slices.Clone(ciSeeds), random) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			res, err := Run(ctx, Config{
				Cluster: cl, Seed: seed, Duration: ciDuration, Processes: ciProcesses,
				Dir: t.TempDir(), FailureDir: failures, Progress: logWriter{t},
			})
			if err != nil {
				t.Fatal(err)
			}
			checkRun(t, res, fmt.Sprintf("make chaos SEED=%d DURATION=%s", seed, ciDuration))
			s := res.Summary
			for _, k := range ServerFaults() {
				if l, ok := s.Liveness[k]; ok {
					t.Logf("liveness %s: %+v", k, l)
					if livenessGoal[k] && l.Failed > 0 {
						t.Errorf("%d of %d operations failed during %s while a quorum of etcd and MinIO was up (DESIGN.md invariant 12)", l.Failed, l.Attempted, k)
						logFailed(t, res.History, k)
					}
				}
			}
			for _, f := range res.History.Faults {
				injected[f.Kind]++
				if f.Err != "" {
					t.Errorf("fault %s on %s failed: %s", f.Kind, f.Target, f.Err)
				}
			}
			if !mutated {
				mutated = checkMutations(t, res.History)
			}
			if !mutatedDatasets {
				mutatedDatasets = checkDatasetMutations(t, res.History)
			}
			if !mutatedGroups {
				mutatedGroups = checkGroupMutations(t, res.History)
			}
		})
	}
	if !mutated {
		t.Errorf("no run had a resource with two applied publishes seen by readers: Verify was not tried on broken histories")
	}
	if !mutatedDatasets {
		t.Errorf("no run had an applied incremental dataset publish whose files were read and swept: Verify was not tried on broken dataset histories")
	}
	if !mutatedGroups {
		t.Errorf("no run had an applied group publish that a cut read: Verify was not tried on broken group histories")
	}
	for _, k := range append(ServerFaults(), WorkerFaults()...) {
		if injected[k] == 0 {
			t.Errorf("no %s was injected", k)
		}
	}
}

// logFailed logs the failed operations of h that overlap a fault of kind
// k: which client, what and why.
func logFailed(t *testing.T, h *History, k FaultKind) {
	t.Helper()
	for _, a := range h.Attempts {
		if a.Failed && slices.ContainsFunc(h.Faults, func(f FaultRecord) bool { return f.Kind == k && f.Start <= a.Return && a.Call <= f.End }) {
			t.Logf("failed during %s: %s %s from %.3fs to %.3fs: %s", k, a.Client, a.Op, float64(a.Call)/1e9, float64(a.Return)/1e9, a.Err)
		}
	}
}

// checkRun fails t for a run with violations (naming the failure file and
// replay, the command that replays it) or with too little progress.
func checkRun(t *testing.T, res *Result, replay string) {
	t.Helper()
	for _, v := range res.Violations {
		t.Errorf("violation: %s", v)
	}
	if res.FailureFile != "" {
		t.Errorf("failure file %s (replay: %s)", res.FailureFile, replay)
	}
	s := res.Summary
	if s.Publishes[Applied] == 0 || s.Publishes[Stale] == 0 || s.Reads == 0 || s.Grants == 0 || s.GCPasses == 0 {
		t.Errorf("the run made too little progress: %+v", s)
	}
}

// checkMutations feeds Verify copies of a real run's history, each changed
// the way a broken implementation would have changed it, and requires a
// violation of the expected invariant for each. The changes need a resource
// with two applied publishes that readers saw; it reports false, having
// changed nothing, when h has none (a run on a loaded machine may publish
// too few per resource), else true.
func checkMutations(t *testing.T, h *History) bool {
	t.Helper()
	if vs := Verify(h, VerifyOptions{}); len(vs) > 0 {
		t.Fatalf("the real history itself has violations: %v", vs)
	}
	// The resource with the most applied publishes that a reader saw.
	seen := map[versionID]bool{}
	for _, r := range h.Reads {
		seen[versionID{r.Resource, r.Version}] = true
	}
	var target *PublishOp
	count := map[string]int{}
	for i := range h.Publishes {
		p := &h.Publishes[i]
		if p.Outcome == Applied && !p.Forged && seen[versionID{p.Resource, p.Version}] {
			if count[p.Resource]++; target == nil || count[p.Resource] > count[target.Resource] {
				target = p
			}
		}
	}
	if target == nil || count[target.Resource] < 2 {
		most := 0
		if target != nil {
			most = count[target.Resource]
		}
		t.Logf("no resource with two applied publishes seen by readers (at most %d, %d reads), so no mutations of this run", most, len(h.Reads))
		return false
	}
	var first, last layout.Version
	var end int64
	for _, p := range h.Publishes {
		end = max(end, p.Return)
		if p.Resource == target.Resource && p.Outcome == Applied {
			if first.IsZero() || p.Version.Compare(first) < 0 {
				first = p.Version
			}
			last = layout.MaxVersion(last, p.Version)
		}
	}
	mutations := []struct {
		name   string
		mutate func(h *History)
		want   string
	}{
		{"an applied publish reported stale", func(h *History) {
			for i := range h.Publishes {
				if h.Publishes[i].ID == target.ID {
					h.Publishes[i].Outcome = Stale
				}
			}
		}, InvLinearizable},
		{"a read after the end returns the first version", func(h *History) {
			h.Reads = append(h.Reads, ReadOp{Client: "late", Resource: target.Resource, Call: end + 1, Return: end + 2, Version: first})
		}, InvLinearizable},
		{"the grant of an applied publish forgotten", func(h *History) {
			h.Grants = slices.DeleteFunc(h.Grants, func(g GrantEvent) bool {
				return g.Resource == target.Resource && g.Fence == target.Version.Fence
			})
		}, InvUnauthorized},
		{"the pointer went back in etcd", func(h *History) {
			h.Changes = append(h.Changes, Change{Kind: ChangePointer, Resource: target.Resource, Version: first, Revision: 1 << 62, KVVersion: 99, Seen: end + 1})
		}, InvPointerMonotonic},
	}
	if first == last {
		t.Fatalf("resource %s has one applied version", target.Resource)
	}
	for _, m := range mutations {
		c := *h
		c.Publishes = slices.Clone(h.Publishes)
		c.Reads = slices.Clone(h.Reads)
		c.Grants = slices.Clone(h.Grants)
		c.Changes = slices.Clone(h.Changes)
		m.mutate(&c)
		if got := invariants(Verify(&c, VerifyOptions{})); !slices.Contains(got, m.want) {
			t.Errorf("mutation %q of the real history: violations %v, want %s", m.name, got, m.want)
		}
	}
	return true
}

// checkGroupMutations feeds Verify copies of a real run's history, each
// changed the way a broken group publish or cut would have changed it, and
// requires a violation of the expected invariant for each. The changes
// need an applied group publish that a cut read whole; it reports false,
// having changed nothing, when h has none, else true.
func checkGroupMutations(t *testing.T, h *History) bool {
	t.Helper()
	members := map[string][]PublishOp{}
	for _, p := range h.Publishes {
		if p.Group != "" && p.Outcome == Applied {
			members[p.Group] = append(members[p.Group], p)
		}
	}
	var group []PublishOp
	cut, other := -1, ""
	for i, c := range h.GroupCuts {
		for _, ms := range members {
			read := 0
			for _, m := range ms {
				if slices.ContainsFunc(c.Pointers, func(p CutPointer) bool { return p.Resource == m.Resource && p.Version == m.Version }) {
					read++
				}
			}
			if read == len(ms) && read > 1 {
				group, cut, other = ms, i, ms[len(ms)-1].Resource
				break
			}
		}
		if cut >= 0 {
			break
		}
	}
	if cut < 0 {
		t.Logf("no applied group publish that a cut read whole, so no group mutations of this run")
		return false
	}
	change := slices.IndexFunc(h.Changes, func(c Change) bool {
		return c.Kind == ChangePointer && c.Resource == other && c.Version == group[len(group)-1].Version
	})
	if change < 0 {
		t.Fatalf("the watch never saw %s at %s of group publish %s", other, group[len(group)-1].Version, group[0].Group)
	}
	mutations := []struct {
		name   string
		mutate func(h *History)
		want   string
	}{
		{"a cut showing one member of the group not moved", func(h *History) {
			c := &h.GroupCuts[cut]
			c.Pointers = slices.Clone(c.Pointers)
			i := slices.IndexFunc(c.Pointers, func(p CutPointer) bool { return p.Resource == other })
			c.Pointers[i] = CutPointer{Resource: other}
		}, InvGroupTorn},
		{"the group's members moved at two revisions", func(h *History) {
			h.Changes[change].Revision++
		}, InvGroupTorn},
		{"a member of the applied group never moved", func(h *History) {
			h.Changes = slices.Delete(h.Changes, change, change+1)
		}, InvGroupPartial},
	}
	for _, m := range mutations {
		c := *h
		c.GroupCuts = slices.Clone(h.GroupCuts)
		c.Changes = slices.Clone(h.Changes)
		m.mutate(&c)
		if got := invariants(Verify(&c, VerifyOptions{})); !slices.Contains(got, m.want) {
			t.Errorf("mutation %q of the real history (group publish %s): violations %v, want %s", m.name, group[0].Group, got, m.want)
		}
	}
	return true
}

// checkDatasetMutations feeds Verify copies of a real run's history, each
// changed the way a broken dataset implementation would have changed it,
// and requires a violation of the expected invariant for each. The changes
// need an applied incremental publish (one with a base) whose files the
// final sweep read; it reports false, having changed nothing, when h has
// none, else true.
func checkDatasetMutations(t *testing.T, h *History) bool {
	t.Helper()
	i := slices.IndexFunc(h.Publishes, func(p PublishOp) bool {
		return p.Outcome == Applied && p.Base != nil && p.Reused > 0 && slices.ContainsFunc(h.DatasetReads, func(r DatasetRead) bool {
			return r.Client == DatasetSweep && r.Resource == p.Resource && r.Version == p.Version && r.Path != ""
		})
	})
	if i < 0 {
		t.Logf("no applied incremental dataset publish whose files the sweep read, so no dataset mutations of this run")
		return false
	}
	target := h.Publishes[i]
	swept := slices.IndexFunc(h.DatasetReads, func(r DatasetRead) bool {
		return r.Client == DatasetSweep && r.Resource == target.Resource && r.Version == target.Version && r.Path != ""
	})
	mutations := []struct {
		name   string
		mutate func(h *History)
		want   string
	}{
		{"a swept file read with other bytes", func(h *History) {
			h.DatasetReads[swept].SHA = strings.Repeat("0", 64)
		}, InvDatasetFile},
		{"a swept file missing (GC ignoring manifest-named files)", func(h *History) {
			h.DatasetReads[swept].Problem, h.DatasetReads[swept].Err = ReadMissing, "missing"
		}, InvDatasetFileKept},
		{"an incremental publish applied over another base", func(h *History) {
			other := target.Version
			other.Seq += 1000
			h.Publishes[i].Base = &other
		}, InvDatasetBase},
	}
	for _, m := range mutations {
		c := *h
		c.Publishes = slices.Clone(h.Publishes)
		c.DatasetReads = slices.Clone(h.DatasetReads)
		m.mutate(&c)
		if got := invariants(Verify(&c, VerifyOptions{})); !slices.Contains(got, m.want) {
			t.Errorf("mutation %q of the real history (publish %s at %s): violations %v, want %s", m.name, target.ID, target.Version, got, m.want)
		}
	}
	return true
}
