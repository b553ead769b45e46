package chaos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencepub/fencepub/internal/wait"
)

// storeDelay is how much a partition fault that must strike a publish in
// flight delays the worker's link to the object store, each way, so that
// its object write lasts long enough to be struck.
const storeDelay = 300 * time.Millisecond

// injectPartition runs partition fault f (PartitionFaults) on the run's
// Network against the worker process of slot f.Target, to its heal, and
// fills rec: its target is the process, so that Liveness leaves the
// process's operations during the fault out (the rest of the clients are
// the majority side), and its start is when the cut took effect.
func (h *harness) injectPartition(ctx context.Context, f Fault, rec *FaultRecord) error {
	nw := h.cfg.Network
	if nw == nil {
		return fmt.Errorf("chaos: %s needs a Network (Config.Network)", f.Kind)
	}
	sl := h.slots[f.Target%len(h.slots)]
	h.procMu.Lock()
	p := sl.proc
	h.procMu.Unlock()
	rec.Target = p.id
	var (
		heals []func() error
		op    PublishOp
		ok    bool
	)
	heal := func() error {
		var errs []error
		for i := len(heals) - 1; i >= 0; i-- {
			errs = append(errs, heals[i]())
		}
		return errors.Join(errs...)
	}
	apply := func(hl func() error, err error) error {
		if err == nil {
			heals = append(heals, hl)
		}
		return err
	}
	during := func() string {
		if !ok {
			return "between publishes"
		}
		return fmt.Sprintf("during publish %s (%s of %s, %d bytes)", op.ID, op.Version, op.Resource, op.Size)
	}
	// slowStore delays the worker's link to the store, so that the publish
	// it starts next is still writing its object when it is struck.
	slowStore := func() error { return apply(nw.DegradeWorker(sl.idx, true, 0, storeDelay)) }
	var err error
	switch f.Kind {
	case PartitionWorkerEtcd, PartitionWorkerEtcdOneWay:
		if err = slowStore(); err != nil {
			break
		}
		op, ok = p.nextInvoke(ctx, 8*time.Second)
		if ok && (f.Variant == 1 || f.Kind == PartitionWorkerEtcdOneWay) {
			// The object is written; its answer, and the transaction
			// after it, are still to come.
			h.awaitObject(ctx, op, 5*time.Second)
		}
		oneWay := f.Kind == PartitionWorkerEtcdOneWay
		err = apply(nw.CutWorker(sl.idx, false, oneWay))
		rec.Detail = fmt.Sprintf("cut from etcd for %s %s", f.Hold, during())
		if oneWay {
			rec.Detail = fmt.Sprintf("etcd's answers lost for %s %s", f.Hold, during())
		}
	case PartitionWorkerStore:
		if err = slowStore(); err != nil {
			break
		}
		op, ok = p.nextMultipart(ctx, 30*time.Second)
		wait.Sleep(ctx, time.Second) // its upload is under way
		err = apply(nw.CutWorker(sl.idx, true, false))
		rec.Detail = fmt.Sprintf("cut from the object store for %s %s", f.Hold, during())
	case PartitionLeader:
		leader, lerr := h.cfg.Cluster.Etcd.Leader(ctx)
		if lerr != nil {
			return lerr
		}
		member := 0
		for i, m := range h.cfg.Cluster.Etcd.Members {
			if m == leader {
				member = i
			}
		}
		err = apply(nw.IsolateMember(member, sl.idx))
		rec.Detail = fmt.Sprintf("leader %s cut from the followers with the worker for %s (%d election timeouts)", leader.Name, f.Hold, f.Hold/ElectionTimeout)
	case PartitionLossyEtcd:
		err = apply(nw.DegradeWorker(sl.idx, false, LossyShare, LossyDelay))
		rec.Detail = fmt.Sprintf("link to etcd loses %.0f %% and delays %s each way for %s", LossyShare*100, LossyDelay, f.Hold)
	default:
		return fmt.Errorf("chaos: %s is not a partition fault", f.Kind)
	}
	rec.Start = h.clock.Now()
	if err == nil {
		wait.Sleep(ctx, f.Hold)
	}
	return errors.Join(err, heal())
}

// nextMultipart waits for the process to start a publish whose body is
// uploaded in several parts (above partSize) and returns it; ok is false
// after timeout or when the process exits.
func (p *process) nextMultipart(ctx context.Context, timeout time.Duration) (op PublishOp, ok bool) {
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return PublishOp{}, false
		}
		if op, ok = p.nextInvoke(ctx, left); !ok || op.Size > partSize {
			return op, ok
		}
	}
}
