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

// TestLivenessStoreCanary: in a MinIO node's window, a failed operation
// during which the canary had no write served, from its call to ProbeSpan
// after it, is the store's (StoreDown); one that gave up while the store
// served the canary again within that span is a failure; an etcd fault's
// failure is a failure whatever the canary saw.
func TestLivenessStoreCanary(t *testing.T) {
	s := func(sec float64) int64 { return int64(sec * float64(time.Second)) }
	var probes []StoreProbe
	for at := 0.0; at < 60; at += 0.25 {
		down := at >= 10 && at < 22 || at >= 40 && at < 50 // the store serves no write then
		probes = append(probes, StoreProbe{Call: s(at), Return: s(at + 0.1), OK: !down})
	}
	h := &History{
		ProbeSpan:   s(10),
		StoreProbes: probes,
		Faults: []FaultRecord{
			{Kind: MinIOKillNode, Target: "minio2", Start: s(10), End: s(20)},
			{Kind: EtcdPauseFollower, Target: "etcd1", Start: s(40), End: s(45)},
		},
		Attempts: []Attempt{
			{Client: "w0", Op: "publish", Call: s(11), Return: s(21), Failed: true}, // ran to its deadline: the store's
			{Client: "w1", Op: "publish", Call: s(15), Return: s(16), Failed: true}, // gave up; served again at 22 s, within 10 s
			{Client: "w2", Op: "acquire", Call: s(41), Return: s(44), Failed: true}, // an etcd fault's window
			{Client: "w3", Op: "read", Call: s(12), Return: s(12.5)},                // succeeded
		},
	}
	ls := Liveness(h)
	if len(ls) != 2 {
		t.Fatalf("got %d windows, want 2: %+v", len(ls), ls)
	}
	if node := ls[0]; node.Attempted != 3 || node.Failed != 1 || node.StoreDown != 1 {
		t.Errorf("node window: %+v, want 3 attempted, 1 failed, 1 while the store served nothing", node)
	}
	if etcd := ls[1]; etcd.Attempted != 1 || etcd.Failed != 1 || etcd.StoreDown != 0 {
		t.Errorf("etcd window: %+v, want 1 attempted, 1 failed", etcd)
	}
	h.ProbeSpan = 0 // no canary: every failure is the client's
	if node := Liveness(h)[0]; node.Failed != 2 || node.StoreDown != 0 {
		t.Errorf("node window without a canary: %+v, want 2 failed", node)
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
