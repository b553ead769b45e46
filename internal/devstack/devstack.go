// Package devstack starts and controls real etcd and MinIO server processes
// on loopback, from the binaries `make deps` builds into ./bin. It ships in
// the fencepub binary as `fencepub dev up`; the tests (through
// internal/testkit/testenv), the demo, the lab replay, the chaos soak and the
// benchmarks use it too. Nothing here is a mock.
//
// Every server is a separate OS process with its own data directory and log
// file, so one can be stopped, killed, restarted, paused (SIGSTOP) or resumed
// (SIGCONT) on its own. Readiness is real: etcd answers a read, MinIO answers
// a bucket call (its health URL answers 200 before the object layer is up).
package devstack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/fencepub/fencepub/internal/sysproc"
)

// ErrNoBinary is returned when a server binary is missing from the bin
// directory; run `make deps`.
var ErrNoBinary = errors.New("devstack: server binary not found (run `make deps`)")

// BinDir returns the directory holding etcd, etcdctl, etcdutl and minio:
// $FENCEPUB_BIN_DIR if set, else the directory of the running executable if
// etcd is beside it (./bin/fencepub), else the bin/ directory of the fencepub
// module found by walking up from the working directory.
func BinDir() (string, error) {
	if d := os.Getenv("FENCEPUB_BIN_DIR"); d != "" {
		return d, nil
	}
	if exe, err := os.Executable(); err == nil {
		if _, err := os.Stat(filepath.Join(filepath.Dir(exe), "etcd")); err == nil {
			return filepath.Dir(exe), nil
		}
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(b, []byte("module github.com/fencepub/fencepub\n")) {
			return filepath.Join(dir, "bin"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("%w: no fencepub checkout above the working directory; set FENCEPUB_BIN_DIR", ErrNoBinary)
		}
		dir = parent
	}
}

// Binary returns the path of a server binary in BinDir, or ErrNoBinary.
func Binary(name string) (string, error) {
	dir, err := BinDir()
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, name)
	if st, err := os.Stat(p); err != nil || st.IsDir() {
		return "", fmt.Errorf("%w: %s", ErrNoBinary, p)
	}
	return p, nil
}

// Server ports are drawn from [portLow, portHigh), below Linux's default
// ephemeral range (32768-60999). A port the kernel hands out with ":0" is an
// ephemeral one, which any outgoing connection may take as its source port
// the moment the server that owned it stops: a member restarted on its own
// port (cluster members cannot change it) then fails with "address already
// in use". Outgoing connections never take ports below the range.
const (
	portLow  = 20000
	portHigh = 32768
)

// FreePort returns a TCP port on 127.0.0.1, outside the ephemeral range,
// that was free a moment ago.
func FreePort() (int, error) {
	for range 100 {
		port := portLow + rand.IntN(portHigh-portLow)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue // taken: draw another
		}
		_ = l.Close()
		return port, nil
	}
	return 0, fmt.Errorf("devstack: no free port in [%d, %d) after 100 draws", portLow, portHigh)
}

// Process is one server process. Its methods are safe for concurrent use.
type Process struct {
	Name    string
	LogPath string // stdout and stderr of every run, appended

	bin      string
	args     []string
	env      []string
	detached bool   // survive the parent (dev up): new session, no parent-death signal
	netns    string // the network namespace it runs in (Host.Netns); "" for this process's

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts the process if it is not running.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return nil
	}
	logf, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.bin, p.args...)
	if p.netns != "" {
		// ip netns exec enters the namespace and execs the server: the
		// process id stays the server's, so signals reach it.
		cmd = exec.Command("ip", append([]string{"netns", "exec", p.netns, p.bin}, p.args...)...)
	}
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if p.detached {
		cmd.SysProcAttr = sysproc.Session()
	} else {
		// Own process group, so a terminal's Ctrl-C reaches us first and we
		// stop servers in order; killed with us if the parent dies (Linux).
		cmd.SysProcAttr = sysproc.Group()
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("devstack: start %s: %w", p.Name, err)
	}
	logf.Close()
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	go func() { _ = cmd.Wait(); close(done) }()
	return nil
}

// PID returns the running process id, or 0.
func (p *Process) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Signal sends sig to the running process (no-op when stopped).
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return nil
	}
	return p.cmd.Process.Signal(sig)
}

// Pause stops the process with SIGSTOP and waits, up to 10 s, until every
// thread of it has stopped: the kernel delivers SIGSTOP asynchronously, so a
// busy thread may otherwise still answer a request sent right after. Where
// /proc is missing it returns once the signal is sent. Resume continues the
// process with SIGCONT.
func (p *Process) Pause() error {
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	pid := p.PID()
	if pid == 0 {
		return nil
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		stopped, err := ThreadsStopped(pid)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return nil // no /proc, or the process is gone
		case err != nil:
			return err
		case stopped:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("devstack: process %d not stopped 10 s after SIGSTOP", pid)
		}
		time.Sleep(time.Millisecond)
	}
}

func (p *Process) Resume() error { return p.Signal(syscall.SIGCONT) }

// ThreadsStopped reports whether every thread of process pid is stopped
// (state T in /proc/<pid>/task/*/stat). Errors: os.ErrNotExist (wrapped)
// when /proc/<pid>/task cannot be read. A thread that ends while it is
// looked at counts as not stopped: call it again.
func ThreadsStopped(pid int) (bool, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, task := range tasks {
		stat, err := os.ReadFile(dir + "/" + task.Name() + "/stat")
		if err != nil {
			return false, nil
		}
		// "tid (comm) state ...": the state follows the last ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) || stat[i+2] != 'T' {
			return false, nil
		}
	}
	return true, nil
}

// Kill sends SIGKILL and waits for the process to exit.
func (p *Process) Kill() { p.stop(syscall.SIGKILL, 0) }

// Stop sends SIGTERM, waits up to 10 s, then SIGKILL.
func (p *Process) Stop() { p.stop(syscall.SIGTERM, 10*time.Second) }

func (p *Process) stop(sig syscall.Signal, grace time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a paused process cannot handle SIGTERM
	_ = cmd.Process.Signal(sig)
	if grace > 0 {
		select {
		case <-done:
			return
		case <-time.After(grace):
			_ = cmd.Process.Kill()
		}
	}
	<-done
}

// Exited reports whether a started process has exited on its own.
func (p *Process) Exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return true
	}
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// LogTail returns the last n bytes of the process's log.
func (p *Process) LogTail(n int64) string {
	f, err := os.Open(p.LogPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-n, 0)
	buf := make([]byte, st.Size()-off)
	_, _ = f.ReadAt(buf, off)
	return string(buf)
}

// waitReady polls check every 100 ms until it succeeds, the process exits, or
// timeout passes; the error names the server and includes its log tail.
func waitReady(ctx context.Context, p *Process, timeout time.Duration, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		last = check(cctx)
		ccancel()
		if last == nil {
			return nil
		}
		if p.Exited() {
			return fmt.Errorf("devstack: %s exited during start: %v\n%s", p.Name, last, p.LogTail(4096))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("devstack: %s not ready after %s: %v\n%s", p.Name, timeout, last, p.LogTail(4096))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Host is where a server process runs: the address it listens on and the
// Linux network namespace it runs in. The zero value is 127.0.0.1 in this
// process's namespace. A partition suite places each server on a host of
// its own (Netns set: the process is started through `ip netns exec`,
// which needs root and iproute2), so that the network between them can be
// cut; this process must reach every Addr.
type Host struct {
	Addr  string // IPv4 address; default 127.0.0.1
	Netns string // a named network namespace (ip netns add); default none
}

// hostAt returns hosts[i], or the zero Host past the end.
func hostAt(hosts []Host, i int) Host {
	if i < len(hosts) {
		return hosts[i]
	}
	return Host{}
}

// addr returns h's address, 127.0.0.1 by default.
func (h Host) addr() string {
	if h.Addr == "" {
		return "127.0.0.1"
	}
	return h.Addr
}

// hostPort returns h's address with port.
func (h Host) hostPort(port int) string { return net.JoinHostPort(h.addr(), strconv.Itoa(port)) }
