package chaos

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fencepub/fencepub/internal/devstack"
)

// FaultKind names a kind of injected fault, injected against real processes
// (docs/fault-injection.md lists them).
type FaultKind string

// Fault kinds. Worker faults hit a worker process; the others hit the
// servers or the network between them and the clients.
const (
	// WorkerPause: SIGSTOP a worker process right after it starts a publish,
	// hold it past its lease TTL, then SIGCONT (protocol source, §Timeline).
	WorkerPause FaultKind = "worker_pause"
	// WorkerKillUpload: SIGKILL a worker process while its object upload is
	// slowed down by its store proxy (mid-upload).
	WorkerKillUpload FaultKind = "worker_kill_upload"
	// WorkerKillPublish: SIGKILL a worker process after its object is
	// written, while the response of its publish transaction is held back
	// (mid-publish); the harness settles the open publish with Resolve.
	WorkerKillPublish FaultKind = "worker_kill_publish"
	// WorkerClockSkew: the publisher clock of a worker process runs
	// WorkerSkew behind (variant 0) or ahead (1) for Hold, then is right
	// again: nothing it writes may age by that clock (DESIGN.md invariant
	// 10).
	WorkerClockSkew FaultKind = "worker_clock_skew"
	// EtcdLostResponses: the etcd proxies forward requests and drop the
	// responses for a while, then reset every connection (variant 0), drop
	// the response of the next request only (1), or reset (2).
	EtcdLostResponses FaultKind = "etcd_lost_responses"
	// MinIOLostResponses: the same in front of MinIO.
	MinIOLostResponses FaultKind = "minio_lost_responses"
	// EtcdKillMember: kill -9 a follower, restart it after Hold.
	EtcdKillMember FaultKind = "etcd_kill_member"
	// EtcdKillLeader: kill -9 the leader, restart it after Hold.
	EtcdKillLeader FaultKind = "etcd_kill_leader"
	// EtcdPauseMember: SIGSTOP a member (Target; it may be the leader) for
	// Hold, then SIGCONT.
	EtcdPauseMember FaultKind = "etcd_pause_member"
	// EtcdPauseLeader: SIGSTOP the raft leader for twice the lease TTL,
	// then SIGCONT; the two other members keep a quorum.
	EtcdPauseLeader FaultKind = "etcd_pause_leader"
	// EtcdPauseFollower: SIGSTOP a follower for twice the lease TTL.
	EtcdPauseFollower FaultKind = "etcd_pause_follower"
	// EtcdFullRestart: kill -9 every member, start them again after Hold
	// (durability: everything acknowledged must survive).
	EtcdFullRestart FaultKind = "etcd_full_restart"
	// MinIORestart: kill -9 MinIO while writes are in flight, restart it
	// after Hold.
	MinIORestart FaultKind = "minio_restart"
	// MinIODriveRemoved: rename a drive directory of the erasure set away
	// for Hold, then put it back.
	MinIODriveRemoved FaultKind = "minio_drive_removed"
	// MinIOKillNode: kill -9 one MinIO node (never the one the clients'
	// proxies reach the store through), restart it after Hold; the other
	// three keep the erasure set's read and write quorum.
	MinIOKillNode FaultKind = "minio_kill_node"
	// MinIOPauseNode: SIGSTOP one MinIO node (not the clients' entry node)
	// for Hold, then SIGCONT.
	MinIOPauseNode FaultKind = "minio_pause_node"
	// EtcdRestore: save a snapshot, let the workload go on for Hold, then
	// cut every client off etcd, restore every member from the snapshot
	// (`etcdutl snapshot restore --bump-revision --mark-compacted`), run
	// recovery.Recover and let the clients back (RUNBOOK's restore). The
	// history is split there.
	EtcdRestore FaultKind = "etcd_restore"
	// EtcdReplaced: cut every client off etcd, replace the cluster by an
	// empty one (every member killed, its data directory wiped, started
	// again on the same URLs), take the bucket over with recovery.Recover
	// (recovery.Options.FromBucket: every object is quarantined), republish
	// the newest object of each resource under the new epoch, and let the
	// clients back; they must acquire again (the empty etcd has no grants).
	// The history is split there as at a restore of nothing (DESIGN.md
	// invariant 9).
	EtcdReplaced FaultKind = "etcd_replaced"
	// SeaweedFSLostResponses: MinIOLostResponses in front of SeaweedFS's
	// S3 gateway.
	SeaweedFSLostResponses FaultKind = "seaweedfs_lost_responses"
	// SeaweedFSRestart: kill -9 SeaweedFS (server and volume server) while
	// writes are in flight, restart it after Hold.
	SeaweedFSRestart FaultKind = "seaweedfs_restart"
	// SeaweedFSPauseVolume: SIGSTOP SeaweedFS's volume server (its own
	// process) for Hold, then SIGCONT: the gateway, master and filer go on
	// answering while every object's bytes are out of reach.
	SeaweedFSPauseVolume FaultKind = "seaweedfs_pause_volume"

	// Partition faults cut the network between a worker process (Target)
	// and the servers: real partitions, as iptables rules on the run's
	// Network (a run as root on harness/partition's namespaces). The other
	// clients are the majority side, which must not notice.

	// PartitionWorkerEtcd: cut the worker process from every etcd member
	// but not from the object store. Variant 0 cuts as it starts a publish
	// and heals after Hold (past its lease TTL, within the publish's
	// deadline): its transaction goes out after the heal and gets a
	// definite answer. Variant 1 cuts once its object is written and heals
	// after the publish's deadline: the outcome is unknown and the worker
	// settles it with Resolve once healed.
	PartitionWorkerEtcd FaultKind = "partition_worker_etcd"
	// PartitionWorkerEtcdOneWay: once the worker's object is written, the
	// packets from etcd to it are dropped until the publish's deadline has
	// passed: its requests arrive and apply, their answers are lost.
	PartitionWorkerEtcdOneWay FaultKind = "partition_worker_etcd_one_way"
	// PartitionLeader: the raft leader and the worker process are cut
	// from the two followers for Hold (2, 10 or 20 election timeouts,
	// Variant 0-2); the followers elect a new leader.
	PartitionLeader FaultKind = "partition_leader"
	// PartitionLossyEtcd: the link between the worker process and every
	// etcd member loses LossyShare of its packets and delays the others by
	// LossyDelay each way, for Hold.
	PartitionLossyEtcd FaultKind = "partition_lossy_etcd"
	// PartitionWorkerStore: cut the worker process from the object store,
	// not from etcd, while it uploads an object in several parts, for Hold.
	PartitionWorkerStore FaultKind = "partition_worker_store"
)

// The lossy link of PartitionLossyEtcd.
const (
	LossyShare = 0.3
	LossyDelay = 100 * time.Millisecond
)

// ElectionTimeout is etcd's election timeout (its default, which
// internal/devstack keeps): the unit of PartitionLeader's holds.
const ElectionTimeout = time.Second

// PartitionFaults returns the kinds of the partition track, in report
// order. A run has this track only on a Network (Config.Network).
func PartitionFaults() []FaultKind {
	return []FaultKind{PartitionWorkerEtcd, PartitionWorkerEtcdOneWay, PartitionLeader, PartitionLossyEtcd, PartitionWorkerStore}
}

// LeaderHolds are PartitionLeader's holds by Variant.
var LeaderHolds = []time.Duration{2 * ElectionTimeout, 10 * ElectionTimeout, 20 * ElectionTimeout}

// WorkerFaults returns the kinds of the worker track, in report order.
func WorkerFaults() []FaultKind {
	return []FaultKind{WorkerPause, WorkerKillUpload, WorkerKillPublish, WorkerClockSkew}
}

// ServerFaults returns the kinds of the server track, in report order.
func ServerFaults() []FaultKind {
	return []FaultKind{
		EtcdLostResponses, MinIOLostResponses, EtcdKillMember, EtcdKillLeader,
		EtcdPauseMember, EtcdFullRestart, MinIORestart, MinIODriveRemoved, EtcdRestore, EtcdReplaced,
		EtcdPauseLeader, EtcdPauseFollower, MinIOKillNode, MinIOPauseNode,
	}
}

// SeaweedFSFaults returns the server-track kinds of a run on SeaweedFS
// (StartSeaweedFSCluster), in report order: the faults that apply to one
// SeaweedFS, lost responses, a restart and a paused volume server.
func SeaweedFSFaults() []FaultKind {
	return []FaultKind{SeaweedFSLostResponses, SeaweedFSRestart, SeaweedFSPauseVolume}
}

// ServerFaultsOf returns the server-track kinds of a run on the object
// store of the given kind (devstack.StoreKinds): SeaweedFSFaults for
// SeaweedFS, ServerFaults for MinIO (and for "").
func ServerFaultsOf(store string) []FaultKind {
	if store == devstack.StoreSeaweedFS {
		return SeaweedFSFaults()
	}
	return ServerFaults()
}

// QuorumKept reports whether a fault of kind k leaves a quorum of both
// services serving throughout, so that no operation may fail because of it
// (DESIGN.md invariant 12): one etcd member stalled or killed (the leader
// too), one MinIO node of four down or stalled. The lost responses are not
// among them (they cut clients off a serving cluster), nor is a drive
// renamed away under a running MinIO. The partitions are: every client but
// the worker process they cut reaches a quorum of both.
func QuorumKept(k FaultKind) bool {
	switch k {
	case EtcdPauseMember, EtcdPauseLeader, EtcdPauseFollower, EtcdKillMember, EtcdKillLeader, MinIOKillNode, MinIOPauseNode:
		return true
	case PartitionWorkerEtcd, PartitionWorkerEtcdOneWay, PartitionLeader, PartitionLossyEtcd, PartitionWorkerStore:
		return true // for every client but the one cut (Liveness leaves its operations out)
	}
	return false
}

// maxNodePause is the longest hold of a MinIOPauseNode.
const maxNodePause = 4 * time.Second

// Fault is one planned fault.
type Fault struct {
	// At is when the fault starts, from the start of the run. A fault
	// starts late when the one before it on its track is still healing.
	At   time.Duration `json:"at"`
	Kind FaultKind     `json:"kind"`
	// Target is the worker process, etcd member or drive index; Variant
	// selects a mode (EtcdLostResponses, MinIOLostResponses).
	Target  int           `json:"target"`
	Variant int           `json:"variant"`
	Hold    time.Duration `json:"hold"`
}

// String formats f as one line of a schedule listing.
func (f Fault) String() string {
	return fmt.Sprintf("%7.2fs %-20s target=%d variant=%d hold=%s", f.At.Seconds(), f.Kind, f.Target, f.Variant, f.Hold)
}

// Schedule is the fault plan of a run: a pure function of its inputs, so a
// failed run is replayed with the same faults at the same times by giving
// the same seed and duration (`make chaos SEED=... DURATION=...`).
type Schedule struct {
	Seed     int64         `json:"seed"`
	Duration time.Duration `json:"duration"`
	// Store is the object store's kind (devstack.StoreKinds; empty:
	// MinIO), which selects the server track's kinds (ServerFaultsOf).
	Store string `json:"store,omitempty"`
	// Workers is the number of worker processes the plan targets.
	Workers int `json:"workers"`
	// Partitions: the schedule has the partition track (PlanPartitions).
	Partitions bool    `json:"partitions,omitempty"`
	Faults     []Fault `json:"faults"`
}

// Plan returns the fault schedule of a run of duration d with the given
// number of worker processes (at least 1), seeded by seed. Faults run on two
// tracks, each one fault at a time: server faults (cycling through every
// kind of ServerFaults in a seeded order, so a run of a minute covers them
// all) and worker faults (likewise for WorkerFaults). Nothing is planned in
// the first 2 s or the last 3 s. ttl is the workers' lease TTL: a pause
// lasts past it. It plans a run on MinIO (PlanOn with store "").
func Plan(seed int64, d time.Duration, workers int, ttl time.Duration) Schedule {
	return PlanOn("", seed, d, workers, ttl)
}

// PlanOn is Plan for a run on the object store of the given kind
// (devstack.StoreKinds, "" for MinIO): the server track cycles through
// ServerFaultsOf(store), and the schedule records the store.
func PlanOn(store string, seed int64, d time.Duration, workers int, ttl time.Duration) Schedule {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15))
	s := Schedule{Seed: seed, Duration: d, Workers: max(workers, 1), Store: store}
	end := d - 3*time.Second
	between := func(lo, hi time.Duration) time.Duration {
		return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
	}
	// Server track. Cost is the time a fault takes beyond Hold (restarts).
	at := 2 * time.Second
	for at < end {
		for _, k := range permute(rng, ServerFaultsOf(store)) {
			f := Fault{At: at, Kind: k}
			cost := time.Duration(0)
			switch f.Kind {
			case EtcdLostResponses, MinIOLostResponses, SeaweedFSLostResponses:
				f.Variant = rng.IntN(3)
				f.Hold = between(300*time.Millisecond, 4*time.Second)
			case EtcdKillMember, EtcdKillLeader:
				f.Target = rng.IntN(3)
				f.Hold = between(500*time.Millisecond, 3*time.Second)
				cost = time.Second
			case EtcdPauseMember:
				f.Target = rng.IntN(3)
				f.Hold = between(time.Second, 4*time.Second)
			case EtcdPauseLeader, EtcdPauseFollower:
				f.Target = rng.IntN(2)
				f.Hold = 2 * ttl
			case MinIOKillNode:
				f.Target = rng.IntN(3)
				f.Hold = between(time.Second, 3*time.Second)
				cost = 3 * time.Second
			case MinIOPauseNode:
				f.Target = rng.IntN(3)
				f.Hold = between(time.Second, maxNodePause)
			case EtcdFullRestart:
				f.Hold = between(200*time.Millisecond, 1500*time.Millisecond)
				cost = 3 * time.Second
			case MinIORestart:
				f.Hold = between(200*time.Millisecond, 2*time.Second)
				cost = time.Second
			case SeaweedFSRestart:
				// Its filer's lock ring takes seconds to serve
				// conditional writes again.
				f.Hold = between(200*time.Millisecond, 2*time.Second)
				cost = 5 * time.Second
			case SeaweedFSPauseVolume:
				f.Hold = between(time.Second, 4*time.Second)
				cost = time.Second
			case MinIODriveRemoved:
				f.Target = rng.IntN(4)
				f.Hold = between(2*time.Second, 5*time.Second)
			case EtcdRestore:
				f.Target = rng.IntN(3)
				f.Hold = between(2*time.Second, 5*time.Second)
				cost = 6 * time.Second
			case EtcdReplaced:
				f.Hold = between(200*time.Millisecond, time.Second)
				cost = 6 * time.Second
			}
			if f.At+f.Hold+cost > end {
				at = end
				break
			}
			s.Faults = append(s.Faults, f)
			at += f.Hold + cost + between(500*time.Millisecond, 1500*time.Millisecond)
		}
	}
	// Worker track.
	at = 3 * time.Second
	for at < end {
		for _, k := range permute(rng, WorkerFaults()) {
			f := Fault{At: at, Kind: k, Target: rng.IntN(s.Workers)}
			switch f.Kind {
			case WorkerPause:
				f.Hold = ttl + between(time.Second, 3*time.Second)
			case WorkerClockSkew:
				f.Variant = rng.IntN(2)
				f.Hold = between(2*time.Second, 5*time.Second)
			}
			if f.At+f.Hold > end {
				at = end
				break
			}
			s.Faults = append(s.Faults, f)
			at += f.Hold + between(2*time.Second, 4*time.Second)
		}
	}
	return s
}

// PlanPartitions adds the partition track to s, for a run on a Network:
// one partition at a time, cycling through every kind of PartitionFaults
// in an order drawn from s.Seed, each targeting a worker process, 2 to 4 s
// apart, none in the first 4 s or the last 3 s (a pure function of s, like
// Plan). ttl is the workers' lease TTL and publishTimeout their publish
// deadline: a cut of PartitionWorkerEtcd lasts past the TTL, the cuts that
// leave a publish unknown past the deadline.
func PlanPartitions(s Schedule, ttl, publishTimeout time.Duration) Schedule {
	rng := rand.New(rand.NewPCG(uint64(s.Seed), 0x5bd1e9955bd1e995))
	between := func(lo, hi time.Duration) time.Duration {
		return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
	}
	s.Partitions = true
	s.Faults = append([]Fault(nil), s.Faults...)
	end := s.Duration - 3*time.Second
	for at := 4 * time.Second; at < end; {
		for _, k := range permute(rng, PartitionFaults()) {
			f := Fault{At: at, Kind: k, Target: rng.IntN(max(s.Workers, 1))}
			switch k {
			case PartitionWorkerEtcd:
				f.Variant = rng.IntN(2)
				f.Hold = ttl + between(time.Second, 2*time.Second)
				if f.Variant == 1 {
					f.Hold = publishTimeout + time.Second
				}
			case PartitionWorkerEtcdOneWay:
				f.Hold = publishTimeout + time.Second
			case PartitionLeader:
				f.Variant = rng.IntN(len(LeaderHolds))
				f.Hold = LeaderHolds[f.Variant]
			case PartitionLossyEtcd:
				f.Hold = between(5*time.Second, 10*time.Second)
			case PartitionWorkerStore:
				f.Hold = between(2*time.Second, 5*time.Second)
			}
			if f.At+f.Hold > end {
				at = end
				break
			}
			s.Faults = append(s.Faults, f)
			at += f.Hold + between(2*time.Second, 4*time.Second)
		}
	}
	return s
}

// permute returns kinds in an order drawn from rng.
func permute(rng *rand.Rand, kinds []FaultKind) []FaultKind {
	out := make([]FaultKind, len(kinds))
	for i, j := range rng.Perm(len(kinds)) {
		out[i] = kinds[j]
	}
	return out
}

// track returns the faults of one track in order.
func (s Schedule) track(kinds []FaultKind) []Fault {
	var out []Fault
	for _, f := range s.Faults {
		for _, k := range kinds {
			if f.Kind == k {
				out = append(out, f)
			}
		}
	}
	return out
}
