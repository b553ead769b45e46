package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/publisher"
)

// publishStdout runs CMD with its stdout on a pipe that is the body of the
// publish, so the result streams into the object store while CMD runs and
// nothing is written to disk: `run` needs no writable directory (a
// container with a read-only root filesystem). The publisher hashes the
// bytes as they pass (the request digest is the one of the same bytes in
// a file) and sends them in one PUT up to its part size, else in a
// multipart upload, two parts in memory at most (DESIGN.md "Publish"
// step 1).
//
// The fencing rules are those of a run that publishes after CMD's end: the
// body ends (io.EOF) only once CMD exited 0 with the lease still held and,
// unless --allow-empty, wrote at least one byte. Otherwise the body's last
// Read fails, the publisher aborts the upload (nothing is ever visible
// under the attempt's key) and sends no transaction, and run returns CMD's
// own outcome. --publish-timeout counts from CMD's end: it bounds the rest
// of the upload, the transaction's re-sends and the release; the abort
// after a CMD that failed gets etcd.request_timeout, as the release does.
//
// If the upload fails while CMD runs (the store is down), CMD runs on to
// its end with its stdout drained and discarded (a store outage does not
// cut a job short); run then returns CMD's failure if it failed, else the
// store's error.
func (r *runner) publishStdout(sess *authority.Session, g authority.Grant, p *publisher.Publisher, op publisher.Operation, timeout time.Duration) (publisher.Result, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return publisher.Result{}, err
	}
	defer pr.Close()
	out := newCommandOutput(pr, r.allowEmpty, func() error { return leaseHeld(sess) })
	pctx, pcancel := context.WithCancelCause(r.c.Context())
	defer pcancel(nil)
	type outcome struct {
		res publisher.Result
		err error
	}
	published := make(chan outcome, 1)
	cmd, childOut, err := r.start(g, pw)
	pw.Close() // CMD holds the write end: the pipe ends when CMD's process group is gone
	if err != nil {
		return publisher.Result{}, err
	}
	r.log.Info("run: publishing its stdout as it is written", "resource", g.Resource, "fence", g.Generation, "key", op.IdempotencyKey)
	op.Body = out
	go func() {
		res, err := p.Publish(pctx, op)
		out.drain() // a failed upload reads no more: CMD must not block on a full pipe
		published <- outcome{res, err}
	}()
	cmdErr := r.wait(sess, g, cmd, childOut)
	out.settle(cmdErr)
	// After a CMD that failed, the upload's abort gets what the release
	// gets; after one that succeeded, the rest of --publish-timeout less
	// the release's part (afterCommand).
	bound := r.requestTimeout
	if cmdErr == nil {
		bound = time.Until(r.afterCommand(timeout))
	}
	deadline := time.AfterFunc(bound, func() { pcancel(errPublishTimeout) })
	defer deadline.Stop()
	o := <-published
	switch {
	case cmdErr != nil:
		return publisher.Result{}, cmdErr
	case out.refusal() != nil:
		return publisher.Result{}, out.refusal()
	case o.err != nil && o.res.Outcome == "" && errors.Is(context.Cause(pctx), errPublishTimeout):
		return publisher.Result{}, exitcode.With(exitcode.Unavailable, fmt.Errorf("--publish-timeout %s ran out after the command's end; nothing published: %w", timeout, o.err))
	}
	return o.res, o.err
}

// errPublishTimeout ends a publish of CMD's stdout that outlasts
// --publish-timeout after CMD's end.
var errPublishTimeout = fmt.Errorf("--publish-timeout ran out: %w", context.DeadlineExceeded)

// commandOutput is the body of publishStdout: the read end of CMD's stdout
// pipe, ending only as settle decides. One Read runs at a time (mu): the
// publisher's and, once it stopped, drain's.
type commandOutput struct {
	mu         sync.Mutex
	pipe       *os.File
	allowEmpty bool
	held       func() error // nil while the lease is held (leaseHeld)

	n int64 // bytes read
	// left is the number of bytes the pipe still holds of CMD's output
	// once CMD is gone and a process outside its group keeps the pipe
	// open; -1 until then (read to the pipe's end).
	left int64

	settled chan struct{} // closed by settle; cmdErr is then set
	cmdErr  error
	refused error // why the body failed although CMD succeeded (empty, lease lost)
}

// newCommandOutput returns the body reading pipe; held says whether the
// lease is still held when the output ends.
func newCommandOutput(pipe *os.File, allowEmpty bool, held func() error) *commandOutput {
	return &commandOutput{pipe: pipe, allowEmpty: allowEmpty, held: held, left: -1, settled: make(chan struct{})}
}

// errCommandFailed is the body's error when CMD did not succeed: the
// publish fails, and run reports CMD's own outcome.
var errCommandFailed = errors.New("the command did not succeed")

// Read reads CMD's output. At its end it waits for settle and returns
// io.EOF only when CMD succeeded, the lease is held and the output is not
// refused as empty; otherwise an error, so nothing is published.
func (o *commandOutput) Read(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if o.left == 0 {
			return 0, o.end()
		}
		q := p
		if o.left > 0 && int64(len(q)) > o.left {
			q = q[:o.left]
		}
		n, err := o.pipe.Read(q)
		o.n += int64(n)
		if o.left > 0 {
			o.left -= int64(n)
		}
		switch {
		case n > 0:
			return n, nil
		case errors.Is(err, io.EOF):
			o.left = 0
		case errors.Is(err, os.ErrDeadlineExceeded):
			// settle woke a Read that waits for a writer outside CMD's
			// process group: what the pipe holds now is the rest.
			// (Where the count is not available, read on to the pipe's end.)
			if left, err := pipeUnread(o.pipe); err == nil {
				o.left = int64(left)
			} else if !errors.Is(err, errors.ErrUnsupported) {
				return 0, fmt.Errorf("the command's stdout: %w", err)
			}
			_ = o.pipe.SetReadDeadline(time.Time{})
		default:
			return 0, err
		}
	}
}

// end is the body's last result, once settle ran: io.EOF or why not.
func (o *commandOutput) end() error {
	<-o.settled
	switch {
	case o.cmdErr != nil:
		return errCommandFailed
	case o.refused != nil:
		return o.refused
	}
	if err := o.held(); err != nil {
		o.refused = err
		return err
	}
	if o.n == 0 && !o.allowEmpty {
		o.refused = errEmptyResult("")
		return o.refused
	}
	return io.EOF
}

// settle records CMD's outcome (nil: it exited 0) once CMD and its process
// group are gone, and wakes a Read that waits on the pipe, which only a
// process that left CMD's process group can still hold open: the output
// ends with what the pipe holds now (Read). Called once.
func (o *commandOutput) settle(cmdErr error) {
	o.cmdErr = cmdErr
	close(o.settled)
	_ = o.pipe.SetReadDeadline(time.Now())
}

// refusal returns why the body failed although CMD succeeded, or nil.
// Valid once the publish returned.
func (o *commandOutput) refusal() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.refused
}

// drain reads and discards the rest of CMD's output, to its end as Read
// decides it.
func (o *commandOutput) drain() {
	buf := make([]byte, 32<<10)
	for {
		if _, err := o.Read(buf); err != nil {
			return
		}
	}
}
