package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/cli/config"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore/s3store"
	"github.com/fencepub/fencepub/internal/testkit/childproc"
	"github.com/fencepub/fencepub/internal/wallclock"
	"github.com/fencepub/fencepub/publisher"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// WorkerEnv is the environment variable that makes a process a worker
// process of the harness: it holds the WorkerSpec as JSON. A program that
// the harness starts as a worker (Config.WorkerCommand: the chaos command,
// or a test binary) calls WorkerMain first thing when IsWorker is true.
const WorkerEnv = "FENCEPUB_CHAOS_WORKER"

// WorkerSpec is what a worker process needs to run.
type WorkerSpec struct {
	ID        string           `json:"id"`
	Seed      uint64           `json:"seed"`
	ClockBase int64            `json:"clock_base"` // CLOCK_MONOTONIC at the start of the run
	Namespace layout.Namespace `json:"namespace"`
	Epoch     uint64           `json:"epoch"`
	Etcd      []string         `json:"etcd"` // client URLs (the worker's proxies)
	S3        s3store.Config   `json:"s3"`
	Workload  Workload         `json:"workload"`
}

// IsWorker reports whether this process was started as a worker process.
func IsWorker() bool { return os.Getenv(WorkerEnv) != "" }

// WorkerSkew is how far a worker process's publisher clock is off during a
// WorkerClockSkew fault.
const WorkerSkew = 10 * 24 * time.Hour

// WorkerMain runs this process as a worker process and returns its exit
// code: it reads the WorkerSpec from WorkerEnv, publishes like the harness's
// in-process workers until its standard input closes, and writes every
// grant and publish to standard output as JSON lines, each with one write
// before the step it describes starts (invoke) or after it ended (complete),
// so a SIGKILL loses nothing that happened. Each line on standard input is
// a clock offset in nanoseconds for its publisher (0: right). Errors go to
// standard error.
func WorkerMain() int {
	var spec WorkerSpec
	if err := json.Unmarshal([]byte(os.Getenv(WorkerEnv)), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "chaos worker: bad", WorkerEnv+":", err)
		return 2
	}
	if err := runWorker(spec, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "chaos worker:", err)
		return 1
	}
	return 0
}

// etcdClient is the etcd client of a worker, in-process or a process: the
// CLI's (config.Config.EtcdClient) with the default keepalive, so the run
// exercises what a user's command does when a member stalls or etcd comes
// back after an outage.
func etcdClient(endpoints []string) (*clientv3.Client, error) {
	return config.Config{Etcd: config.Etcd{
		Endpoints: endpoints, DialKeepAliveTime: config.DefaultDialKeepAliveTime, DialKeepAliveTimeout: config.DefaultDialKeepAliveTimeout,
	}}.EtcdClient()
}

// runWorker runs one worker process until in reaches EOF.
func runWorker(spec WorkerSpec, in io.Reader, out io.Writer) error {
	cli, err := etcdClient(spec.Etcd)
	if err != nil {
		return err
	}
	defer cli.Close()
	st, err := s3store.New(spec.S3)
	if err != nil {
		return err
	}
	wl := spec.Workload.withDefaults()
	auth, err := authority.New(authority.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(spec.Namespace), Etcd: cli, Store: st}, RequestTimeout: 2 * time.Second})
	if err != nil {
		return err
	}
	var skew atomic.Int64 // ns
	pub, err := publisher.New(wallclock.With(publisher.Config{
		Env: fencepub.Env{Namespace: fencepub.Namespace(spec.Namespace), Etcd: cli, Store: st}, PartSize: partSize,
		RequestTimeout: wl.AttemptTimeout, ResendTimeout: wl.PublishTimeout,
	}, func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }))
	if err != nil {
		return err
	}
	stop := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			if n, err := strconv.ParseInt(sc.Text(), 10, 64); err == nil {
				skew.Store(n)
			}
		}
		_, _ = io.Copy(io.Discard, in)
		close(stop)
	}()
	w := &worker{
		id: spec.ID, clock: clockAt(spec.ClockBase), epoch: func() uint64 { return spec.Epoch }, auth: auth, pub: pub, wl: wl,
		rng: rand.New(rand.NewPCG(spec.Seed, 1)), out: &lineSink{w: out}, stop: stop,
	}
	w.run()
	return nil
}

// wireEvent is one line a worker process writes.
type wireEvent struct {
	Grant    *GrantEvent `json:"grant,omitempty"`
	Invoke   *PublishOp  `json:"invoke,omitempty"`
	Complete *PublishOp  `json:"complete,omitempty"`
	Anomaly  *Anomaly    `json:"anomaly,omitempty"`
	Attempt  *Attempt    `json:"attempt,omitempty"`
}

// lineSink writes each event as one JSON line with a single Write.
type lineSink struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *lineSink) put(e wireEvent) {
	b, _ := json.Marshal(e) // plain structs: cannot fail
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _ = s.w.Write(append(b, '\n'))
}

func (s *lineSink) Grant(g GrantEvent)   { s.put(wireEvent{Grant: &g}) }
func (s *lineSink) Invoke(p PublishOp)   { s.put(wireEvent{Invoke: &p}) }
func (s *lineSink) Complete(p PublishOp) { s.put(wireEvent{Complete: &p}) }
func (s *lineSink) Anomaly(a Anomaly)    { s.put(wireEvent{Anomaly: &a}) }
func (s *lineSink) Attempt(a Attempt)    { s.put(wireEvent{Attempt: &a}) }

// process is one worker process as the harness sees it.
type process struct {
	id      string
	p       *childproc.Proc
	invoked chan PublishOp
}

// slot is the place of one worker process in a run: its proxies persist,
// the process is replaced after a kill.
type slot struct {
	idx  int
	px   *proxySet
	n    int // incarnations started
	proc *process
}

// startProcess starts the next incarnation of sl's worker process (it
// becomes sl.proc). Its events go to rec; its standard error to a log file
// in dir.
func startProcess(argv []string, dir string, sl *slot, spec WorkerSpec, rec *Recorder) error {
	sl.n++
	spec.ID = fmt.Sprintf("p%d.%d", sl.idx, sl.n)
	spec.Seed = spec.Seed ^ uint64(sl.idx)<<32 ^ uint64(sl.n)
	if spec.Etcd == nil { // through sl's proxies, unless on a Network
		spec.Etcd = sl.px.endpoints()
		spec.S3 = sl.px.s3(spec.S3)
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(dir, spec.ID+".log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	p := &process{id: spec.ID, invoked: make(chan PublishOp, 1)}
	onLine := func(line []byte) {
		var e wireEvent
		if err := json.Unmarshal(line, &e); err != nil {
			rec.Anomaly(Anomaly{Client: spec.ID, Time: rec.Clock().Now(), What: "worker output", Err: err.Error()})
			return
		}
		switch {
		case e.Grant != nil:
			rec.Grant(*e.Grant)
		case e.Invoke != nil:
			rec.Invoke(*e.Invoke)
			select {
			case p.invoked <- *e.Invoke:
			default:
			}
		case e.Complete != nil:
			rec.Complete(*e.Complete)
		case e.Anomaly != nil:
			rec.Anomaly(*e.Anomaly)
		case e.Attempt != nil:
			rec.Attempt(*e.Attempt)
		}
	}
	p.p, err = childproc.Start(childproc.Spec{
		Path: argv[0], Args: argv[1:], Env: append(os.Environ(), WorkerEnv+"="+string(b)),
		Stdin: true, OnLine: onLine, MaxLine: 16 << 20, Stderr: logf, OwnGroup: true,
	})
	if err != nil {
		return fmt.Errorf("chaos: start worker process %s: %w", spec.ID, err)
	}
	sl.proc = p
	return nil
}

// nextInvoke waits for the process to start a publish after now and
// returns it; ok is false after timeout or when the process exits.
func (p *process) nextInvoke(ctx context.Context, timeout time.Duration) (op PublishOp, ok bool) {
	select {
	case <-p.invoked: // an older one
	default:
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case op = <-p.invoked:
		return op, true
	case <-t.C:
	case <-p.p.Done():
	case <-ctx.Done():
	}
	return PublishOp{}, false
}

func (p *process) signal(sig syscall.Signal) error {
	err := p.p.Signal(sig)
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

// kill sends SIGKILL and waits until the process's output is read.
func (p *process) kill() { p.p.Kill() }

// setSkew sets the offset of the process's publisher clock.
func (p *process) setSkew(d time.Duration) error {
	_, err := fmt.Fprintln(p.p.Stdin(), int64(d))
	return err
}

// stop closes the process's standard input and waits for it to finish its
// current publish and exit; after timeout it is killed.
func (p *process) stop(timeout time.Duration) {
	_ = p.signal(syscall.SIGCONT)
	_ = p.p.Stdin().Close()
	select {
	case <-p.p.Done():
	case <-time.After(timeout):
		p.kill()
	}
}
