// Package suite is fencepub's benchmark suite: `fencepub-bench`
// and `make bench`. Run runs its workloads against real etcd and MinIO —
// the configured servers, or those StartLocal starts — and returns a
// bench.Report whose every row sets a fencepub measurement next to its
// baseline measured in the same run, interleaved in rounds: publish vs its
// physical floor (workloads 1-2), pipelined publishing vs the sequential
// floor (1b), vs what users write today (3), the authority (4), the reader
// and the reader service (5), garbage collection (6), scaling (7), recovery
// (8), the etcd footprint (9), many resources (10), dataset versions (11)
// and groups (12). Each workload works in its own throwaway domain and
// deletes its keys and objects when it ends.
package suite

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/gc"
	"github.com/fencepub/fencepub/harness/bench"
	"github.com/fencepub/fencepub/internal/cli/config"
	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/operator"
	"github.com/fencepub/fencepub/publisher"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Errors of this package; test with errors.Is.
var (
	// ErrUnknownWorkload: Options.Workloads names a workload that does not
	// exist.
	ErrUnknownWorkload = errors.New("suite: unknown workload")
	// ErrInvalid: bad options or environment.
	ErrInvalid = errors.New("suite: invalid options")
)

// Workload names, in the order Run runs them (docs/benchmarks.md describes
// each).
const (
	WorkloadPublish   = "publish"
	WorkloadPipeline  = "pipeline"
	WorkloadPeer      = "peer"
	WorkloadAuthority = "authority"
	WorkloadReader    = "reader"
	WorkloadGC        = "gc"
	WorkloadScaling   = "scaling"
	WorkloadCluster   = "cluster"
	WorkloadRecovery  = "recovery"
	WorkloadFootprint = "footprint"
	WorkloadScale     = "scale"
	WorkloadDataset   = "dataset"
	WorkloadGroup     = "group"
)

// workloadInfo describes each workload for the report, in run order.
var workloadInfo = []bench.Workload{
	{
		Name: WorkloadPublish, Title: "1-2. Publish vs its physical floor",
		About: "Subject: `publisher.Publish` of a `bytes.Reader` body (its length is known, so: sha256 teed into ONE streamed create-only PUT, as the floor — bodies of unknown length go in 16 MiB multipart parts — + ONE etcd transaction with every fencing compare, writing the pointer, the op record and the history entry). " +
			"Baseline, the floor: sha256 teed into ONE streamed create-only PUT of the same body + ONE bare etcd compare-and-put of a pointer value; nothing else. " +
			"With 1 resource and c=16 the publishers share one grant, so publishes that arrive after a higher seq are refused as stale (newer state wins), and the floor's compares fail alike; both count as completed operations (one round trip each).",
	},
	{
		Name: WorkloadPipeline, Title: "1b. Pipelined publishing vs the sequential floor",
		About: "Subject: one holder streams publishes of a `bytes.Reader` body into one resource through `publisher.Pipeline` at depth 1, 4 and 16: up to depth objects are written while the transaction of the oldest is in flight, and the transactions go one at a time in seq order, each the transaction `Publish` sends. " +
			"Baseline, the sequential floor: the publish workload's floor (ONE create-only PUT with sha256, then ONE bare compare-and-put) run one after another on one resource. " +
			"The floor and the three depths are interleaved in the same rounds; throughput is operations answered per second of a round (first Submit to last answer).",
	},
	{
		Name: WorkloadPeer, Title: "3. Publish vs what users write today (the peer)",
		About: "Peer lock-per-publish: etcd `concurrency.Mutex` Lock → create-only PUT → put pointer → Unlock, per publish. Peer lease-holding: each replica takes the Mutex once and holds it (a lease) while it publishes (PUT + put pointer). " +
			"**Neither peer is safe**: no fence reaches the pointer, so a holder paused past its lease overwrites a newer pointer; fencepub refuses that publish (stale). " +
			"Uncontended: 16 publishers on 16 resources. HA: 16 replicas on 4 resources (4 per resource): fencepub's replicas and the lease-holding peer's wait for the lease and the holder publishes; the lock-per-publish peer's replicas take the lock for every publish. Throughput counts publishes that moved a pointer.",
	},
	{
		Name: WorkloadAuthority, Title: "4. Authority",
		About: "Acquire (uncontended; released between acquires outside the timed section) vs its floor: a lease grant + one bare transaction creating a leased key + one create-only marker PUT. Renew (one keepalive of the grant's lease, with its checks) vs a bare `KeepAliveOnce`. Sequential, each operation next to its baseline's.",
	},
	{
		Name: WorkloadReader, Title: "5. Reader",
		About: "Watch lag: from `Publish` returning applied to the `reader.Watch` update carrying that version, on another etcd connection (an update that arrived first counts as 0); baseline: a bare etcd Put to a bare Watch of the same key, measured the same way. " +
			"Open: `reader.Open` read to EOF (pointer read + ONE GET with If-Match, sent speculatively for the object opened last while the pointer is read + sha256 verification) vs a verifying GET of the same object (sha256 of the bytes checked against the digest, as `Open` must: the honest floor), at 1 KiB also vs a linearizable etcd read of the pointer followed by a GET, and vs a bare GET (information); `OpenPointer` (the watched pointer, no etcd read) vs the bare GET. " +
			"Service: examples/reader-service (in-memory cache fed by the watch; objects above its cache size streamed through `reader.Open` per request) vs a plain Go HTTP server serving the same bytes from memory (large objects: proxying a bare GET), driven by wrk.",
	},
	{
		Name: WorkloadGC, Title: "6. Garbage collection",
		About: "Objects are written with concurrent 1-byte PUTs as versions below the pointer (unpublishable orphans). Scan: a dry-run pass (snapshot + listing + classification of every key) vs a bare ListObjects of the same prefix. " +
			"Delete: real passes deleting orphans vs a bare ListObjects cut into multi-object deletes of 1000 keys, as many at once as the pass runs, in 4 units a side, alternating; then one pass deletes the large set. " +
			"Peak RSS of this process during the dry-run pass (its high-water mark reset before the pass), at the small and at the large object count. " +
			"Orphans: 1000 terms (quick: 100) on 8 resources each publish the resource's one job key and release, as `fencepub run` re-runs do (a duplicate, or a conflict with other output, alternately); objects besides the published ones left after one real pass with the default policy, against the count before it, per 1000 leftovers.",
	},
	{
		Name: WorkloadScaling, Title: "7. Scaling",
		About: "Publish throughput (1 KiB) with 1, 4, 16 and 64 concurrent publishers on distinct resources vs the floor at the same concurrency.",
	},
	{
		Name: WorkloadCluster, Title: "7b. Scaling: a 3-member etcd cluster vs a single member",
		About: "fencepub and the floor (1 KiB, 1 and 16 publishers on distinct resources) on a dedicated 3-member etcd cluster vs the same on a dedicated single member, same MinIO, all four interleaved. The three members share this machine's CPUs and disk. Needs dedicated clusters (`fencepub-bench --local`).",
	},
	{
		Name: WorkloadRecovery, Title: "8. Recovery on the multi-node topology",
		About: "On a dedicated 3-member etcd and 4-node distributed MinIO (`devstack.MultiNode`), with the CLI's etcd defaults (keepalive 10 s + 3 s, etcd.request_timeout 5 s): an operation sent right after a fault vs the same operation with no fault, alternating, one sample per fault. " +
			"Acquire sent as the raft leader is stopped (SIGSTOP, held 8 s); a 1 KiB publish sent as one MinIO node (not the client's) is killed (kill -9; restarted between samples); the watch lag of a publish sent as the raft leader is killed (kill -9; restarted between samples). Needs a dedicated cluster (`fencepub-bench --local`).",
	},
	{
		Name: WorkloadFootprint, Title: "9. etcd footprint and capacity",
		About: "N publishes (default 100k; 16 bytes each, 16 resources at once) on a dedicated single-member etcd; after each step the whole etcd is compacted and defragmented and its db size read (Status DbSize). " +
			"Bytes per publish: the db growth over the publishes, with the history entries, and after the history entries are deleted as GC's prune does once they are no longer retained (the op records alone, kept 7 days). " +
			"Baseline: the same records copied, under a domain name of the same length, in the JSON forms fencepub wrote before the compact encoding (an op record then held the whole object and the commit time). " +
			"Sustained rate: quota / (op-record bytes per publish × 7 days), at the default 2 GiB quota and the 8 GiB etcd recommends at most; higher is better, the other rows lower is better. Needs a dedicated etcd (`fencepub-bench --local`).",
	},
	{
		Name: WorkloadScale, Title: "10. Scale: many resources",
		About: "Seed: 10k resources (× --scale; quick 200) with 10 versions of 1 KiB each, published through the product by 64 concurrent holders (acquire, 10 publishes, release). " +
			"gc --all: real passes over every resource (`gc.RunOptions.All`; every object is still in grace, so they delete nothing) vs a bare listing of the keys they read: a paged range (500 keys a page, values included) of every etcd key of the domain while the prepared objects are listed (ListObjects), interleaved; peak RSS of this process during each. " +
			"Watch: a `reader.Reader` and `Watch` per resource on a second etcd client (as a reader service watching all of them) vs a bare etcd watch per key on the same client: memory per watched resource, and the watch lag (publish applied → update) while 100 of the resources publish at once vs a floor PUT of 1 KiB and a bare put → bare watches at the same counts (so both sides carry the same store load). " +
			"Acquire and publish (1 KiB) across 1024 distinct resources at c=64 vs their floors (workloads 1-2 and 4).",
	},
	{
		Name: WorkloadDataset, Title: "11. Dataset versions",
		About: "Publish: `publisher.PublishDataset` of a directory (walk, 8 uploads at once, manifest, one transaction) vs the floor: the same files read from disk and sent as create-only PUTs with sha256 at the same concurrency + ONE bare etcd compare-and-put; and vs `rclone copy` at the same parallelism (env-configured s3 remote), interleaved in rounds, at 10,000 files of 16 KiB and 16 of 64 MiB (quick: 200 and 4 of 1 MiB). " +
			"Incremental: 1% of the files changed and published with the base current vs a full publish (base none) of the same directory; bytes sent vs the dataset's. " +
			"Read: one file with the manifest cached (`OpenPointerFile` on a held pointer; `OpenFile` with its pointer read) vs a verifying GET of the same object. " +
			"GC: a real pass collecting a superseded 10,000-file version vs a bare ListObjects → RemoveObjects of as many keys. " +
			"Scale: one version of many 32-byte files (default 100k and 300k) published, read and collected through the fencepub CLI, each step a child process whose peak RSS is the highest VmHWM read from /proc/<pid>/status while it runs (its rusage maxrss would start at this process's own, inherited through vfork); the manifest's bytes per entry.",
	},
	{
		Name: WorkloadGroup, Title: "12. Groups",
		About: "Subject: `publisher.PublishGroup` of 8 single-object members (1 KiB, then 1 MiB) granted by one `authority.AcquireGroup`, non-strict: the 8 objects written at once (sha256 + create-only PUT each), then ONE etcd transaction with every member's compares. " +
			"Baseline, the floor: per iteration, the slowest of 8 create-only PUTs of the same size (with sha256, sent one after another) + ONE bare etcd transaction of the group transaction's size (2 + 3×8 compares, 1 + 2×8 puts, values of the sizes of the group's records). " +
			"Also vs 8 `Publish` calls one after another by the same holder, vs the serial floor (the 8 PUTs summed + the bare transaction), the floor with its 8 PUTs sent at once, and the floor again (an A/A row: the run's noise). The five operations run once per iteration, in rotating order (200 iterations at 1 KiB, 50 at 1 MiB; quick 5 and 3). " +
			"Limits: the largest `AcquireGroup` and `PublishGroup` (single objects, non-strict and strict) with the client's default `max_txn_ops` 128 (etcd's default): the size the refusal of a 64-member group names is granted or applied, and one member more is refused with `ErrGroupTooLarge` while the domain's etcd revision and object count stay unchanged.",
	},
}

// Workloads returns every workload name in run order.
func Workloads() []string {
	out := make([]string, len(workloadInfo))
	for i, w := range workloadInfo {
		out[i] = w.Name
	}
	return out
}

// Options tune a suite run. The zero value runs every workload at the
// default sizes (about 5–10 minutes on 2 cores): a zero field means its
// default; a negative (or non-finite) one is invalid (Validate).
type Options struct {
	// Workloads to run (Workloads() names); empty means all.
	Workloads []string
	// Quick shrinks every count so the suite runs in seconds (the smoke
	// test); its numbers are not meaningful.
	Quick bool
	// Sizes are the body sizes of the publish workload, in bytes; default
	// 1 KiB, 1 MiB, 64 MiB (quick: 1 KiB, 1 MiB).
	Sizes []int
	// Scale multiplies every operation count (default 1).
	Scale float64
	// Rounds is how many rounds interleave a subject with its baseline
	// (default 10; quick 1): the more, the less a burst of load on a shared
	// machine hits one side only. Measurements of seconds each (GC passes,
	// wrk runs) use at most 3.
	Rounds int
	// GCObjects is the large object count of the GC workload (default
	// 100000; quick 1000); the small count is a tenth of it.
	GCObjects int
	// WrkDuration is the length of one wrk run (default 3 s; quick 1 s).
	WrkDuration time.Duration
	// ReaderService is the path of the examples/reader-service binary;
	// empty looks for "reader-service" in the devstack bin directory.
	ReaderService string
	// Wrk is the path of wrk; empty looks it up in PATH.
	Wrk string
	// Fencepub is the path of the fencepub CLI, which the dataset
	// workload's scale steps run as child processes; empty looks for
	// "fencepub" in the devstack bin directory.
	Fencepub string
	// ScaleFiles are the two file counts of the dataset workload's scale
	// steps (default 100,000 and 300,000 × Scale; quick 300 and 900).
	ScaleFiles []int
	// Log receives progress; nil discards.
	Log *slog.Logger
}

// Validate reports options Run refuses, before anything runs: a workload
// name that does not exist (ErrUnknownWorkload), a size below 1 byte,
// ScaleFiles other than two increasing counts, a negative or non-finite
// Scale, a negative Rounds, GCObjects or WrkDuration
// (ErrInvalid). Zero values are valid: they mean the defaults.
func (o Options) Validate() error {
	for _, w := range o.Workloads {
		if !slices.Contains(Workloads(), w) {
			return fmt.Errorf("%w: %q (want some of %s)", ErrUnknownWorkload, w, strings.Join(Workloads(), ", "))
		}
	}
	for _, size := range o.Sizes {
		if size <= 0 {
			return fmt.Errorf("%w: size %d (want at least 1 byte)", ErrInvalid, size)
		}
	}
	if len(o.ScaleFiles) > 0 && (len(o.ScaleFiles) != 2 || o.ScaleFiles[0] < 1 || o.ScaleFiles[1] <= o.ScaleFiles[0]) {
		return fmt.Errorf("%w: scale files %v (want two counts, the first at least 1 and below the second)", ErrInvalid, o.ScaleFiles)
	}
	switch {
	case o.Scale < 0 || math.IsNaN(o.Scale) || math.IsInf(o.Scale, 0):
		return fmt.Errorf("%w: scale %g (want a finite number > 0, or 0 for the default 1)", ErrInvalid, o.Scale)
	case o.Rounds < 0:
		return fmt.Errorf("%w: rounds %d (want at least 1, or 0 for the default)", ErrInvalid, o.Rounds)
	case o.GCObjects < 0:
		return fmt.Errorf("%w: GC objects %d (want at least 1, or 0 for the default)", ErrInvalid, o.GCObjects)
	case o.WrkDuration < 0:
		return fmt.Errorf("%w: wrk duration %s (want more than 0, or 0 for the default)", ErrInvalid, o.WrkDuration)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if len(o.Workloads) == 0 {
		o.Workloads = Workloads()
	}
	if len(o.Sizes) == 0 {
		o.Sizes = []int{1 << 10, 1 << 20, 64 << 20}
		if o.Quick {
			o.Sizes = []int{1 << 10, 1 << 20}
		}
	}
	if o.Scale <= 0 {
		o.Scale = 1
	}
	if o.Rounds <= 0 {
		o.Rounds = 10
		if o.Quick {
			o.Rounds = 1
		}
	}
	if o.GCObjects <= 0 {
		o.GCObjects = 100_000
		if o.Quick {
			o.GCObjects = 1000
		}
	}
	if o.WrkDuration <= 0 {
		o.WrkDuration = 3 * time.Second
		if o.Quick {
			o.WrkDuration = time.Second
		}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

// String describes the options for the report.
func (o Options) String() string {
	sizes := make([]string, len(o.Sizes))
	for i, s := range o.Sizes {
		sizes[i] = sizeName(s)
	}
	return fmt.Sprintf("workloads %s, sizes %s, scale %g, %d rounds, GC objects %d, wrk %s, quick %v",
		strings.Join(o.Workloads, ","), strings.Join(sizes, "/"), o.Scale, o.Rounds, o.GCObjects, o.WrkDuration, o.Quick)
}

// Env is what the suite runs against.
type Env struct {
	// Target's Etcd and Store are the servers; its NS is the suite's own
	// namespace: each workload works in a domain derived from it
	// ("<domain>-<workload>") and deletes its keys and objects at the end.
	// Never point it at a production domain.
	bench.Target
	// Config is the connection configuration of Target's servers, given
	// to the reader-service process (its namespace is replaced).
	Config config.Config
	// NewEtcd returns another client of Target's etcd (readers and
	// watchers use their own connection); nil shares Target.Etcd.
	NewEtcd func() (*clientv3.Client, error)
	// StartEtcd starts a dedicated etcd cluster of members members and
	// returns a client and a stop function; nil skips the cluster rows of
	// the scaling workload.
	StartEtcd func(ctx context.Context, members int) (*clientv3.Client, func(), error)
	// StartCluster starts a dedicated multi-node cluster
	// (devstack.MultiNode) and returns it with a stop function; nil
	// skips the recovery workload.
	StartCluster func(ctx context.Context) (*devstack.Cluster, func(), error)
	// Servers describes the servers for the report.
	Servers string
}

// runner is one Run call.
type runner struct {
	env  Env
	opts Options
	log  *slog.Logger
	rep  *bench.Report
}

// Run runs the selected workloads against env and returns the report.
// It blocks until every workload ran or ctx ended. A workload that fails
// (a server error, not a missed target) is logged, recorded as a skipped
// row, and the others still run; its error is returned joined with the
// others' at the end, together with the report. Errors: ErrUnknownWorkload,
// ErrInvalid (Validate, or an incomplete env), the workloads' errors, ctx's
// error.
func Run(ctx context.Context, env Env, opts Options) (bench.Report, error) {
	if err := opts.Validate(); err != nil {
		return bench.Report{Machine: bench.ThisMachine(), Servers: env.Servers}, err
	}
	opts = opts.withDefaults()
	rep := bench.Report{Machine: bench.ThisMachine(), Servers: env.Servers, Options: opts.String()}
	if env.Etcd == nil || env.Store == nil {
		return rep, fmt.Errorf("%w: Env needs an etcd client and a store", ErrInvalid)
	}
	if _, err := layout.NewNamespace(env.NS.Prefix, env.NS.Domain); err != nil {
		return rep, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	s := &runner{env: env, opts: opts, log: opts.Log, rep: &rep}
	runs := map[string]func(context.Context) error{
		WorkloadPublish: s.publish, WorkloadPipeline: s.pipeline, WorkloadPeer: s.peer, WorkloadAuthority: s.authorityWorkload,
		WorkloadReader: s.readerWorkload, WorkloadGC: s.gcWorkload, WorkloadScaling: s.scaling, WorkloadCluster: s.cluster,
		WorkloadRecovery: s.recovery, WorkloadFootprint: s.footprint, WorkloadScale: s.scaleWorkload,
		WorkloadDataset: s.datasetWorkload, WorkloadGroup: s.groupWorkload,
	}
	var errs []error
	for _, info := range workloadInfo {
		if !slices.Contains(opts.Workloads, info.Name) {
			continue
		}
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		rep.Workloads = append(rep.Workloads, info)
		start := time.Now()
		s.log.Info("bench: workload", "name", info.Name)
		if err := runs[info.Name](ctx); err != nil {
			s.log.Error("bench: workload failed", "name", info.Name, "err", err)
			rep.Rows = append(rep.Rows, bench.SkippedRow(info.Name, "(whole workload)", "", "", "failed: "+err.Error()))
			errs = append(errs, fmt.Errorf("bench: workload %s: %w", info.Name, err))
		}
		s.log.Info("bench: workload done", "name", info.Name, "seconds", time.Since(start).Round(time.Second/10).Seconds())
	}
	return rep, errors.Join(errs...)
}

// n scales an operation count: quick in quick mode, else def × Scale, at
// least 1.
func (s *runner) n(def, quick int) int {
	if s.opts.Quick {
		return quick
	}
	return max(int(float64(def)*s.opts.Scale), 1)
}

// rounds is the number of rounds to interleave ops operations at
// concurrency conc in: Options.Rounds, fewer when a round would give some
// workers fewer than 2 operations (the concurrency would not be reached).
func (s *runner) rounds(ops, conc int) int {
	return max(min(s.opts.Rounds, ops/(2*conc)), 1)
}

// slowRounds is the number of rounds of measurements that take seconds
// each (a GC pass, a wrk run): Options.Rounds, at most 3.
func (s *runner) slowRounds() int { return min(s.opts.Rounds, 3) }

// add appends row to the report and logs it.
func (s *runner) add(row bench.Row) {
	s.rep.Rows = append(s.rep.Rows, row)
	attrs := []any{"workload", row.Workload, "config", row.Config}
	if row.Skipped != "" {
		attrs = append(attrs, "skipped", row.Skipped)
	} else {
		attrs = append(attrs, "p50_ms", ms(row.Subject.P50), "base_p50_ms", ms(row.Base.P50),
			"throughput", bench.Num(row.Subject.Throughput), "base_throughput", bench.Num(row.Base.Throughput),
			"ratio_p50", fmt.Sprintf("%.2f", row.RatioP50), "ratio_throughput", fmt.Sprintf("%.2f", row.RatioThroughput))
	}
	if row.Met != nil {
		attrs = append(attrs, "target", row.Target, "met", *row.Met)
	}
	if row.Note != "" {
		attrs = append(attrs, "note", row.Note)
	}
	s.log.Info("bench: row", attrs...)
}

// stack is fencepub on one workload's own domain.
type stack struct {
	bench.Target
	auth *authority.Authority
	pub  *publisher.Client
	reg  *prometheus.Registry // the publisher's metrics
}

// newStack initialises the domain "<suite domain>-<name>" on t's servers.
func (s *runner) newStack(ctx context.Context, t bench.Target, name string) (*stack, error) {
	ns, err := layout.NewNamespace(s.env.NS.Prefix, s.env.NS.Domain+"-"+name)
	if err != nil {
		return nil, err
	}
	t.NS = ns
	a, err := authority.New(authority.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(ns), Etcd: t.Etcd, Store: t.Store}})
	if err != nil {
		return nil, err
	}
	if _, err := operator.Init(ctx, a); err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	p, err := publisher.New(publisher.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(ns), Etcd: t.Etcd, Store: t.Store}, Registerer: reg})
	if err != nil {
		return nil, err
	}
	return &stack{Target: t, auth: a, pub: p, reg: reg}, nil
}

// phases returns the publisher's cumulative object-write and transaction
// times and their counts (its duration histograms), so a row can split a
// publish into its two round trips.
func (st *stack) phases() (phases, error) {
	mfs, err := st.reg.Gather()
	if err != nil {
		return phases{}, err
	}
	var p phases
	for _, mf := range mfs {
		if len(mf.GetMetric()) != 1 {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		d := time.Duration(h.GetSampleSum() * float64(time.Second))
		switch mf.GetName() {
		case "fencepub_publish_object_write_duration_seconds":
			p.object, p.objects = d, int64(h.GetSampleCount())
		case "fencepub_publish_txn_duration_seconds":
			p.txn, p.txns = d, int64(h.GetSampleCount())
		}
	}
	return p, nil
}

// phases is the time spent in the object write and in the etcd transaction
// of publishes, with their counts.
type phases struct {
	object, txn   time.Duration
	objects, txns int64
}

// sub returns p - q.
func (p phases) sub(q phases) phases {
	return phases{object: p.object - q.object, txn: p.txn - q.txn, objects: p.objects - q.objects, txns: p.txns - q.txns}
}

// add returns p + q.
func (p phases) add(q phases) phases {
	return phases{object: p.object + q.object, txn: p.txn + q.txn, objects: p.objects + q.objects, txns: p.txns + q.txns}
}

// means returns the mean object write and transaction time.
func (p phases) means() (object, txn time.Duration) {
	if p.objects > 0 {
		object = p.object / time.Duration(p.objects)
	}
	if p.txns > 0 {
		txn = p.txn / time.Duration(p.txns)
	}
	return object, txn
}

// deleteParallel is how many multi-object deletes run at once in clean-ups
// and in the bare delete baseline: GC's default, so the baseline is the
// same shape as the pass it is compared with.
var deleteParallel = gc.DefaultConfig().DeleteConcurrency

// grantTTL is the TTL of the benchmarks' grants: longer than any workload
// step, so no lease expires mid-measurement.
const grantTTL = 5 * time.Minute

// bind acquires res and binds a (non-strict, the default) Publisher to the
// grant.
func (st *stack) bind(ctx context.Context, res string) (*publisher.Publisher, authority.Grant, error) {
	g, err := st.auth.Acquire(ctx, authority.AcquireRequest{Resource: res, Owner: "bench-" + authority.NewID()[:8], TTL: grantTTL})
	if err != nil {
		return nil, g, err
	}
	p, err := st.pub.Bind(ctx, publisher.GrantTerm(g, false))
	return p, g, err
}

// bindAll binds one Publisher per resource name and returns them with
// their grants.
func (st *stack) bindAll(ctx context.Context, names []string) ([]*publisher.Publisher, []authority.Grant, error) {
	pubs := make([]*publisher.Publisher, len(names))
	grants := make([]authority.Grant, len(names))
	for i, res := range names {
		p, g, err := st.bind(ctx, res)
		if err != nil {
			st.releaseAll(ctx, grants[:i])
			return nil, nil, err
		}
		pubs[i], grants[i] = p, g
	}
	return pubs, grants, nil
}

// cleanup deletes every object and etcd key under t.NS (the workload's own
// throwaway domain), on a fresh bounded context so it runs after a
// cancellation too. Errors are logged.
func (s *runner) cleanup(ctx context.Context, t bench.Target) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
	defer cancel()
	if err := removePrefix(ctx, t, t.NS.Root(), deleteParallel); err != nil {
		s.log.Warn("bench: cleanup objects", "prefix", t.NS.Root(), "err", err)
	}
	if _, err := t.Etcd.Delete(ctx, t.NS.Root(), clientv3.WithPrefix()); err != nil {
		s.log.Warn("bench: cleanup etcd", "prefix", t.NS.Root(), "err", err)
	}
}

// removePrefix deletes every object under prefix: a listing cut into
// batches of 1000 keys (S3's limit per multi-object delete), each sent by
// one of parallel workers with RemoveObjects. It is also the bare baseline
// of GC's delete rate. It returns the first error.
func removePrefix(ctx context.Context, t bench.Target, prefix string, parallel int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan []string, parallel)
	var (
		mu    sync.Mutex
		first error
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
		cancel()
	}
	var wg sync.WaitGroup
	for range max(parallel, 1) {
		wg.Go(func() {
			for batch := range batches {
				for i, err := range t.Store.Delete(ctx, batch) {
					if err != nil {
						fail(fmt.Errorf("remove %s: %w", batch[i], err))
					}
				}
			}
		})
	}
	var batch []string
	for o, err := range t.Store.List(ctx, prefix, objstore.ListOptions{}) {
		if err != nil {
			fail(err)
			break
		}
		if batch = append(batch, o.Key); len(batch) == 1000 {
			batches <- batch
			batch = nil
		}
	}
	if len(batch) > 0 && ctx.Err() == nil {
		batches <- batch
	}
	close(batches)
	wg.Wait()
	return first
}

// body returns size bytes of pseudo-random content (so nothing compresses
// or deduplicates), the same for a given size.
func body(size int) []byte {
	b := make([]byte, size)
	r := rand.New(rand.NewPCG(uint64(size), 8))
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		for k := range 8 {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	return b
}

// sizeName formats a size in bytes as "1 KiB", "64 MiB".
func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	default:
		return fmt.Sprintf("%d B", n)
	}
}

// names returns n resource names "<prefix>-<i>".
func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}
