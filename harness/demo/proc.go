package demo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fencepub/fencepub/internal/testkit/childproc"
)

// event is one JSON line a batch-publisher printed on stdout.
type event struct {
	Worker  string         `json:"-"`
	Name    string         `json:"event"`
	Fence   uint64         `json:"fence"`
	Outcome string         `json:"outcome"`
	Reason  string         `json:"reason"`
	Version versionJSON    `json:"version"`
	Object  map[string]any `json:"object"`
	Err     string         `json:"err"`
}

type versionJSON struct {
	Epoch uint64 `json:"epoch"`
	Fence uint64 `json:"fence"`
	Seq   uint64 `json:"seq"`
}

func (v versionJSON) String() string { return fmt.Sprintf("%d.%d.%d", v.Epoch, v.Fence, v.Seq) }

// proc is a child process of the demo: killed with the demo (parent-death
// signal), in its own process group so a terminal's Ctrl-C reaches the demo
// first and it stops children in order.
type proc struct {
	name     string
	log      string // its stderr
	p        *childproc.Proc
	stopping atomic.Bool // stop was called: its exit is expected
}

// childEnv is the environment of the demo's children: the demo's own
// without any FENCEPUB_* variable, so a user's settings (another etcd,
// another domain) cannot redirect a child; they take everything from the
// config file the demo writes and the flags it passes.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FENCEPUB_") {
			env = append(env, kv)
		}
	}
	return env
}

// startProc starts bin with args in childEnv; stdout lines go to onLine
// (if set) and stderr to a log file in dir. When the process exits with a
// failure before stop was called, it is sent on failed.
func startProc(name, dir, bin string, args []string, onLine func(string), failed chan<- *proc) (*proc, error) {
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	spec := childproc.Spec{Path: bin, Args: args, Env: childEnv(), Stdout: logf, Stderr: logf, OwnGroup: true}
	if onLine != nil {
		spec.OnLine = func(line []byte) { onLine(string(line)) }
	}
	cp, err := childproc.Start(spec)
	if err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, log: logPath, p: cp}
	go func() {
		err := cp.Wait()
		logf.Close()
		if err != nil && !p.stopping.Load() {
			failed <- p
		}
	}()
	return p, nil
}

// failure describes p's unexpected exit: its exit status and the end of
// its stderr.
func (p *proc) failure() error {
	tail := "(no stderr)"
	if b, err := os.ReadFile(p.log); err == nil && len(bytes.TrimSpace(b)) > 0 {
		if len(b) > failureTail {
			b = b[len(b)-failureTail:]
		}
		tail = string(bytes.TrimSpace(b))
	}
	return fmt.Errorf("%s exited (%v) before the demo was done; its stderr (%s) ends:\n%s", p.name, p.p.Wait(), p.log, tail)
}

// failureTail is how many bytes of a failed child's stderr are shown.
const failureTail = 2048

// stop sends SIGCONT (a stopped process cannot handle SIGTERM) and SIGTERM,
// then SIGKILL after grace.
func (p *proc) stop(grace time.Duration) {
	p.stopping.Store(true)
	p.p.Stop(grace)
}

// parseEvent decodes a worker's stdout line; ok is false for other lines.
func parseEvent(worker, line string) (event, bool) {
	var e event
	if json.Unmarshal([]byte(line), &e) != nil || e.Name == "" {
		return event{}, false
	}
	e.Worker = worker
	return e, true
}

// stopped reports whether p is in the stopped state (SIGSTOP), from
// /proc/<pid>/stat.
func stopped(p *proc) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.p.Pid()))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name: "pid (comm) T ...".
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'T'
}
