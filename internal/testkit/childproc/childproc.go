// Package childproc starts and stops the child processes of fencepub's
// harnesses: the test binary re-executed as a worker (testenv), the chaos
// harness's worker processes and the demo's workers and servers. A child is
// tied to its parent (on Linux it dies with it: internal/sysproc), its
// stdout can be read line by line while it runs, and it is done once its
// stdout is drained and it has been waited for.
package childproc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/fencepub/fencepub/internal/sysproc"
)

// Spec describes a child process.
type Spec struct {
	// Path and Args are the program and its arguments (without argv[0]).
	Path string
	Args []string
	// Env is the child's environment; nil inherits this process's.
	Env []string
	// Stdin gives the child a pipe as its standard input (Proc.Stdin).
	Stdin bool
	// OnLine, if set, gets every stdout line (without its newline) in order,
	// from one goroutine; the slice is only valid during the call. Without
	// it stdout goes to Stdout.
	OnLine func(line []byte)
	// MaxLine is the longest line OnLine gets, in bytes (default 64 KiB). A
	// longer one ends the line reading; the rest of stdout is discarded so
	// the child never blocks on a full pipe.
	MaxLine int
	// Stdout (when OnLine is nil) and Stderr receive those streams; nil
	// discards them.
	Stdout, Stderr io.Writer
	// OwnGroup puts the child in a process group of its own, so a
	// terminal's Ctrl-C reaches the parent only; otherwise it stays in the
	// parent's group.
	OwnGroup bool
}

// Proc is a started child process. Its methods may be called from any
// goroutine.
type Proc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}
	err   error // cmd.Wait's result, set before done is closed
}

// Start starts the child that s describes. It returns an error naming the
// program if the process cannot be started (nothing is left running).
func Start(s Spec) (*Proc, error) {
	cmd := exec.Command(s.Path, s.Args...)
	cmd.Env = s.Env
	cmd.Stderr = s.Stderr
	cmd.SysProcAttr = sysproc.Tied()
	if s.OwnGroup {
		cmd.SysProcAttr = sysproc.Group()
	}
	p := &Proc{cmd: cmd, done: make(chan struct{})}
	var err error
	if s.Stdin {
		if p.stdin, err = cmd.StdinPipe(); err != nil {
			return nil, err
		}
	}
	var stdout io.Reader
	if s.OnLine != nil {
		if stdout, err = cmd.StdoutPipe(); err != nil {
			return nil, err
		}
	} else {
		cmd.Stdout = s.Stdout
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", s.Path, err)
	}
	go func() {
		if stdout != nil {
			readLines(stdout, s.MaxLine, s.OnLine)
		}
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// readLines calls onLine for every line of r, then drains r.
func readLines(r io.Reader, maxLine int, onLine func([]byte)) {
	sc := bufio.NewScanner(r)
	if maxLine > 0 {
		sc.Buffer(make([]byte, 0, min(maxLine, 64<<10)), maxLine)
	}
	for sc.Scan() {
		onLine(sc.Bytes())
	}
	_, _ = io.Copy(io.Discard, r)
}

// Pid returns the child's process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Stdin returns the write end of the child's stdin pipe (Spec.Stdin), or
// nil.
func (p *Proc) Stdin() io.WriteCloser { return p.stdin }

// Signal sends sig to the child. It returns kill(2)'s error, or
// os.ErrProcessDone once the child has been waited for.
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Done returns a channel closed once the child has exited, its stdout is
// drained and it has been waited for.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Wait blocks until Done and returns the child's exit error: nil for exit
// status 0, an *exec.ExitError otherwise.
func (p *Proc) Wait() error {
	<-p.done
	return p.err
}

// Kill resumes the child (a stopped process holds its signals) and kills it
// with SIGKILL, then waits until Done.
func (p *Proc) Kill() {
	_ = p.Signal(syscall.SIGCONT)
	_ = p.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop resumes the child and sends SIGTERM, then kills it if it has not
// exited within grace. It returns once Done.
func (p *Proc) Stop(grace time.Duration) {
	_ = p.Signal(syscall.SIGCONT)
	if err := p.Signal(syscall.SIGTERM); errors.Is(err, os.ErrProcessDone) {
		<-p.done
		return
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.Kill()
	}
}
