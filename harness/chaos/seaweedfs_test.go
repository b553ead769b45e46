//go:build !unit

package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The bounded CI run on SeaweedFS: this seed for seaweedFSCIDuration plans every
// SeaweedFS fault and every worker fault (TestPlanOnSeaweedFS).
const seaweedFSCISeed = 3

// seaweedFSCIDuration is the bounded run's duration: a restart heals only
// once SeaweedFS serves conditional writes again, which takes seconds, so
// the run lasts about twice as long.
const seaweedFSCIDuration = 25 * time.Second

// TestChaosSeaweedFS is the bounded chaos run on SeaweedFS
// (StartSeaweedFSCluster: 3 etcd members, one SeaweedFS whose volume
// server is its own process): the full workload under the faults that
// apply to it (SeaweedFSFaults: lost responses through the fault proxy, a
// kill -9 and restart of the store, a paused volume server) and the worker
// faults, judged by Verify with 0 violations allowed. Every planned fault
// must be injected and healed, and the run must make progress. A failure
// leaves chaos-failure-<seed>.json in $TMPDIR/fencepub-chaos; `make chaos
// STORE=seaweedfs SEED=<seed> DURATION=25s` replays it.
func TestChaosSeaweedFS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl, err := StartSeaweedFSCluster(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	res, err := Run(ctx, Config{
		Cluster: cl, Seed: seaweedFSCISeed, Duration: seaweedFSCIDuration, Processes: ciProcesses,
		Dir: t.TempDir(), FailureDir: filepath.Join(os.TempDir(), "fencepub-chaos"), Progress: logWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	checkRun(t, res, fmt.Sprintf("make chaos STORE=seaweedfs SEED=%d DURATION=%s", seaweedFSCISeed, seaweedFSCIDuration))
	if res.Summary.Store != "seaweedfs" {
		t.Errorf("summary store %q, want seaweedfs", res.Summary.Store)
	}
	injected := map[FaultKind]int{}
	for _, f := range res.History.Faults {
		injected[f.Kind]++
		if f.Err != "" {
			t.Errorf("fault %s on %s failed: %s", f.Kind, f.Target, f.Err)
		}
	}
	for _, k := range append(SeaweedFSFaults(), WorkerFaults()...) {
		if injected[k] == 0 {
			t.Errorf("no %s was injected", k)
		}
	}
	for k := range injected {
		if k == MinIORestart || k == MinIOLostResponses || k == MinIOKillNode || k == MinIOPauseNode || k == MinIODriveRemoved {
			t.Errorf("a MinIO fault (%s) was injected into a run on SeaweedFS", k)
		}
	}
}

// TestPlanOnSeaweedFS: a plan on SeaweedFS draws its server track from
// SeaweedFSFaults only, records the store, and the CI seed plans every
// SeaweedFS and worker fault in seaweedFSCIDuration.
func TestPlanOnSeaweedFS(t *testing.T) {
	s := PlanOn("seaweedfs", seaweedFSCISeed, seaweedFSCIDuration, ciProcesses, 2*time.Second)
	if s.Store != "seaweedfs" {
		t.Fatalf("schedule store %q", s.Store)
	}
	planned := map[FaultKind]int{}
	for _, f := range s.Faults {
		planned[f.Kind]++
	}
	for k := range planned {
		switch k {
		case SeaweedFSLostResponses, SeaweedFSRestart, SeaweedFSPauseVolume, WorkerPause, WorkerKillUpload, WorkerKillPublish, WorkerClockSkew:
		default:
			t.Errorf("planned %s on SeaweedFS", k)
		}
	}
	for _, k := range append(SeaweedFSFaults(), WorkerFaults()...) {
		if planned[k] == 0 {
			t.Errorf("seed %d plans no %s in %s", seaweedFSCISeed, k, seaweedFSCIDuration)
		}
	}
}
