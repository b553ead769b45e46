package chaos

import (
	"reflect"
	"testing"
	"time"
)

// TestPlan: a schedule is a pure function of its inputs (so a seed replays
// it), stays inside the run, keeps each track to one fault at a time, and a
// minute and a half covers every kind.
func TestPlan(t *testing.T) {
	const d = 90 * time.Second
	a := Plan(42, d, 3, 2*time.Second)
	if b := Plan(42, d, 3, 2*time.Second); !reflect.DeepEqual(a, b) {
		t.Fatal("two plans of one seed differ")
	}
	if c := Plan(43, d, 3, 2*time.Second); reflect.DeepEqual(a.Faults, c.Faults) {
		t.Fatal("two seeds gave the same plan")
	}
	kinds := map[FaultKind]int{}
	for _, track := range [][]FaultKind{ServerFaults(), WorkerFaults()} {
		var end time.Duration
		for _, f := range a.track(track) {
			kinds[f.Kind]++
			if f.At < 2*time.Second || f.At+f.Hold > d-3*time.Second {
				t.Errorf("%s outside the run", f)
			}
			if f.At < end {
				t.Errorf("%s starts before the fault before it ends (%s)", f, end)
			}
			end = f.At + f.Hold
			if f.Kind == WorkerPause && f.Hold <= 2*time.Second {
				t.Errorf("%s does not outlast the TTL", f)
			}
			if f.Target < 0 || f.Kind != MinIODriveRemoved && f.Kind != EtcdPauseMember && f.Target >= 3 || f.Kind == MinIOKillNode && f.Target >= 3 {
				t.Errorf("%s: bad target", f)
			}
		}
	}
	for _, k := range append(ServerFaults(), WorkerFaults()...) {
		if kinds[k] == 0 {
			t.Errorf("a plan of %s has no %s:\n%v", d, k, a.Faults)
		}
	}
}

// TestCISeedsCoverEveryFault: the fixed seeds of TestChaos together inject
// every kind of fault.
func TestCISeedsCoverEveryFault(t *testing.T) {
	kinds := map[FaultKind]int{}
	for _, seed := range ciSeeds {
		for _, f := range Plan(seed, ciDuration, ciProcesses, 2*time.Second).Faults {
			kinds[f.Kind]++
		}
	}
	for _, k := range append(ServerFaults(), WorkerFaults()...) {
		if kinds[k] == 0 {
			t.Errorf("no CI seed plans %s", k)
		}
	}
	t.Logf("faults planned by the CI seeds: %v", kinds)
}
