package publisher

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/manifest"
)

// ErrPipelineStopped: the operation was never sent, because its Pipeline
// had stopped (an earlier operation ended stale, unknown or in an error, or
// its context ended) or was closed. Nothing was published for it and it
// never will be; an object it wrote is an orphan for GC. It does not wrap
// the error that stopped the pipeline: the operation was not stale, nor
// unknown; the message names the seq the pipeline stopped at and why.
var ErrPipelineStopped = errors.New("publisher: not sent: the pipeline stopped")

// PipelineResult is the answer to one operation submitted to a Pipeline:
// what Publish would have returned for it (Result and nil for applied and
// duplicate; the Result with ErrStale, ErrConflict or ErrUnknown; otherwise
// a zero Result and an error, then nothing was published), or a zero Result
// with ErrPipelineStopped when it was not sent. It pairs the two because a
// Result alone cannot carry the errors that are not outcomes, nor the
// details (errors.Is ErrStale, authority.ErrLeaseLost) Publish's error has.
type PipelineResult struct {
	Result Result
	Err    error
	// Dataset is what a SubmitDataset operation wrote (PublishDataset's
	// DatasetStats); zero for Submit's.
	Dataset DatasetStats
}

// Pipeline publishes a stream of operations of one Publisher, writing the
// objects (SubmitDataset: files) of up to depth operations while the
// transaction of the oldest is in flight (DESIGN.md "Pipelined
// publishing"). Seqs are taken at submit, in order; the transactions are
// sent one at a time in seq order, each Publish's (PublishDataset's).
// Applied, duplicate and conflict let the next one go; any other answer,
// or the end of the Pipeline's context, stops it: later operations get
// ErrPipelineStopped and their seqs back. Submit, SubmitDataset and Close
// are safe for concurrent use; other publishes of the Publisher race with it.
type Pipeline struct {
	p      *Publisher
	ctx    context.Context    // the caller's: transactions
	wctx   context.Context    // object writes; cancelled when the pipeline stops
	cancel context.CancelFunc // of wctx
	slots  chan struct{}      // one per operation submitted and not yet answered
	queue  chan *pending      // submitted operations, in seq order; closed by Close
	halted chan struct{}      // closed when the pipeline stops
	done   chan struct{}      // closed when run returned

	mu     sync.Mutex
	closed bool
	cause  error          // why the pipeline stopped; nil while it runs
	at     layout.Version // the version it stopped at; zero when between operations
	last   *pending       // the operation that took the latest seq; nil before the first
}

// pending is one submitted operation.
type pending struct {
	c     claim   // its seq
	tx    txnFunc // its transaction; set when the write succeeded, dropped once built
	stats DatasetStats
	err   error         // the write's
	wrote chan struct{} // closed when the write ended
	out   chan PipelineResult
	// index is a dataset's manifest index, set by its write (nil for an
	// object), read by the dataset chained to it once wrote is closed.
	index []byte
	// value is the pointer value its transaction writes, set by run when
	// it builds the transaction: what a chained base compares.
	value string
	// lost is set (under Pipeline.mu) when it was answered and not
	// applied: a later operation then does not chain to it.
	lost    bool
	dataset bool // submitted by SubmitDataset
}

// txnFunc builds a written attempt's transaction, stamped now, and the
// context to send it in (carrying the attempt's debug log attributes).
type txnFunc func(ctx context.Context) (context.Context, *prepared)

// answer delivers the operation's one answer and closes its channel.
func (it *pending) answer(res Result, err error) {
	it.out <- PipelineResult{Result: res, Err: err, Dataset: it.stats}
	close(it.out)
}

// Pipeline returns a running Pipeline of p with room for depth operations
// in flight (written or being written, including the one whose transaction
// is in flight); depth below 1 is 1, which publishes exactly as successive
// Publish calls do. ctx bounds every object write and transaction, as it
// bounds Publish; when it ends the pipeline stops (the transaction in
// flight then ends as Publish's would: unknown when it may have been
// applied). Close must be called, or ctx ended, to release the goroutine
// that sends the transactions.
func (p *Publisher) Pipeline(ctx context.Context, depth int) *Pipeline {
	depth = max(depth, 1)
	wctx, cancel := context.WithCancel(ctx)
	pl := &Pipeline{
		p: p, ctx: ctx, wctx: wctx, cancel: cancel,
		slots:  make(chan struct{}, depth),
		queue:  make(chan *pending, depth),
		halted: make(chan struct{}),
		done:   make(chan struct{}),
	}
	go pl.run()
	return pl
}

// Submit takes the next seq for op, starts writing its object and returns
// the channel that receives op's one PipelineResult and is then closed
// (buffered: the Pipeline never waits for a reader). It blocks while depth
// operations are in flight, until one is answered or the pipeline stops.
// op.Body is read on another goroutine until op's answer arrives; the
// caller must not use it before.
//
// An op that Publish would refuse before taking a seq (fencepub.ErrInvalid)
// is answered at once and does not stop the pipeline; after the pipeline
// stopped or was closed, op is answered at once with ErrPipelineStopped.
func (pl *Pipeline) Submit(op Operation) <-chan PipelineResult {
	op, err := pl.p.check(op)
	return pl.submit(err, false, func(ctx context.Context, v layout.Version, it, _ *pending) error {
		w, err := pl.p.write(ctx, v, op)
		it.tx = func(ctx context.Context) (context.Context, *prepared) {
			return pl.p.logContext(ctx, w), pl.p.prepare(w)
		}
		return err
	})
}

// SubmitDataset is Submit for a dataset version, sent as PublishDataset
// would be. With ds.Base BaseCurrent ("" too) its base is the operation
// submitted just before it, while unanswered or applied (a dataset's
// manifest, from memory once its write ended: this write waits for it),
// else the pointer. The transaction requires the pointer to be that base
// exactly: after a duplicate or conflict it is Stale with ReasonBase
// (DESIGN.md "Pipelined publishing"). A refusal before a seq
// (fencepub.ErrInvalid) is answered at once. ds.Files, Open and Progress
// are called on other goroutines until the answer.
func (pl *Pipeline) SubmitDataset(ds Dataset) <-chan PipelineResult {
	err := ds.validate()
	if err != nil {
		pl.p.c.m.failure("validate")
	}
	return pl.submit(err, true, func(ctx context.Context, v layout.Version, it, prev *pending) error {
		b, chained, err := pl.chainBase(ctx, ds.Base, prev)
		if err != nil {
			return err
		}
		w, stats, err := pl.p.writeDataset(ctx, v, ds, b)
		it.stats = stats
		if err != nil {
			pl.p.c.m.failure("object")
			return err
		}
		it.index = w.index
		it.tx = func(ctx context.Context) (context.Context, *prepared) {
			if chained {
				b.value = prev.value // set: prev was sent and answered before
			}
			return pl.p.datasetTxn(v, ds.IdempotencyKey, w, b)(ctx)
		}
		return nil
	})
}

// chainBase returns the base of a dataset submitted with mode whose chained
// operation is prev (nil: none): nil for BaseNone or when prev is an
// object; prev's manifest, once prev's write ended, with chained true (the
// value to compare is prev's transaction's, known once that is built);
// else the pointer's (readBase). Errors: readBase's; prev's write failing
// (the pipeline then stops at prev); fencepub.ErrCorruptState when prev's
// index does not decode.
func (pl *Pipeline) chainBase(ctx context.Context, mode Base, prev *pending) (b *base, chained bool, err error) {
	switch {
	case mode == BaseNone || prev != nil && !prev.dataset:
		return nil, false, nil
	case prev == nil:
		b, err := pl.p.c.readBase(ctx, pl.p.term.resource, BaseCurrent)
		if err != nil {
			pl.p.c.m.failure("base")
		}
		return b, false, err
	}
	if <-prev.wrote; prev.err != nil { // not counted: the pipeline stops at prev, this one is not sent
		return nil, false, fmt.Errorf("publisher: the base %s was not written: %w", prev.c.v, prev.err)
	}
	ix, err := manifest.DecodeIndex(prev.index)
	if err != nil {
		return nil, false, fmt.Errorf("publisher: manifest of the base %s: %w", prev.c.v, err)
	}
	return &base{version: prev.c.v, index: ix}, true, nil
}

// submit queues an operation that refused is nil for, taking its seq and
// starting write (its object's or files') on another goroutine; write sets
// the operation's tx and returns the write's error. For a dataset, write
// gets the operation that took the seq before it while that one is
// unanswered or was applied (SubmitDataset's base), else nil.
func (pl *Pipeline) submit(refused error, dataset bool, write func(ctx context.Context, v layout.Version, it, prev *pending) error) <-chan PipelineResult {
	it := &pending{wrote: make(chan struct{}), out: make(chan PipelineResult, 1), dataset: dataset}
	if refused != nil {
		it.answer(Result{}, refused)
		return it.out
	}
	slot := false
	select {
	case pl.slots <- struct{}{}:
		slot = true
	case <-pl.halted:
	case <-pl.ctx.Done():
	}
	pl.mu.Lock()
	if !slot || pl.closed || pl.cause != nil || pl.ctx.Err() != nil {
		err := pl.notSent()
		pl.mu.Unlock()
		if slot {
			<-pl.slots
		}
		it.answer(Result{}, err)
		return it.out
	}
	it.c = pl.p.take(0)
	var prev *pending
	if dataset && pl.last != nil && !pl.last.lost {
		prev = pl.last
	}
	pl.last = it
	pl.queue <- it // never blocks: it holds a slot
	pl.mu.Unlock()
	go func() {
		defer close(it.wrote)
		it.err = write(pl.wctx, it.c.v, it, prev)
	}()
	return it.out
}

// Close stops accepting operations and blocks until every submitted one
// has its answer: it does not cancel them (end the context for that). It
// returns the error that stopped the pipeline (the answer of the operation
// it stopped at, or the context's error), nil if none did. Safe to call
// more than once; later Submits get ErrPipelineStopped.
func (pl *Pipeline) Close() error {
	pl.mu.Lock()
	if !pl.closed {
		pl.closed = true
		close(pl.queue)
	}
	pl.mu.Unlock()
	<-pl.done
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return pl.cause
}

// notSent is the error of an operation the pipeline did not send. The
// caller holds mu.
func (pl *Pipeline) notSent() error {
	switch {
	case pl.cause != nil && !pl.at.IsZero():
		return fmt.Errorf("%w at %s: %v", ErrPipelineStopped, pl.at, pl.cause)
	case pl.cause != nil:
		return fmt.Errorf("%w: %v", ErrPipelineStopped, pl.cause)
	case pl.ctx.Err() != nil:
		return fmt.Errorf("%w: %v", ErrPipelineStopped, pl.ctx.Err())
	}
	return fmt.Errorf("%w: it is closed", ErrPipelineStopped)
}

// run sends the transactions in seq order until Close or the pipeline
// stops. A queued operation goes before the end of the context, so the
// oldest one gets the context's error as its own answer, as Publish would.
func (pl *Pipeline) run() {
	defer close(pl.done)
	defer pl.cancel()
	for {
		var (
			it *pending
			ok bool
		)
		select {
		case it, ok = <-pl.queue:
		default:
			select {
			case it, ok = <-pl.queue:
			case <-pl.ctx.Done():
				pl.halt(nil, Result{}, pl.ctx.Err())
				return
			}
		}
		if !ok || !pl.handle(it) {
			return
		}
	}
}

// handle waits for it's object, sends its transaction and answers it. It
// returns false when the answer stopped the pipeline.
func (pl *Pipeline) handle(it *pending) bool {
	<-it.wrote
	res, err := Result{}, it.err
	if err == nil {
		ctx, pr := it.tx(pl.ctx)
		it.tx, it.value = nil, string(pr.then[thenPointer].ValueBytes())
		res, err = pl.p.c.commit(ctx, pr)
	}
	if err != nil && res.Outcome != Conflict {
		pl.halt(it, res, err)
		return false
	}
	if res.Outcome != Applied {
		pl.mu.Lock()
		it.lost = true
		pl.mu.Unlock()
	}
	it.answer(res, err)
	<-pl.slots
	return true
}

// halt stops the pipeline at it (nil: between operations) whose answer is
// (res, err): it refuses new operations, cancels the object writes, gives
// back the seqs of the operations not sent (and it's, when nothing of it
// that can apply was sent, as Publish does), then answers it and them.
func (pl *Pipeline) halt(it *pending, res Result, err error) {
	pl.mu.Lock()
	pl.cause = err
	if it != nil {
		pl.at = it.c.v
	}
	close(pl.halted)
	pl.mu.Unlock()
	pl.cancel()
	var rest []*pending
	for more := true; more; {
		select {
		case r, ok := <-pl.queue:
			if more = ok; ok {
				rest = append(rest, r)
			}
		default:
			more = false
		}
	}
	for _, r := range rest {
		<-r.wrote
	}
	for i := len(rest) - 1; i >= 0; i-- { // giveBack returns a seq only while no later one is out
		pl.p.giveBack(rest[i].c)
	}
	if it != nil {
		if it.err != nil || notApplied(res, err) {
			pl.p.giveBack(it.c)
		}
		it.answer(res, err)
	}
	pl.mu.Lock()
	notSent := pl.notSent()
	pl.mu.Unlock()
	for _, r := range rest {
		r.answer(Result{}, notSent)
	}
}
