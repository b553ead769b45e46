package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/objstore/s3store"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/gc"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/operator"
	"github.com/fencepub/fencepub/internal/testkit/faultproxy"
	"github.com/fencepub/fencepub/internal/wait"
	"github.com/fencepub/fencepub/internal/wallclock"
	"github.com/fencepub/fencepub/publisher"
	"github.com/fencepub/fencepub/reader"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Config configures a run. Cluster, Seed and Duration are required; zero
// values of the others take the defaults.
type Config struct {
	// Cluster is the servers to run against (StartCluster). A run leaves
	// them running and healed; several runs may use one Cluster in turn,
	// each in a fresh domain.
	Cluster *Cluster
	// Seed selects the fault schedule (Plan) and the workload's choices.
	Seed int64
	// Duration is how long the workload and the faults run; draining,
	// settling and checking take a little longer.
	Duration time.Duration
	// Dir receives the worker processes' logs. Default: a new directory
	// under os.TempDir.
	Dir string
	// FailureDir receives chaos-failure-<seed>.json (and the porcupine view
	// of each non-linearizable resource) when a run finds a violation.
	// Default Dir.
	FailureDir string
	// WorkerCommand is the argv that starts a worker process: a program that
	// calls WorkerMain when IsWorker is true. Default: this executable.
	WorkerCommand []string
	// Processes is the number of worker processes (the targets of worker
	// faults); Workers the number of in-process workers, Readers of reader
	// goroutines, Collectors of concurrent GC loops. Defaults 3, 4, 3, 2.
	Processes, Workers, Readers, Collectors int
	// DatasetWorkers is the number of in-process workers that publish
	// dataset versions (with and without reuse of the current version's
	// files) to the dataset resources, DatasetReaders of the goroutines
	// that read their files and manifests. Defaults 2, 1.
	DatasetWorkers, DatasetReaders int
	// GroupWorkers is the number of in-process workers that acquire and
	// publish two or three group resources as one group (zombies too),
	// GroupReaders of the goroutines that read them at one revision
	// (reader.ReadCut). Defaults 2, 1.
	GroupWorkers, GroupReaders int
	// Workload shapes the operations (resources per window, lease TTL,
	// publish deadline).
	Workload Workload
	// CheckTimeout bounds the linearizability check of one resource.
	// Default 30 s.
	CheckTimeout time.Duration
	// Progress, if set, receives a status line every 10 s and the summary.
	Progress io.Writer
	// Logger receives the harness's own events. Default: discard.
	Logger *slog.Logger
	// Network, when set, is the network the Cluster's servers and the
	// worker processes are on (harness/partition): each worker process
	// runs on its own host of it and reaches the servers directly, without
	// a proxy, and the schedule gains the partition track
	// (PlanPartitions), which cuts the network between them. Worker faults
	// that act through a worker's proxies then only kill.
	Network Network
	// Clients are more clients of the run, each started in a goroutine of
	// its own with the workload and waited for at its end: they log their
	// grants, publishes and attempts to the run's Recorder (ClientEnv), so
	// the checker judges them with the rest (the fencepub command in a
	// partition scenario).
	Clients []func(ClientEnv)
	// Schedule, when set, is the run's fault schedule instead of the one
	// planned from Seed and Duration (a scenario of its own). Its Workers
	// must not exceed Processes.
	Schedule *Schedule
}

// ClientEnv is what a client of Config.Clients gets.
type ClientEnv struct {
	Namespace layout.Namespace // the run's domain
	Epoch     uint64           // the domain's epoch when the client started
	Recorder  *Recorder        // where it logs what it does
	// Stop closes when the client must stop (finishing what it does).
	Stop <-chan struct{}
	// Resource returns a resource of the current window, as the
	// workers pick them (rng's draws).
	Resource func(rng *mrand.Rand) string
}

// Network is the network of a run with partitions (Config.Network). Each
// method cuts or degrades links until the heal it returns runs; heal may
// be called more than once. Methods are called concurrently (the
// partition track, and an etcd restore cutting every worker process off),
// and their cuts may overlap.
type Network interface {
	// WorkerCommand returns the argv that runs argv on the host of worker
	// process slot.
	WorkerCommand(slot int, argv []string) []string
	// CutWorker drops the packets between worker process slot and every
	// etcd member (store false) or the object store (store true); with
	// oneWay only those towards the worker.
	CutWorker(slot int, store, oneWay bool) (heal func() error, err error)
	// DegradeWorker loses a share loss (0: none) of the packets between
	// worker process slot and every etcd member (store false) or the
	// object store (store true), and delays the others by delay (0: none)
	// each way.
	DegradeWorker(slot int, store bool, loss float64, delay time.Duration) (heal func() error, err error)
	// IsolateMember cuts etcd member (an index of Cluster.Etcd.Members)
	// and worker process slot from every other member.
	IsolateMember(member, slot int) (heal func() error, err error)
}

// Result is what a run found.
type Result struct {
	Schedule   Schedule    `json:"schedule"`
	Summary    Summary     `json:"summary"`
	Violations []Violation `json:"violations"`
	// FailureFile is the path of the failure file, when there were
	// violations.
	FailureFile string   `json:"failure_file,omitempty"`
	History     *History `json:"-"`
}

// Run runs one chaos run: it starts the workload (worker processes,
// in-process workers, readers, dataset and group workers and readers, a
// forger and concurrent GC collectors) in a fresh domain, injects the faults of Plan(Seed, Duration, ...) into the
// cluster and the processes (an etcd restore followed by recovery.Recover,
// and a replacement of etcd by an empty cluster followed by a take-over of
// the bucket, among them), then stops the workload, settles every open publish with
// Resolve, heals the cluster, runs a last GC pass, lists the objects that
// must still exist, reads every file of every retained dataset version
// (sweepDatasets) and judges the history with Verify. On a violation it
// writes the random seed, the schedule and the history to
// FailureDir/chaos-failure-<seed>.json.
//
// It blocks for about Duration plus the time to drain and check. An error
// means the run could not be made or judged (servers unreachable after the
// faults, ctx cancelled); violations are in the Result.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	h, err := newHarness(cfg)
	if err != nil {
		return nil, err
	}
	defer h.close()
	return h.run(ctx)
}

// harness is one run.
type harness struct {
	cfg   Config
	wl    Workload
	sched Schedule
	log   *slog.Logger
	clock Clock
	rec   *Recorder
	ns    layout.Namespace

	direct  *clientv3.Client     // every member, no proxy
	auth    *authority.Authority // on direct: Recover after a restore
	store   objstore.Store
	pub     *publisher.Client // direct: the harness's own Resolves
	watch   *watcher
	shared  *proxySet
	slots   []*slot
	closers []func()

	stop     chan struct{}
	stopOnce sync.Once
	procMu   sync.Mutex // guards slots' processes
	// gate keeps the harness's own etcd clients (GC passes, Resolves) off
	// etcd during a restore: they hold it for reading, a restore for
	// writing. Everything else reaches etcd through the proxies.
	gate  sync.RWMutex
	epoch atomic.Uint64 // the domain's current epoch
}

func newHarness(cfg Config) (*harness, error) {
	if cfg.Cluster == nil || cfg.Duration <= 0 {
		return nil, errors.New("chaos: Config needs a Cluster and a positive Duration")
	}
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	def(&cfg.Processes, 3)
	def(&cfg.Workers, 4)
	def(&cfg.Readers, 3)
	def(&cfg.Collectors, 2)
	def(&cfg.DatasetWorkers, 2)
	def(&cfg.DatasetReaders, 1)
	def(&cfg.GroupWorkers, 2)
	def(&cfg.GroupReaders, 1)
	if cfg.CheckTimeout == 0 {
		cfg.CheckTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if len(cfg.WorkerCommand) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		cfg.WorkerCommand = []string{exe}
	}
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", fmt.Sprintf("fencepub-chaos-%d-", cfg.Seed))
		if err != nil {
			return nil, err
		}
		cfg.Dir = d
	}
	if cfg.FailureDir == "" {
		cfg.FailureDir = cfg.Dir
	}
	wl := cfg.Workload.withDefaults()
	sched := PlanOn(cfg.Cluster.storeKind(), cfg.Seed, cfg.Duration, cfg.Processes, wl.TTL)
	if cfg.Network != nil {
		sched = PlanPartitions(sched, wl.TTL, wl.PublishTimeout)
	}
	if cfg.Schedule != nil {
		if cfg.Schedule.Workers > cfg.Processes {
			return nil, fmt.Errorf("chaos: the schedule targets %d worker processes, the run has %d", cfg.Schedule.Workers, cfg.Processes)
		}
		sched = *cfg.Schedule
	}
	return &harness{cfg: cfg, wl: wl, log: cfg.Logger, stop: make(chan struct{}), sched: sched}, nil
}

// close kills the worker processes still running (a run cut short) and
// closes the clients, proxies and watch.
func (h *harness) close() {
	h.procMu.Lock()
	for _, sl := range h.slots {
		if sl.proc != nil {
			sl.proc.kill()
		}
	}
	h.procMu.Unlock()
	for i := len(h.closers) - 1; i >= 0; i-- {
		h.closers[i]()
	}
}

func (h *harness) rng(stream uint64) *mrand.Rand {
	return mrand.New(mrand.NewPCG(uint64(h.cfg.Seed), stream))
}

func (h *harness) run(ctx context.Context) (*Result, error) {
	if err := h.setup(ctx); err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	if err := h.startWorkload(&wg); err != nil {
		h.halt()
		wg.Wait()
		return nil, err
	}
	faults := make(chan struct{})
	go func() {
		defer close(faults)
		h.runFaults(ctx)
	}()
	// The workload runs until Duration has passed and every planned fault
	// was injected (a fault starts late when restarts before it took
	// longer than planned).
	h.progress(ctx, faults)
	h.halt()
	<-faults // already closed, unless ctx ended
	wg.Wait()
	h.stopProcesses()
	return h.finish(ctx)
}

// setup connects, creates the domain and starts the watch.
func (h *harness) setup(ctx context.Context) error {
	cl := h.cfg.Cluster
	var err error
	if h.direct, err = cl.Etcd.Client(); err != nil {
		return err
	}
	h.closers = append(h.closers, func() { _ = h.direct.Close() })
	if h.store, err = s3store.New(cl.s3Config()); err != nil {
		return err
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	if h.ns, err = layout.NewNamespace("chaos", fmt.Sprintf("s%d-%s", h.cfg.Seed, hex.EncodeToString(b[:]))); err != nil {
		return err
	}
	auth, err := authority.New(authority.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(h.ns), Etcd: h.direct, Store: h.store}})
	if err != nil {
		return err
	}
	ictx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	d, err := operator.Init(ictx, auth)
	if err != nil {
		return fmt.Errorf("chaos: init domain %s: %w", h.ns.Root(), err)
	}
	h.epoch.Store(d.Epoch)
	h.auth = auth
	rev, err := etcdRevision(ictx, h.direct, h.ns.EpochKey())
	if err != nil {
		return err
	}
	h.clock = NewClock()
	h.rec = NewRecorder(h.ns, d.Epoch, h.clock)
	h.rec.h.ProbeSpan = int64(h.wl.PublishTimeout) // before any client runs
	if h.pub, err = h.publisherClient(h.direct, h.store); err != nil {
		return err
	}
	h.watch = newWatcher(h.direct, h.ns, h.clock, h.rec)
	wctx, wcancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.watch.run(wctx, rev+1)
	}()
	h.closers = append(h.closers, func() { wcancel(); <-done })
	if h.shared, err = newProxySet(cl); err != nil {
		return err
	}
	h.closers = append(h.closers, h.shared.close)
	for i := range h.cfg.Processes {
		px, err := newProxySet(cl)
		if err != nil {
			return err
		}
		h.closers = append(h.closers, px.close)
		h.slots = append(h.slots, &slot{idx: i, px: px})
	}
	h.log.Info("chaos: run starting", "seed", h.cfg.Seed, "duration", h.cfg.Duration, "domain", h.ns.Root(), "epoch", d.Epoch, "faults", len(h.sched.Faults))
	return nil
}

func (h *harness) publisherClient(cli *clientv3.Client, st objstore.Store) (*publisher.Client, error) {
	return publisher.New(publisher.Config{
		Env: fencepub.Env{Namespace: fencepub.Namespace(h.ns), Etcd: cli, Store: st}, PartSize: partSize,
		RequestTimeout: h.wl.AttemptTimeout, ResendTimeout: h.wl.PublishTimeout,
	})
}

// collector returns a GC collector on the direct clients. Its clock is the
// run's (Clock.Wall), so the times it writes into seals convert back to run
// time exactly. It keeps everything superseded within the run (1 h grace)
// and seals in-flight objects of dead grants after 2 s.
func (h *harness) collector(auth *authority.Authority) (*gc.Collector, error) {
	return gc.New(wallclock.With(gc.Config{
		Env: fencepub.Env{Namespace: fencepub.Namespace(h.ns), Etcd: h.direct, Store: h.store}, Authority: auth,
		Policy:         gc.Policy{Retain: 2, Grace: time.Hour, ClockSkew: 100 * time.Millisecond, AbandonAfter: 2 * time.Second},
		RequestTimeout: 5 * time.Second,
	}, func() time.Time { return h.clock.Wall(h.clock.Now()) }))
}

// startWorkload starts the in-process goroutines and the worker processes.
func (h *harness) startWorkload(wg *sync.WaitGroup) error {
	cl := h.cfg.Cluster
	cli, err := etcdClient(h.shared.endpoints())
	if err != nil {
		return err
	}
	h.closers = append(h.closers, func() { _ = cli.Close() })
	st, err := s3store.New(h.shared.s3(cl.s3Config()))
	if err != nil {
		return err
	}
	auth, err := authority.New(authority.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(h.ns), Etcd: cli, Store: st}, RequestTimeout: 2 * time.Second})
	if err != nil {
		return err
	}
	pub, err := h.publisherClient(cli, st)
	if err != nil {
		return err
	}
	newWorker := func(id string, stream uint64) *worker {
		return &worker{
			id: id, clock: h.clock, epoch: h.epoch.Load, auth: auth, pub: pub, wl: h.wl,
			rng: h.rng(stream), out: h.rec, stop: h.stop,
		}
	}
	goRun := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f()
		}()
	}
	for i := range h.cfg.Workers {
		w := newWorker(fmt.Sprintf("w%d", i), uint64(100+i))
		w.zombies = true
		goRun(w.run)
	}
	rcfg := reader.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(h.ns), Etcd: cli, Store: st}}
	for i := range h.cfg.DatasetWorkers {
		w := newWorker(fmt.Sprintf("dw%d", i), uint64(500+i))
		w.zombies, w.datasets, w.rcfg = true, true, rcfg
		goRun(w.run)
	}
	for i := range h.cfg.DatasetReaders {
		l := &datasetReadLoop{id: fmt.Sprintf("dreader%d", i), clock: h.clock, cfg: rcfg, wl: h.wl, rng: h.rng(uint64(600 + i)), rec: h.rec, stop: h.stop}
		goRun(l.run)
	}
	for i := range h.cfg.GroupWorkers {
		w := newWorker(fmt.Sprintf("gw%d", i), uint64(700+i))
		w.zombies = true
		goRun(w.runGroups)
	}
	for i := range h.cfg.GroupReaders {
		l := &groupReadLoop{id: fmt.Sprintf("greader%d", i), clock: h.clock, cfg: rcfg, wl: h.wl, rng: h.rng(uint64(800 + i)), rec: h.rec, stop: h.stop}
		goRun(l.run)
	}
	goRun(func() { h.storeCanary(st) })
	forger := newWorker("forger", 200)
	goRun(func() { forger.forge(func() []GrantEvent { return h.rec.recentGrants(20) }) })
	for i := range h.cfg.Readers {
		l := &readLoop{id: fmt.Sprintf("reader%d", i), clock: h.clock, cfg: rcfg, wl: h.wl, rng: h.rng(uint64(300 + i)), rec: h.rec, stop: h.stop}
		goRun(l.run)
	}
	gcAuth, err := authority.New(authority.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(h.ns), Etcd: h.direct, Store: h.store}})
	if err != nil {
		return err
	}
	for i := range h.cfg.Collectors {
		col, err := h.collector(gcAuth)
		if err != nil {
			return err
		}
		l := &gcLoop{id: i, gate: &h.gate, clock: h.clock, col: col, wl: h.wl, rng: h.rng(uint64(400 + i)), rec: h.rec, stop: h.stop}
		goRun(l.run)
	}
	for _, c := range h.cfg.Clients {
		env := ClientEnv{
			Namespace: h.ns, Epoch: h.epoch.Load(), Recorder: h.rec, Stop: h.stop,
			Resource: func(rng *mrand.Rand) string { return h.wl.pick(h.clock.Now(), rng) },
		}
		goRun(func() { c(env) })
	}
	for _, sl := range h.slots {
		if err := h.startProcess(sl); err != nil {
			return err
		}
	}
	return nil
}

func (h *harness) spec() WorkerSpec {
	spec := WorkerSpec{
		Seed: uint64(h.cfg.Seed), ClockBase: h.clock.Base(), Namespace: h.ns, Epoch: h.epoch.Load(),
		S3: h.cfg.Cluster.s3Config(), Workload: h.wl,
	}
	if h.cfg.Network != nil {
		spec.Etcd = h.cfg.Cluster.Etcd.Endpoints() // no proxy: the network is what fails
	}
	return spec
}

func (h *harness) startProcess(sl *slot) error {
	h.procMu.Lock()
	defer h.procMu.Unlock()
	argv := h.cfg.WorkerCommand
	if h.cfg.Network != nil {
		argv = h.cfg.Network.WorkerCommand(sl.idx, argv)
	}
	return startProcess(argv, h.cfg.Dir, sl, h.spec(), h.rec)
}

// Store canary: a create-only write of a small object every
// canaryInterval, each within canaryTimeout, to keys outside the domain.
const (
	canaryInterval = 250 * time.Millisecond
	canaryTimeout  = 2 * time.Second
)

// storeCanary writes through st, the clients' path to the store, until the
// run halts, logging each write (History.StoreProbes), then deletes what it
// wrote. Liveness measures a store-side fault's failed operations against
// it: the store served writes, or it did not.
func (h *harness) storeCanary(st objstore.Store) {
	prefix := "chaos-canary/" + strings.ReplaceAll(h.ns.Root(), "/", "-") + "/"
	var keys []string
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for i, err := range st.Delete(ctx, keys) {
			if err != nil {
				h.log.Warn("chaos: store canary object not deleted", "key", keys[i], "err", err)
			}
		}
	}()
	tick := time.NewTicker(canaryInterval)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-h.stop:
			return
		case <-tick.C:
		}
		key := fmt.Sprintf("%s%08d", prefix, n)
		ctx, cancel := context.WithTimeout(context.Background(), canaryTimeout)
		call := h.clock.Now()
		_, err := objstore.PutSmallCreateOnly(ctx, st, key, []byte("store canary"), "")
		cancel()
		h.rec.StoreProbe(StoreProbe{Call: call, Return: h.clock.Now(), OK: err == nil})
		keys = append(keys, key)
	}
}

func (h *harness) halt() { h.stopOnce.Do(func() { close(h.stop) }) }

func (h *harness) halted() bool {
	select {
	case <-h.stop:
		return true
	default:
		return false
	}
}

// progress waits until Duration has passed and faults is closed, or ctx
// ends, printing a status line every 10 s.
func (h *harness) progress(ctx context.Context, faults <-chan struct{}) {
	end := time.NewTimer(h.cfg.Duration)
	defer end.Stop()
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	over := false
	for {
		select {
		case <-end.C:
			over = true
		case <-faults:
			faults = nil
		case <-ctx.Done():
			return
		case <-tick.C:
			if h.cfg.Progress != nil {
				fmt.Fprintf(h.cfg.Progress, "chaos seed %d: %5.0fs %s\n", h.cfg.Seed, time.Duration(h.clock.Now()).Seconds(), h.rec.progress())
			}
		}
		if over && faults == nil {
			return
		}
	}
}

// runFaults runs the two fault tracks of the schedule until both end or ctx
// ends.
func (h *harness) runFaults(ctx context.Context) {
	var wg sync.WaitGroup
	tracks := [][]FaultKind{ServerFaultsOf(h.sched.Store), WorkerFaults()}
	if h.sched.Partitions {
		tracks = append(tracks, PartitionFaults())
	}
	for _, kinds := range tracks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, f := range h.sched.track(kinds) {
				if !wait.Sleep(ctx, time.Duration(int64(f.At)-h.clock.Now())) || ctx.Err() != nil {
					return
				}
				h.inject(ctx, f)
			}
		}()
	}
	wg.Wait()
}

// inject runs fault f and logs it.
func (h *harness) inject(ctx context.Context, f Fault) {
	rec := FaultRecord{Kind: f.Kind, Start: h.clock.Now()}
	var err error
	switch f.Kind {
	case WorkerPause, WorkerKillUpload, WorkerKillPublish, WorkerClockSkew:
		rec.Target, rec.Detail, err = h.injectWorker(ctx, f)
	case EtcdRestore:
		rec.Target, rec.Detail, err = h.injectRestore(ctx, f)
	case EtcdReplaced:
		rec.Target, rec.Detail, err = h.injectReplace(ctx, f)
	case PartitionWorkerEtcd, PartitionWorkerEtcdOneWay, PartitionLeader, PartitionLossyEtcd, PartitionWorkerStore:
		err = h.injectPartition(ctx, f, &rec)
	default:
		proxies := append([]*proxySet{h.shared}, slotProxies(h.slots)...)
		inFlight := h.rec.InFlight()
		rec.Target, rec.Detail, err = h.cfg.Cluster.injectServer(ctx, f, proxies)
		rec.Detail = strings.TrimPrefix(fmt.Sprintf("%s; %d publishes in flight", rec.Detail, inFlight), "; ")
	}
	rec.End = h.clock.Now()
	if err != nil {
		rec.Err = err.Error()
	}
	h.log.Info("chaos: fault", "kind", f.Kind, "target", rec.Target, "detail", rec.Detail, "err", rec.Err)
	h.rec.Fault(rec)
}

// injectWorker runs a worker fault against the process of slot f.Target.
func (h *harness) injectWorker(ctx context.Context, f Fault) (target, detail string, err error) {
	sl := h.slots[f.Target%len(h.slots)]
	h.procMu.Lock()
	p := sl.proc
	h.procMu.Unlock()
	switch f.Kind {
	case WorkerPause:
		op, ok := p.nextInvoke(ctx, 5*time.Second)
		if err := p.signal(syscall.SIGSTOP); err != nil {
			return p.id, "", err
		}
		wait.Sleep(ctx, f.Hold)
		detail = fmt.Sprintf("paused for %s", f.Hold)
		if ok {
			detail = fmt.Sprintf("paused during publish %s (%s of %s) for %s", op.ID, op.Version, op.Resource, f.Hold)
		}
		return p.id, detail, p.signal(syscall.SIGCONT)
	case WorkerClockSkew:
		skew := -WorkerSkew
		if f.Variant == 1 {
			skew = WorkerSkew
		}
		if err := p.setSkew(skew); err != nil {
			return p.id, "", err
		}
		wait.Sleep(ctx, f.Hold)
		return p.id, fmt.Sprintf("publisher clock off by %s for %s", skew, f.Hold), p.setSkew(0)
	case WorkerKillUpload:
		sl.px.minio.Set(faultproxy.Faults{Latency: 200 * time.Millisecond})
		op, ok := p.nextInvoke(ctx, 8*time.Second)
		wait.Sleep(ctx, 100*time.Millisecond)
		p.kill()
		sl.px.clear()
		detail = h.afterKill(ctx, p, op, ok)
	case WorkerKillPublish:
		sl.px.minio.Set(faultproxy.Faults{Latency: 30 * time.Millisecond})
		op, ok := p.nextInvoke(ctx, 8*time.Second)
		if ok {
			for _, e := range sl.px.etcd {
				e.Set(faultproxy.Faults{DropDownstream: true})
			}
			h.awaitObject(ctx, op, 5*time.Second)
			wait.Sleep(ctx, 100*time.Millisecond) // the transaction is sent; its answer is held back
		}
		p.kill()
		sl.px.clear()
		detail = h.afterKill(ctx, p, op, ok)
	default:
		return "", "", fmt.Errorf("chaos: %s is not a worker fault", f.Kind)
	}
	if !h.halted() {
		err = h.startProcess(sl)
	}
	return p.id, detail, err
}

// awaitObject waits until an object of op's version exists.
func (h *harness) awaitObject(ctx context.Context, op PublishOp, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if keys, err := objectsAt(ctx, h.store, h.ns, op.Resource, op.Version); err == nil && len(keys) > 0 {
			return
		}
		if !wait.Sleep(ctx, 20*time.Millisecond) {
			return
		}
	}
}

// afterKill settles the killed process's open publishes and describes what
// the kill interrupted.
func (h *harness) afterKill(ctx context.Context, p *process, op PublishOp, invoked bool) string {
	outcomes := h.settleOpen(ctx, p.id)
	if !invoked {
		return "killed between publishes"
	}
	keys, _ := objectsAt(ctx, h.store, h.ns, op.Resource, op.Version)
	return fmt.Sprintf("killed during publish %s (%s of %s): %d object(s) written; settled: %v", op.ID, op.Version, op.Resource, len(keys), outcomes)
}

// settleOpen settles, with Resolve, the publishes a dead process left open
// and logs them complete. It returns their outcomes.
func (h *harness) settleOpen(ctx context.Context, client string) []string {
	h.gate.RLock()
	defer h.gate.RUnlock()
	var outcomes []string
	for _, op := range h.rec.OpenPublishes(client) {
		sctx, cancel := context.WithTimeout(ctx, settleTimeout)
		if err := settle(sctx, h.pub, &op, "harness"); err != nil {
			op.Outcome, op.Err = Unknown, err.Error()
		}
		cancel()
		op.Return, op.Done = h.clock.Now(), true
		h.rec.Complete(op)
		outcomes = append(outcomes, op.Outcome)
	}
	return outcomes
}

// stopProcesses asks every worker process to finish and settles what the
// ones that had to be killed left open.
func (h *harness) stopProcesses() {
	h.procMu.Lock()
	defer h.procMu.Unlock()
	var wg sync.WaitGroup
	for _, sl := range h.slots {
		if sl.proc == nil {
			continue
		}
		wg.Add(1)
		go func(p *process) {
			defer wg.Done()
			p.stop(settleTimeout + time.Minute + h.wl.PublishTimeout)
		}(sl.proc)
	}
	wg.Wait()
}

// finish heals the cluster, settles what is left, runs a last GC pass,
// checks the objects, sweeps the files of every retained dataset version
// and judges the history.
func (h *harness) finish(ctx context.Context) (*Result, error) {
	hctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for _, px := range append([]*proxySet{h.shared}, slotProxies(h.slots)...) {
		px.clear()
	}
	if err := h.cfg.Cluster.heal(hctx); err != nil {
		return nil, fmt.Errorf("chaos: heal the cluster after the run: %w", err)
	}
	for _, sl := range h.slots {
		for n := 1; n <= sl.n; n++ {
			h.settleOpen(hctx, fmt.Sprintf("p%d.%d", sl.idx, n))
		}
	}
	gcAuth, err := authority.New(authority.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(h.ns), Etcd: h.direct, Store: h.store}})
	if err != nil {
		return nil, err
	}
	col, err := h.collector(gcAuth)
	if err != nil {
		return nil, err
	}
	(&gcLoop{id: -1, gate: &h.gate, clock: h.clock, col: col, rec: h.rec}).pass(gc.RunOptions{All: true})
	if _, err := h.watch.sync(hctx); err != nil {
		return nil, err
	}
	if err := h.checkObjects(hctx); err != nil {
		return nil, err
	}
	if err := sweepDatasets(hctx, h.rec, h.readConfig()); err != nil {
		return nil, err
	}
	hist := h.rec.History()
	start := time.Now()
	res := &Result{Schedule: h.sched, History: hist}
	res.Violations = Verify(hist, VerifyOptions{Timeout: h.cfg.CheckTimeout, Visualize: h.visualize})
	res.Summary = Summarize(hist, h.sched, res.Violations, time.Since(start))
	if len(res.Violations) > 0 {
		path, err := writeFailure(h.cfg.FailureDir, res)
		if err != nil {
			return res, err
		}
		res.FailureFile = path
	}
	if h.cfg.Progress != nil {
		res.Summary.Print(h.cfg.Progress)
		if res.FailureFile != "" {
			fmt.Fprintf(h.cfg.Progress, "failure file: %s\n", res.FailureFile)
		}
	}
	return res, nil
}

// readConfig is a reader on the direct clients (no proxy).
func (h *harness) readConfig() reader.Config {
	return reader.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(h.ns), Etcd: h.direct, Store: h.store}}
}

func slotProxies(slots []*slot) []*proxySet {
	out := make([]*proxySet, len(slots))
	for i, sl := range slots {
		out[i] = sl.px
	}
	return out
}

// visualize opens the porcupine view file of a non-linearizable resource.
func (h *harness) visualize(res string) (io.WriteCloser, error) {
	if err := os.MkdirAll(h.cfg.FailureDir, 0o755); err != nil {
		return nil, err
	}
	return os.Create(filepath.Join(h.cfg.FailureDir, fmt.Sprintf("chaos-failure-%d-%s.html", h.cfg.Seed, res)))
}

// checkObjects lists every resource of the run once and records which
// objects of applied publishes and reads are gone.
func (h *harness) checkObjects(ctx context.Context) error {
	return checkObjects(ctx, h.rec, h.ns, h.store)
}

// checkObjects lists every resource of rec's history once and records in rec
// which objects of applied publishes, reads and pointers (every pointer the
// watch saw, before a restore or a replacement of etcd too) are gone.
func checkObjects(ctx context.Context, rec *Recorder, ns layout.Namespace, store objstore.Store) error {
	hist := rec.History()
	want := map[string]map[string]bool{} // resource → object keys
	note := func(res, key string) {
		if key == "" {
			return
		}
		if want[res] == nil {
			want[res] = map[string]bool{}
		}
		want[res][key] = true
	}
	for _, p := range hist.Publishes {
		if p.Done && (p.Outcome == Applied || p.Outcome == Duplicate) {
			note(p.Resource, p.Object)
		}
	}
	for _, r := range hist.Reads {
		note(r.Resource, r.Object)
	}
	for _, c := range hist.Changes {
		if c.Kind == ChangePointer {
			note(c.Resource, c.Object)
		}
	}
	var missing []string
	checked := 0
	for res, keys := range want {
		present := map[string]bool{}
		for o, err := range store.List(ctx, ns.ObjectsPrefix(res), objstore.ListOptions{}) {
			if err != nil {
				return fmt.Errorf("chaos: list the objects of %s: %w", res, err)
			}
			present[o.Key] = true
		}
		for k := range keys {
			checked++
			if !present[k] {
				missing = append(missing, k)
			}
		}
	}
	sort.Strings(missing)
	rec.SetObjects(checked, missing)
	return nil
}
