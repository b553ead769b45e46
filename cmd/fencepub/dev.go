package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencepub/fencepub/internal/cli"
	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/spf13/cobra"
)

// devProc is one server process of the local stack.
type devProc struct {
	Name     string `json:"name"`
	PID      int    `json:"pid"`
	Endpoint string `json:"endpoint"`
	Log      string `json:"log"`
}

// devState is what `dev up` records in <dir>/state.json for `dev down` and
// `dev status`: every etcd member and object-store process. Store is the
// object store's kind (devstack.StoreKinds; empty in a state file from
// before SeaweedFS, which is MinIO); its processes are under MinIO or
// SeaweedFS accordingly.
type devState struct {
	Dir        string    `json:"dir"`
	ConfigFile string    `json:"config_file"`
	Store      string    `json:"store,omitempty"`
	Etcd       []devProc `json:"etcd"`
	MinIO      []devProc `json:"minio"`
	SeaweedFS  []devProc `json:"seaweedfs,omitempty"`
	Bucket     string    `json:"bucket"`
	StartedAt  time.Time `json:"started_at"`
}

// storeKind returns the stack's object store kind, MinIO for a state file
// that names none.
func (st devState) storeKind() string {
	if st.Store == "" {
		return devstack.StoreMinIO
	}
	return st.Store
}

// storeProcs returns the object store's processes.
func (st devState) storeProcs() []devProc {
	return append(append([]devProc{}, st.MinIO...), st.SeaweedFS...)
}

// procs returns every process of the stack, the object store's first (the
// order dev down stops them in).
func (st devState) procs() []devProc { return append(st.storeProcs(), st.Etcd...) }

// runningCount returns how many of the stack's processes are running.
func (st devState) runningCount() int {
	n := 0
	for _, p := range st.procs() {
		if running(p.PID, st.Dir) {
			n++
		}
	}
	return n
}

// Topology limits of `dev up`: an etcd cluster of 1-7 members and a MinIO of
// 1-8 nodes (two drives each for several nodes: MinIO's erasure sets hold
// at most 16 drives).
const (
	maxDevEtcdMembers = 7
	maxDevMinIONodes  = 8
)

// newDevCmd builds `fencepub dev up|down|status`: a persistent local etcd and
// object store (MinIO or SeaweedFS) for trying fencepub, from the binaries
// `make deps` built.
func newDevCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a local etcd and object store (MinIO or SeaweedFS) for trying fencepub",
		Long: `dev starts a persistent etcd cluster (one member by default, --etcd-members)
and an object store on loopback from ./bin (built by 'make deps'): MinIO by
default (one single-drive node, --minio-nodes for a distributed MinIO of that
many processes with two drives each), or with --store seaweedfs one SeaweedFS
'weed server' process. It creates the bucket and writes a config file
(./fencepub.yaml by default) that every other fencepub command picks up from
the working directory. Data lives in --dir (default ./.dev).`,
	}
	var dir string
	cmd.PersistentFlags().StringVar(&dir, "dir", ".dev", "directory for the servers' data, logs and state")
	cmd.AddCommand(newDevUpCmd(&dir), newDevDownCmd(&dir), newDevStatusCmd(&dir))
	return cmd
}

func readDevState(dir string) (devState, error) {
	var st devState
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%s/state.json: %w", dir, err)
	}
	return st, nil
}

// alive reports whether pid is a running process.
func alive(pid int) bool { return pid > 0 && syscall.Kill(pid, 0) == nil }

// running reports whether pid is a running server of the stack in dir:
// alive and, where /proc tells (Linux), started with a path under dir (its
// data directory). A PID that an unrelated process reused after the stack
// died is not the stack's, so `dev down` never signals it.
func running(pid int, dir string) bool {
	if !alive(pid) {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return runtime.GOOS != "linux"
	}
	return strings.Contains(string(cmdline), dir)
}

// portOr returns want if it is free on 127.0.0.1, else a free port.
func portOr(want int) (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(want))
	if err == nil {
		l.Close()
		return want, nil
	}
	return devstack.FreePort()
}

// lockDevPorts takes an exclusive lock shared by every dev up on this
// machine, held from choosing the ports until the servers answer on them.
// Without it two dev ups started together both find 2379 and 9000 free;
// the servers that then cannot bind still pass their readiness checks
// against the other stack's, and both configs name one etcd and one
// bucket. It blocks until the lock is free; unlock releases it. Errors:
// the lock file cannot be opened or locked.
func lockDevPorts() (unlock func(), err error) {
	path := filepath.Join(os.TempDir(), "fencepub-dev-up.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("port lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("port lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil // closing the file releases the lock
}

// devPorts returns n ports, the i-th base+i*step if free, else a free one.
func devPorts(n, base, step int) ([]int, error) {
	out := make([]int, n)
	for i := range out {
		p, err := portOr(base + i*step)
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}

// devYAML is the config file of the stack s in dir: every etcd member's
// endpoint, and the object store's first process's (every MinIO node
// serves the same bucket). The shape is the same for every store kind.
func devYAML(dir string, s *devStack) string {
	eps := make([]string, len(s.etcd.Members))
	for i, m := range s.etcd.Members {
		eps[i] = strconv.Quote(m.ClientURL)
	}
	others := ""
	if len(s.storeProcs) > 1 {
		n := make([]string, 0, len(s.storeProcs)-1)
		for _, p := range s.storeProcs[1:] {
			n = append(n, p.Endpoint)
		}
		others = "  # the other MinIO nodes serve the same bucket: " + strings.Join(n, ", ") + "\n"
	}
	cfg := s.store.S3Config()
	return fmt.Sprintf(`# Written by 'fencepub dev up' for the local stack in %s.
etcd:
  endpoints: [%s]
s3:
  endpoint: %q
%s  access_key: %q
  secret_key: %q
  bucket: %q
  secure: false
namespace:
  prefix: fencepub
  domain: dev
`, dir, strings.Join(eps, ", "), cfg.Endpoint, others, cfg.AccessKey, cfg.SecretKey, cfg.Bucket)
}

// devStack is what dev up started: the etcd cluster and the object store
// of kind kind, with the store's processes as state.json records them.
type devStack struct {
	kind       string
	etcd       *devstack.Etcd
	store      devstack.ObjectStore
	storeProcs []devProc
}

// startDevStack starts the etcd cluster under dir/etcd (client and peer
// ports cports, pports) and the object store of o.store under
// dir/<kind> (S3 ports sports, one per MinIO node; SeaweedFS takes the
// first), detached, and blocks until all of them are ready. On error
// nothing it started is left running. Errors: devstack's start errors.
func (o *devUpOptions) startDevStack(ctx context.Context, dir string, cports, pports, sports []int) (*devStack, error) {
	e, err := devstack.StartEtcd(ctx, filepath.Join(dir, "etcd"), devstack.EtcdOptions{Members: o.members, Detached: true, ListenClientPorts: cports, ListenPeerPorts: pports})
	if err != nil {
		return nil, err
	}
	s := &devStack{kind: o.storeKind(), etcd: e}
	switch s.kind {
	case devstack.StoreSeaweedFS:
		w, err := devstack.StartSeaweedFS(ctx, filepath.Join(dir, "seaweedfs"), devstack.SeaweedFSOptions{Detached: true, Port: sports[0]})
		if err != nil {
			e.Stop()
			return nil, err
		}
		s.store, s.storeProcs = w, []devProc{{Name: w.Name, PID: w.PID(), Endpoint: w.Config.Endpoint, Log: w.LogPath}}
	default:
		m, err := devstack.StartMinIO(ctx, filepath.Join(dir, "minio"), devstack.MinIOOptions{Nodes: o.minioNodes, Detached: true, Ports: sports})
		if err != nil {
			e.Stop()
			return nil, err
		}
		s.store = m
		for _, n := range m.Nodes {
			s.storeProcs = append(s.storeProcs, devProc{Name: n.Name, PID: n.PID(), Endpoint: n.Endpoint, Log: n.LogPath})
		}
	}
	return s, nil
}

// stop stops the object store, then etcd.
func (s *devStack) stop() {
	s.store.Stop()
	s.etcd.Stop()
}

// state records the processes of s.
func (s *devStack) state(dir, cfgFile string) devState {
	st := devState{Dir: dir, ConfigFile: cfgFile, Store: s.kind, Bucket: s.store.S3Config().Bucket, StartedAt: time.Now().UTC()}
	for _, m := range s.etcd.Members {
		st.Etcd = append(st.Etcd, devProc{Name: m.Name, PID: m.PID(), Endpoint: m.ClientURL, Log: m.LogPath})
	}
	if s.kind == devstack.StoreSeaweedFS {
		st.SeaweedFS = s.storeProcs
	} else {
		st.MinIO = s.storeProcs
	}
	return st
}

// devUpOptions are the flags of `fencepub dev up` (addFlags) and dev's
// --dir; Validate checks them before anything is touched, Run starts the
// stack.
type devUpOptions struct {
	dir                 *string
	configPath          string
	members, minioNodes int
	store               string // a devstack.StoreKinds name; empty is MinIO
}

// storeKind returns the object store to start, MinIO when unset.
func (o *devUpOptions) storeKind() string {
	if o.store == "" {
		return devstack.StoreMinIO
	}
	return o.store
}

func newDevUpCmd(dir *string) *cobra.Command {
	o := &devUpOptions{dir: dir}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start local etcd and an object store (MinIO or SeaweedFS) and write a config file",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(c)
		},
	}
	o.addFlags(cmd)
	return cmd
}

// addFlags registers dev up's own flags on cmd.
func (o *devUpOptions) addFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.configPath, "write-config", "fencepub.yaml", "where to write the config file for the local stack")
	cmd.Flags().IntVar(&o.members, "etcd-members", 1, "etcd cluster members, each its own process (3 tolerates one lost member)")
	cmd.Flags().IntVar(&o.minioNodes, "minio-nodes", 1, "MinIO server processes; more than 1 is a distributed MinIO with two drives per node (minio only)")
	cmd.Flags().StringVar(&o.store, "store", devstack.StoreMinIO, "object store to start: "+strings.Join(devstack.StoreKinds, "|"))
}

// Validate checks the store kind and the stack's size: --minio-nodes above
// 1 needs --store minio (SeaweedFS runs as one process). Errors: usage
// errors (exit 2).
func (o *devUpOptions) Validate() error {
	if !slices.Contains(devstack.StoreKinds, o.storeKind()) {
		return exitcode.Usagef("--store %q: want one of %s", o.store, strings.Join(devstack.StoreKinds, ", "))
	}
	if o.storeKind() != devstack.StoreMinIO && o.minioNodes > 1 {
		return exitcode.Usagef("--minio-nodes %d: only with --store minio (--store %s runs one process)", o.minioNodes, o.store)
	}
	if o.members < 1 || o.members > maxDevEtcdMembers {
		return exitcode.Usagef("--etcd-members %d: want 1-%d (odd: 1, 3, 5, 7 tolerate 0, 1, 2, 3 lost members)", o.members, maxDevEtcdMembers)
	}
	if o.minioNodes < 1 || o.minioNodes > maxDevMinIONodes {
		return exitcode.Usagef("--minio-nodes %d: want 1-%d", o.minioNodes, maxDevMinIONodes)
	}
	return nil
}

// Run starts the stack in --dir, or reports the one already running there
// (copying its config to --write-config when that was given), writes the
// state file and the config file, and prints where everything is.
func (o *devUpOptions) Run(c *cobra.Command) error {
	log := cli.Logger(c)
	abs, err := filepath.Abs(*o.dir)
	if err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	cfgAbs, err := filepath.Abs(o.configPath)
	if err == nil {
		err = checkWritable(cfgAbs, abs)
	}
	if err != nil {
		return exitcode.Usagef("--write-config %s: %v (nothing started or stopped)", o.configPath, err)
	}
	if st, err := readDevState(abs); err == nil {
		switch n := st.runningCount(); {
		case n == len(st.procs()) && n > 0:
			log.Info("dev: already running", "etcd_members", len(st.Etcd), "store", st.storeKind(), "store_processes", len(st.storeProcs()), "config", st.ConfigFile)
			if len(st.Etcd) != o.members || st.storeKind() != o.storeKind() || st.storeKind() == devstack.StoreMinIO && len(st.MinIO) != o.minioNodes {
				log.Warn("dev: not changing the running stack; run 'fencepub dev down' and start it in a fresh --dir", "etcd_members", o.members, "store", o.storeKind())
			}
			if !c.Flags().Changed("write-config") || cfgAbs == st.ConfigFile {
				return nil
			}
			b, err := os.ReadFile(st.ConfigFile)
			if err == nil {
				err = os.WriteFile(cfgAbs, b, 0o600)
			}
			if err != nil {
				return exitcode.Usagef("--write-config %s: copying %s: %v", o.configPath, st.ConfigFile, err)
			}
			log.Info("dev: wrote its config to " + cfgAbs + " too")
			return nil
		case n > 0:
			log.Warn("dev: some servers of the stack are down; restarting all of them (data is kept)")
			stopDev(log, st)
		}
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	ctx, cancel := context.WithTimeout(c.Context(), 90*time.Second)
	defer cancel()
	unlock, err := lockDevPorts()
	if err != nil {
		return exitcode.Usagef("dev up: %v (nothing started)", err)
	}
	defer unlock()
	cports, err := devPorts(o.members, 2379, 2)
	if err != nil {
		return err
	}
	pports, err := devPorts(o.members, 2380, 2)
	if err != nil {
		return err
	}
	sports, err := devPorts(o.minioNodes, 9000, 1)
	if err != nil {
		return err
	}
	log.Info("dev: starting etcd and the object store", "etcd_members", o.members, "store", o.storeKind(), "store_processes", len(sports))
	cl, err := o.startDevStack(ctx, abs, cports, pports, sports)
	if err != nil {
		return devErr(err)
	}
	st := cl.state(abs, cfgAbs)
	b, _ := json.MarshalIndent(st, "", "  ")
	err = os.WriteFile(filepath.Join(abs, "state.json"), b, 0o644)
	if err == nil {
		err = os.WriteFile(cfgAbs, []byte(devYAML(abs, cl)), 0o600)
	}
	if err != nil { // leave nothing running that dev down cannot find
		cl.stop()
		_ = os.Remove(filepath.Join(abs, "state.json"))
		return exitcode.Usagef("dev up: %v (servers stopped)", err)
	}
	log.Info("dev: up")
	for _, p := range st.Etcd {
		log.Info("dev: "+p.Name, "endpoint", p.Endpoint, "pid", p.PID, "log", p.Log)
	}
	for _, p := range st.storeProcs() {
		log.Info("dev: "+p.Name, "endpoint", p.Endpoint, "pid", p.PID, "bucket", st.Bucket, "log", p.Log)
	}
	down := os.Args[0] + " dev down"
	if c.Flags().Changed("dir") {
		down += " --dir " + *o.dir
	}
	log.Info("dev: config "+cfgAbs+"; commands run in this directory pick it up, e.g. "+
		os.Args[0]+" publish --resource demo --owner me --ttl 10s --key k1 --file README.md; stop with: "+down, "config", cfgAbs)
	return nil
}

// checkWritable reports why a file cannot be written at path: it is a
// directory, its directory does not exist (and is not stackDir, which
// dev up creates), or either is not writable.
func checkWritable(path, stackDir string) error {
	if fi, err := os.Stat(path); err == nil {
		if fi.IsDir() {
			return errors.New("is a directory; give a file path")
		}
		return syscall.Access(path, 2 /* W_OK */)
	}
	dir := filepath.Dir(path)
	if dir == stackDir {
		return nil // created with the stack
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("directory %s does not exist", dir)
	}
	if err := syscall.Access(dir, 2 /* W_OK */); err != nil {
		return fmt.Errorf("directory %s is not writable: %w", dir, err)
	}
	return nil
}

// devErr maps a server start failure to its exit code: a missing binary is
// a usage problem (run make deps), anything else an unavailable service.
func devErr(err error) error {
	if errors.Is(err, devstack.ErrNoBinary) {
		return exitcode.With(exitcode.Usage, err)
	}
	return exitcode.With(exitcode.Unavailable, err)
}

func newDevDownCmd(dir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "down",
		Short: "Stop the local etcd and object store started by 'dev up' (data is kept)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			st, err := readDevState(*dir)
			if err != nil {
				return exitcode.With(exitcode.Usage, fmt.Errorf("no local stack in %s (run 'fencepub dev up', or give the stack's --dir): %w", *dir, err))
			}
			stopDev(cli.Logger(c), st)
			return nil
		},
	}
}

// stopDev stops the stack's processes, the object store first: SIGTERM, then SIGKILL
// after 10 s.
func stopDev(log *slog.Logger, st devState) {
	for _, p := range st.procs() {
		if !running(p.PID, st.Dir) {
			log.Info("dev: not running", "process", p.Name, "pid", p.PID)
			continue
		}
		_ = syscall.Kill(p.PID, syscall.SIGTERM)
		deadline := time.Now().Add(10 * time.Second)
		for alive(p.PID) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if alive(p.PID) {
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
		}
		log.Info("dev: stopped", "process", p.Name, "pid", p.PID)
	}
}

// devGroupStatus is `dev status -o json`'s view of the etcd members or the
// object store's processes: running when all of them are; pid and endpoint are the
// first one's.
func devGroupStatus(dir string, procs []devProc) map[string]any {
	all := len(procs) > 0
	var list []map[string]any
	for _, p := range procs {
		r := running(p.PID, dir)
		all = all && r
		list = append(list, map[string]any{"name": p.Name, "pid": p.PID, "endpoint": p.Endpoint, "running": r})
	}
	out := map[string]any{"running": all, "processes": list}
	if len(procs) > 0 {
		out["pid"], out["endpoint"] = procs[0].PID, procs[0].Endpoint
	}
	return out
}

func newDevStatusCmd(dir *string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show whether every local etcd member and object-store process is running (exit 115 if not all)",
		Args:  cobra.NoArgs,
	}
	out := addOutputFlag(cmd)
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		st, err := readDevState(*dir)
		if err != nil {
			return exitcode.With(exitcode.Usage, fmt.Errorf("no local stack in %s (run 'fencepub dev up', or give the stack's --dir): %w", *dir, err))
		}
		store := devGroupStatus(st.Dir, st.storeProcs())
		store["bucket"] = st.Bucket
		if *out == "json" {
			// The store's group is under its kind ("minio" or "seaweedfs").
			v := map[string]any{"etcd": devGroupStatus(st.Dir, st.Etcd), st.storeKind(): store, "store": st.storeKind(), "config": st.ConfigFile}
			if err := printJSON(c.OutOrStdout(), v); err != nil {
				return err
			}
		} else {
			for _, p := range append(append([]devProc{}, st.Etcd...), st.storeProcs()...) {
				fmt.Fprintf(c.OutOrStdout(), "%-9s %-28s pid %-7d running=%v\n", p.Name, p.Endpoint, p.PID, running(p.PID, st.Dir))
			}
			fmt.Fprintf(c.OutOrStdout(), "%-9s %s\n", "config", st.ConfigFile)
		}
		if n := st.runningCount(); n == 0 || n < len(st.procs()) {
			return exitcode.With(exitcode.Unavailable, errors.New("the local stack is not fully running; start it with 'fencepub dev up'"))
		}
		return nil
	}
	return cmd
}
