package chaos

import (
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
