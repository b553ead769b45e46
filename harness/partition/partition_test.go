//go:build !unit

package partition

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/harness/chaos"
	"github.com/fencepub/fencepub/internal/cli/config"
)

// TestMain runs the binary as a chaos worker process when a run started it
// as one (on a worker host), and otherwise runs the tests and removes the
// fencepub command they built.
func TestMain(m *testing.M) {
	if chaos.IsWorker() {
		os.Exit(chaos.WorkerMain())
	}
	code := m.Run()
	if cliPath != "" {
		_ = os.RemoveAll(filepath.Dir(cliPath)) // the fencepub command fencepubCLI built
	}
	os.Exit(code)
}

func full() bool { return os.Getenv(FullEnv) == "full" }

// firstSuccessBound is how soon after a partition starts some client of
// the majority side must succeed: an election (etcd's election timeout),
// one request lost on the cut side (etcd.request_timeout's default) and a
// second of slack (docs/partitions.md).
const firstSuccessBound = chaos.ElectionTimeout + config.DefaultRequestTimeout + time.Second

// scenario is one partition scenario: a chaos run on its own Topology with
// a fixed schedule against worker process 0.
type scenario struct {
	name string
	// net is the scenario's Net: prefix fpp<net>, subnet 10.213.<net>.0/24,
	// unique among the tests.
	net int
	// smoke: part of the smoke subset of make test.
	smoke    bool
	faults   []chaos.Fault
	workload chaos.Workload
	// fullFaults are added in the full suite.
	fullFaults []chaos.Fault
}

// wl is the scenarios' workload: two resources per window, so the worker
// processes and the in-process workers contend for the same leases and a
// cut worker's successor publishes while it is cut.
var wl = chaos.Workload{Resources: 2}

// publishDeadline is wl's publish deadline (chaos.Workload's default).
const publishDeadline = 10 * time.Second

var scenarios = []scenario{{
	// A worker cut from etcd but not from MinIO, past its lease TTL, while
	// the others publish: healed before its transaction (variant 0) and
	// after its publish gave up (variant 1, resolved by the worker).
	name: "worker_cut_from_etcd", net: 1, smoke: true, workload: wl,
	faults: []chaos.Fault{
		{At: 4 * time.Second, Kind: chaos.PartitionWorkerEtcd, Variant: 0, Hold: 4 * time.Second},
		{At: 12 * time.Second, Kind: chaos.PartitionWorkerEtcd, Variant: 1, Hold: publishDeadline + time.Second},
	},
	fullFaults: []chaos.Fault{
		{At: 30 * time.Second, Kind: chaos.PartitionWorkerEtcd, Variant: 0, Hold: 6 * time.Second},
		{At: 40 * time.Second, Kind: chaos.PartitionWorkerEtcd, Variant: 1, Hold: publishDeadline + time.Second},
	},
}, {
	// Requests arrive, answers are lost.
	name: "one_way_answers_lost", net: 2, smoke: true, workload: wl,
	faults: []chaos.Fault{
		{At: 4 * time.Second, Kind: chaos.PartitionWorkerEtcdOneWay, Hold: publishDeadline + time.Second},
	},
	fullFaults: []chaos.Fault{
		{At: 20 * time.Second, Kind: chaos.PartitionWorkerEtcdOneWay, Hold: publishDeadline + time.Second},
	},
}, {
	// The leader and a worker cut from the followers for 2, 10 and 20
	// election timeouts.
	name: "leader_cut_from_followers", net: 3, smoke: true, workload: wl,
	// The smoke subset has the 2× cut only, to stay short; the full suite
	// adds the 10× and 20× cuts (docs/partitions.md).
	faults: []chaos.Fault{
		{At: 4 * time.Second, Kind: chaos.PartitionLeader, Variant: 0, Hold: chaos.LeaderHolds[0]},
	},
	fullFaults: []chaos.Fault{
		{At: 9 * time.Second, Kind: chaos.PartitionLeader, Variant: 1, Hold: chaos.LeaderHolds[1]},
		{At: 23 * time.Second, Kind: chaos.PartitionLeader, Variant: 2, Hold: chaos.LeaderHolds[2]},
	},
}, {
	// A lossy, slow link between a worker and etcd.
	name: "lossy_slow_link_to_etcd", net: 4, smoke: true, workload: wl,
	faults: []chaos.Fault{
		{At: 4 * time.Second, Kind: chaos.PartitionLossyEtcd, Hold: 10 * time.Second},
	},
	fullFaults: []chaos.Fault{
		{At: 18 * time.Second, Kind: chaos.PartitionLossyEtcd, Hold: 30 * time.Second},
	},
}, {
	// A worker cut from MinIO mid multipart upload.
	name: "worker_cut_from_store_mid_multipart", net: 5, smoke: true,
	workload: chaos.Workload{Resources: 2, Multipart: 0.1},
	faults: []chaos.Fault{
		{At: 4 * time.Second, Kind: chaos.PartitionWorkerStore, Hold: 4 * time.Second},
	},
	fullFaults: []chaos.Fault{
		{At: 14 * time.Second, Kind: chaos.PartitionWorkerStore, Hold: 12 * time.Second},
	},
}}

// TestPartitions runs each scenario on a Topology of its own: the chaos
// workload (two worker processes on worker hosts, in-process workers,
// readers, GC) under the scenario's partitions, judged by the chaos checker
// (porcupine and the invariants). Liveness is asserted on top: no
// operation of the majority side fails during a partition, some client
// succeeds within firstSuccessBound of its start, and every publish ends
// definite, the unknown ones of the cut worker settled by that worker's
// own Resolve once healed. The smoke subset runs by default; FullEnv=full
// runs every scenario at full length, and then a soak: a chaos run whose
// schedule Plan and PlanPartitions make (process faults and partitions
// mixed) for soakDuration.
func TestPartitions(t *testing.T) {
	for _, sc := range scenarios {
		if !sc.smoke && !full() {
			continue
		}
		t.Run(sc.name, func(t *testing.T) {
			faults := slices.Clone(sc.faults)
			if full() {
				faults = append(faults, sc.fullFaults...)
			}
			runScenario(t, sc.net, sc.workload, chaos.Schedule{Seed: int64(sc.net), Workers: 1, Partitions: true, Faults: faults}, nil)
		})
	}
	if full() {
		t.Run("soak", func(t *testing.T) {
			seed := time.Now().UnixNano() % 1_000_000
			t.Logf("seed %d", seed)
			ttl := 2 * time.Second // the workload's default TTL
			s := chaos.PlanPartitions(chaos.Plan(seed, soakDuration, 2, ttl), ttl, publishDeadline)
			s.Duration = soakDuration
			// chaos.Topology's MinIO: the node faults keep its quorum.
			runOn(t, 9, Options{Workers: 3, MinIONodes: chaos.Topology.MinIO.Nodes}, chaos.Workload{}, s, nil)
		})
	}
}

// soakDuration is the length of the full suite's soak.
const soakDuration = 3 * time.Minute

// runScenario runs schedule s with workload w on a fresh Topology (three
// worker hosts, one MinIO node) on Net number net and checks the result.
// client, if set, is one more client of the run (chaos.Config.Clients), on
// worker host 2.
func runScenario(t *testing.T, net int, w chaos.Workload, s chaos.Schedule, client func(*Topology, chaos.ClientEnv)) *chaos.Result {
	return runOn(t, net, Options{Workers: 3}, w, s, client)
}

// runOn is runScenario on a Topology of opts.
func runOn(t *testing.T, net int, opts Options, w chaos.Workload, s chaos.Schedule, client func(*Topology, chaos.ClientEnv)) *chaos.Result {
	Require(t)
	if s.Duration == 0 {
		var end time.Duration
		for _, f := range s.Faults {
			end = max(end, f.At+f.Hold)
		}
		s.Duration = end + 5*time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.Duration+5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	topo, err := Start(ctx, fmt.Sprintf("fpp%d", net), netip.MustParsePrefix(fmt.Sprintf("10.213.%d.0/24", net)), filepath.Join(dir, "servers"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := topo.Stop(); err != nil {
			t.Error(err)
		}
	})
	if err := os.MkdirAll(filepath.Join(dir, "run"), 0o755); err != nil {
		t.Fatal(err)
	}
	var clients []func(chaos.ClientEnv)
	if client != nil {
		clients = append(clients, func(env chaos.ClientEnv) { client(topo, env) })
	}
	res, err := chaos.Run(ctx, chaos.Config{
		Cluster: topo.Cluster, Network: topo, Schedule: &s, Seed: s.Seed, Duration: s.Duration, Clients: clients,
		Processes: 2, Workers: 2, Readers: 1, Collectors: 1, Workload: w,
		Dir: filepath.Join(dir, "run"), FailureDir: filepath.Join(os.TempDir(), "fencepub-partitions"),
		Progress: logWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range res.Violations {
		t.Errorf("violation: %s", v)
	}
	if res.FailureFile != "" {
		t.Errorf("failure file %s", res.FailureFile)
	}
	h := res.History
	if res.Summary.Publishes[chaos.Applied] == 0 {
		t.Errorf("no publish applied: %+v", res.Summary.Publishes)
	}
	for _, f := range h.Faults {
		if f.Err != "" {
			t.Errorf("fault %s on %s failed: %s", f.Kind, f.Target, f.Err)
		}
	}
	checkLiveness(t, h)
	checkOutcomes(t, h)
	return res
}

// checkLiveness asserts the liveness of each partition's majority side and
// logs what each partition cost (docs/partitions.md).
func checkLiveness(t *testing.T, h *chaos.History) {
	t.Helper()
	partition := map[chaos.FaultKind]bool{}
	for _, k := range chaos.PartitionFaults() {
		partition[k] = true
	}
	faults := map[int64]chaos.FaultRecord{}
	for _, f := range h.Faults {
		faults[f.Start] = f
	}
	for _, l := range chaos.Liveness(h) {
		if !partition[l.Kind] {
			continue
		}
		f := faults[l.Start]
		cut := cutCost(h, f)
		t.Logf("COST %s hold %s: majority side %d attempted, %d failed, first success after %s; cut worker %s: %s; %s",
			l.Kind, time.Duration(l.End-l.Start).Round(100*time.Millisecond), l.Attempted, l.Failed,
			l.FirstSuccess.Round(time.Millisecond), l.Target, cut, f.Detail)
		if l.Failed > 0 {
			t.Errorf("%s: %d of %d operations of the majority side failed", l.Kind, l.Failed, l.Attempted)
			for _, a := range h.Attempts {
				if a.Failed && a.Client != l.Target && a.Call <= l.End && a.Return >= l.Start {
					t.Logf("failed: %s %s at %.1fs-%.1fs of the run: %s", a.Client, a.Op, float64(a.Call)/1e9, float64(a.Return)/1e9, a.Err)
				}
			}
		}
		if l.FirstSuccess < 0 || l.FirstSuccess > firstSuccessBound {
			t.Errorf("%s: first success after %s, want within %s (election timeout + etcd.request_timeout + 1 s)", l.Kind, l.FirstSuccess, firstSuccessBound)
		}
	}
}

// cutCost describes the cut worker's operations that overlapped f: how
// many failed, what its publishes returned and how long the longest took.
func cutCost(h *chaos.History, f chaos.FaultRecord) string {
	outcomes := map[string]int{}
	var longest time.Duration
	for _, p := range h.Publishes {
		if p.Client != f.Target || p.Call > f.End || p.Return < f.Start {
			continue
		}
		o := p.Reported
		if p.Reported == chaos.Unknown {
			o = "unknown→" + p.Outcome
		}
		outcomes[o]++
		longest = max(longest, time.Duration(p.Return-p.Call))
	}
	var parts []string
	for _, o := range slices.Sorted(maps.Keys(outcomes)) {
		parts = append(parts, fmt.Sprintf("%s %d", o, outcomes[o]))
	}
	attempted, failed := 0, 0
	for _, a := range h.Attempts {
		if a.Client == f.Target && a.Call <= f.End && a.Return >= f.Start {
			attempted++
			if a.Failed {
				failed++
			}
		}
	}
	return fmt.Sprintf("%d operations, %d failed; publishes {%s}, longest %s", attempted, failed, strings.Join(parts, ", "), longest.Round(time.Millisecond))
}

// checkOutcomes asserts that every publish ended definite, and that the
// unknown ones were settled by the worker that made them (its own Resolve,
// once healed) or, for a process that died, by the harness.
func checkOutcomes(t *testing.T, h *chaos.History) {
	t.Helper()
	for _, p := range h.Publishes {
		if !p.Done || p.Outcome == chaos.Unknown {
			t.Errorf("publish %s of %s ended unknown: %s", p.ID, p.Resource, p.Err)
			continue
		}
		if p.Reported == chaos.Unknown && p.ResolvedBy == "" {
			t.Errorf("publish %s was reported unknown and never resolved", p.ID)
		}
	}
}

// logWriter passes each write to t.Log.
type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
