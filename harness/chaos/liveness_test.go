package chaos

import (
	"reflect"
	"testing"
	"time"
)

// TestLivenessChargesQuorumDown: an operation that began while one etcd
// member was down and failed after the next fault had cut every client
// off counts in the cut-off's window, not as a failure while a quorum was
// up; an operation inside the member's window counts there, and one hit
// by a worker fault counts nowhere.
func TestLivenessChargesQuorumDown(t *testing.T) {
	s := func(sec float64) int64 { return int64(sec * float64(time.Second)) }
	h := &History{
		Faults: []FaultRecord{
			{Kind: EtcdReplaced, Target: "cluster", Start: s(21), End: s(40)},
			{Kind: EtcdKillMember, Target: "etcd1", Start: s(10), End: s(20)},
			{Kind: WorkerPause, Target: "p0.1", Start: s(11), End: s(14)},
		},
		Attempts: []Attempt{
			{Client: "w0", Op: "publish", Call: s(19), Return: s(25), Failed: true},
			{Client: "w1", Op: "acquire", Call: s(12), Return: s(15), Failed: true},
			{Client: "w2", Op: "read", Call: s(15), Return: s(16)},
			{Client: "p0.1", Op: "publish", Call: s(12), Return: s(13), Failed: true},
			{Client: "w2", Op: "read", Call: s(41), Return: s(42)},
		},
	}
	ls := Liveness(h)
	if len(ls) != 2 {
		t.Fatalf("got %d windows, want 2: %+v", len(ls), ls)
	}
	member, replaced := ls[0], ls[1]
	if member.Kind != EtcdKillMember || member.Attempted != 2 || member.Failed != 1 || member.FirstSuccess != 6*time.Second {
		t.Errorf("member window: %+v, want 2 attempted, 1 failed, first success 6s", member)
	}
	if replaced.Kind != EtcdReplaced || replaced.Attempted != 1 || replaced.Failed != 1 || replaced.FirstSuccess != 21*time.Second {
		t.Errorf("replacement window: %+v, want 1 attempted, 1 failed, first success 21s", replaced)
	}
}

// TestLivenessPartitionMajority: a partition's window counts the majority
// side's operations, not those of the worker it cut.
func TestLivenessPartitionMajority(t *testing.T) {
	s := func(sec float64) int64 { return int64(sec * float64(time.Second)) }
	h := &History{
		Faults: []FaultRecord{{Kind: PartitionLeader, Target: "p1.1", Start: s(10), End: s(20)}},
		Attempts: []Attempt{
			{Client: "p1.1", Op: "publish", Call: s(11), Return: s(19), Failed: true},
			{Client: "w0", Op: "publish", Call: s(10), Return: s(11.5)},
			{Client: "w1", Op: "acquire", Call: s(12), Return: s(13)},
		},
	}
	ls := Liveness(h)
	if len(ls) != 1 || ls[0].Attempted != 2 || ls[0].Failed != 0 || !ls[0].QuorumUp || ls[0].FirstSuccess != 1500*time.Millisecond {
		t.Fatalf("partition window: %+v, want 2 attempted, 0 failed, quorum up, first success 1.5s", ls)
	}
}

// TestPlanPartitions: the partition track is a pure function of the
// schedule, one partition at a time inside the run, every kind within two
// minutes, and it leaves the other tracks as they were.
func TestPlanPartitions(t *testing.T) {
	const d = 2 * time.Minute
	base := Plan(5, d, 3, 2*time.Second)
	a := PlanPartitions(base, 2*time.Second, 10*time.Second)
	if b := PlanPartitions(base, 2*time.Second, 10*time.Second); !reflect.DeepEqual(a, b) {
		t.Fatal("two partition plans of one schedule differ")
	}
	if !a.Partitions || !reflect.DeepEqual(a.track(ServerFaults()), base.track(ServerFaults())) {
		t.Fatal("the partition plan changed the server track or is not marked")
	}
	kinds := map[FaultKind]int{}
	var end time.Duration
	for _, f := range a.track(PartitionFaults()) {
		kinds[f.Kind]++
		if f.At < end || f.At+f.Hold > d-3*time.Second || f.Target >= 3 {
			t.Errorf("%s overlaps the one before (ending %s), leaves the run or targets no worker", f, end)
		}
		end = f.At + f.Hold
	}
	for _, k := range PartitionFaults() {
		if kinds[k] == 0 {
			t.Errorf("no %s planned", k)
		}
	}
}
