//go:build !unit

package testenv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore/s3store"
	"github.com/fencepub/fencepub/internal/testkit/childproc"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Child processes. A test that kills or pauses (SIGSTOP) a worker runs the
// worker as a real process: the test binary re-executed by StartChild, which
// runs one ChildFunc (chosen in TestMain by RunChild) instead of the tests.

const (
	childEnv     = "FENCEPUB_TESTENV_CHILD"      // the name of the ChildFunc to run
	childSpecEnv = "FENCEPUB_TESTENV_CHILD_SPEC" // its spec, JSON
)

// ChildFunc is the body of a child process. spec is the JSON of the value
// the parent gave StartChild. It runs instead of the tests and has no
// testing.TB: it reports through its stdout (read with Child.Next). A nil
// result exits 0; an error is printed on stderr (which StartChild logs if
// the test fails) and exits 1.
type ChildFunc func(spec []byte) error

// RunChild runs the ChildFunc of children that StartChild named in this
// process's environment, then exits (status 0, 1 on an error, 2 if children
// has no such name). In a process StartChild did not start it returns at
// once. Call it first in TestMain, before Main:
//
//	testenv.RunChild(map[string]testenv.ChildFunc{"worker": runWorker})
//	testenv.Main(m)
func RunChild(children map[string]ChildFunc) {
	name, ok := os.LookupEnv(childEnv)
	if !ok {
		return
	}
	f := children[name]
	if f == nil {
		fmt.Fprintf(os.Stderr, "testenv: no child function %q in this test binary\n", name)
		os.Exit(2)
	}
	if err := f([]byte(os.Getenv(childSpecEnv))); err != nil {
		fmt.Fprintf(os.Stderr, "child %s: %v\n", name, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Servers tells a child process where the parent test's domain is: the etcd
// client endpoints, the MinIO config and the namespace. Embed it in a
// child's spec (it encodes as JSON); the child reads it with ConnectSpec.
type Servers struct {
	Etcd      []string         `json:"etcd"`
	S3        s3store.Config   `json:"s3"`
	Namespace layout.Namespace `json:"namespace"`
}

// Servers returns the shared servers' endpoints with namespace ns.
func (s *Shared) Servers(ns layout.Namespace) Servers {
	return Servers{Etcd: s.Etcd.Endpoints(), S3: s.S3.S3Config(), Namespace: ns}
}

// ConnectSpec decodes a child's spec (the JSON its ChildFunc gets) into
// spec, a pointer to a struct that embeds Servers, and connects to those
// servers: it returns a client of their etcd and a Store of their bucket.
// The caller closes the client. It returns the first error (a spec that
// does not decode, a bad endpoint or S3 config); then nothing is left open.
func ConnectSpec(specJSON []byte, spec any) (*clientv3.Client, *s3store.Store, error) {
	var sv Servers
	if err := json.Unmarshal(specJSON, spec); err != nil {
		return nil, nil, fmt.Errorf("child spec: %w", err)
	}
	if err := json.Unmarshal(specJSON, &sv); err != nil {
		return nil, nil, fmt.Errorf("child spec: %w", err)
	}
	cli, err := devstack.NewEtcdClient(sv.Etcd)
	if err != nil {
		return nil, nil, err
	}
	st, err := s3store.New(sv.S3)
	if err != nil {
		_ = cli.Close()
		return nil, nil, err
	}
	return cli, st, nil
}

// Child is a running child process started by StartChild. Its stdout is
// recorded line by line as it comes. Signal, Pid, Lines, Done and Wait may
// be called from any goroutine; Next and NextJSON fail the test and belong
// to its goroutine.
type Child struct {
	t      testing.TB
	name   string
	p      *childproc.Proc
	stderr bytes.Buffer // written by exec until the child is waited for

	mu    sync.Mutex
	lines []string      // every stdout line so far
	read  int           // lines returned by Next
	more  chan struct{} // closed (and replaced) when a line comes
}

// StartChild re-executes the test binary to run the ChildFunc registered as
// name with RunChild, passing spec (any value encoding/json marshals). The
// child gets a pipe as stdin (Stdin) and dies with SIGKILL if the test
// process dies. When t ends the child is resumed (SIGCONT), killed and
// waited for, and its stderr is logged if t failed. StartChild fails t if
// spec does not marshal or the process does not start.
func StartChild(t testing.TB, name string, spec any) *Child {
	t.Helper()
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatalf("child %s: spec: %v", name, err)
	}
	c := &Child{t: t, name: name, more: make(chan struct{})}
	c.p, err = childproc.Start(childproc.Spec{
		Path: os.Args[0], Args: []string{"-test.run=^$"},
		Env:   append(os.Environ(), childEnv+"="+name, childSpecEnv+"="+string(b)),
		Stdin: true, OnLine: c.record, Stderr: &c.stderr,
	})
	if err != nil {
		t.Fatalf("child %s: %v", name, err)
	}
	t.Cleanup(func() {
		c.p.Kill()
		if t.Failed() && c.stderr.Len() > 0 {
			t.Logf("--- child %s stderr ---\n%s", name, c.stderr.String())
		}
	})
	return c
}

// record appends one stdout line to c.lines.
func (c *Child) record(line []byte) {
	c.mu.Lock()
	c.lines = append(c.lines, string(line))
	close(c.more)
	c.more = make(chan struct{})
	c.mu.Unlock()
}

// Next returns the child's next stdout line (without its newline), waiting
// up to timeout for it. Each line is returned once, in order. It fails t if
// stdout ends first or no line comes within timeout.
func (c *Child) Next(timeout time.Duration) string {
	c.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		if c.read < len(c.lines) {
			line := c.lines[c.read]
			c.read++
			c.mu.Unlock()
			return line
		}
		more := c.more
		c.mu.Unlock()
		select {
		case <-more:
		case <-c.p.Done():
			c.mu.Lock()
			ended := c.read == len(c.lines)
			c.mu.Unlock()
			if ended {
				c.t.Fatalf("child %s: stdout ended; want another line", c.name)
			}
		case <-deadline.C:
			c.t.Fatalf("child %s: no line on stdout within %s", c.name, timeout)
		}
	}
}

// NextJSON decodes the child's next stdout line (see Next) into v. It fails
// t as Next does, and if the line does not decode into v.
func (c *Child) NextJSON(v any, timeout time.Duration) {
	c.t.Helper()
	line := c.Next(timeout)
	if err := json.Unmarshal([]byte(line), v); err != nil {
		c.t.Fatalf("child %s: bad line %q: %v", c.name, line, err)
	}
}

// Lines returns a copy of every line the child printed on stdout so far,
// those Next returned included.
func (c *Child) Lines() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.lines...)
}

// Stdin returns the write end of the child's stdin pipe.
func (c *Child) Stdin() io.Writer { return c.p.Stdin() }

// Pid returns the child's process id.
func (c *Child) Pid() int { return c.p.Pid() }

// Signal sends sig to the child. It returns kill(2)'s error, or
// os.ErrProcessDone once the child has been waited for.
func (c *Child) Signal(sig os.Signal) error { return c.p.Signal(sig) }

// Done returns a channel that is closed when the child has exited and its
// stdout is drained.
func (c *Child) Done() <-chan struct{} { return c.p.Done() }

// Wait blocks until Done and returns the child's exit error: nil for exit
// status 0, an *exec.ExitError otherwise.
func (c *Child) Wait() error { return c.p.Wait() }
