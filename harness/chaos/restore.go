package chaos

import (
	"context"
	"fmt"
	"github.com/fencepub/fencepub/internal/pubhook"
	"github.com/fencepub/fencepub/internal/recovery"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/testkit/faultproxy"
	"github.com/fencepub/fencepub/internal/wait"
	"github.com/fencepub/fencepub/publisher"
	"github.com/fencepub/fencepub/reader"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// injectRestore runs an EtcdRestore fault (DESIGN.md invariant 3, the
// runbook's restore): it saves a snapshot of one member, lets the workload
// run for f.Hold, then cuts every client off etcd — the proxies refuse and
// reset every connection, the gate stops the harness's GC passes and
// Resolves — restores every member from the snapshot, runs
// recovery.Recover, records the state Recover left and lets the clients
// back. Publishes committed after the snapshot are lost by design; the
// history is split at the restore.
func (h *harness) injectRestore(ctx context.Context, f Fault) (target, detail string, err error) {
	cl := h.cfg.Cluster
	snap := filepath.Join(h.cfg.Dir, fmt.Sprintf("snapshot-%d.db", h.clock.Now()))
	target, err = cl.saveSnapshot(ctx, f.Target, snap)
	if err != nil {
		return target, "", err
	}
	ev := RestoreEvent{Snapshot: h.clock.Now(), OldEpoch: h.epoch.Load()}
	wait.Sleep(ctx, f.Hold)

	h.gate.Lock()
	defer h.gate.Unlock()
	defer h.cutOff()()
	ev.Start = h.clock.Now()
	wait.Sleep(ctx, 200*time.Millisecond) // requests already inside etcd finish
	if ev.Revision, err = h.watch.sync(ctx); err != nil {
		return target, "", err
	}
	h.watch.expectRestore()
	if err := cl.restore(ctx, snap); err != nil {
		return target, "", err
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	rep, err := h.recover(rctx, recovery.Options{})
	if err != nil {
		return target, "", err
	}
	ev.NewEpoch = rep.NewEpoch
	if ev.States, err = h.readStates(rctx, rep.NewEpoch); err != nil {
		return target, "", err
	}
	h.epoch.Store(rep.NewEpoch)
	ev.End = h.clock.Now()
	h.rec.Restore(ev)
	return target, fmt.Sprintf("snapshot of %s restored %.1fs after it was taken; epoch %d -> %d; %d holders revoked; %d resources restored",
		target, time.Duration(ev.Start-ev.Snapshot).Seconds(), rep.OldEpoch, rep.NewEpoch, len(rep.Revoked), len(ev.States)), nil
}

// cutOff cuts every client that reaches etcd through a proxy off it: the
// proxies refuse and reset every connection. On a Network the worker
// processes, which reach etcd directly, are cut from it there (a request
// they sent before cannot arrive after the restore: every member is killed
// and started again, so their old connections are gone). It returns the
// function that lets them back. The caller holds the gate for writing,
// which keeps the harness's own clients off.
func (h *harness) cutOff() (reopen func()) {
	proxies := append([]*proxySet{h.shared}, slotProxies(h.slots)...)
	for _, ps := range proxies {
		for _, p := range ps.etcd {
			p.Set(faultproxy.Faults{Refuse: true})
			p.ResetAll()
		}
	}
	var heals []func() error
	if nw := h.cfg.Network; nw != nil {
		for _, sl := range h.slots {
			heal, err := nw.CutWorker(sl.idx, false, false)
			if err != nil {
				h.log.Error("chaos: cut a worker process off etcd", "slot", sl.idx, "err", err)
				continue
			}
			heals = append(heals, heal)
		}
	}
	return func() {
		for _, heal := range heals {
			if err := heal(); err != nil {
				h.log.Error("chaos: let a worker process back to etcd", "err", err)
			}
		}
		for _, ps := range proxies {
			for _, p := range ps.etcd {
				p.Set(faultproxy.Faults{})
			}
		}
	}
}

// recover runs recovery.Recover with opts until it succeeds (the members
// may still be electing a leader) or ctx ends.
func (h *harness) recover(ctx context.Context, opts recovery.Options) (recovery.Report, error) {
	for {
		rep, err := recovery.Recover(ctx, h.auth, opts)
		if err == nil {
			return rep, nil
		}
		if !wait.Sleep(ctx, 500*time.Millisecond) {
			return rep, fmt.Errorf("chaos: recover (from bucket: %t): %w", opts.FromBucket, err)
		}
	}
}

// readStates reads every resource's pointer, seal and op records at one
// revision: the state the history after a restore starts from.
func (h *harness) readStates(ctx context.Context, epoch uint64) (map[string]InitialState, error) {
	root := h.ns.Root()
	states := map[string]InitialState{}
	get := func(res string) InitialState {
		if s, ok := states[res]; ok {
			return s
		}
		return InitialState{Epoch: epoch, Ops: map[string]OpState{}}
	}
	var rev int64
	for _, prefix := range []string{"pointers/", "seals/", "ops/"} {
		opts := []clientv3.OpOption{clientv3.WithPrefix()}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := h.direct.Get(ctx, root+prefix, opts...)
		if err != nil {
			return nil, fmt.Errorf("chaos: read the restored state: %w", err)
		}
		rev = resp.Header.Revision
		for _, kv := range resp.Kvs {
			rest := strings.TrimPrefix(string(kv.Key), root+prefix)
			switch prefix {
			case "pointers/":
				p, err := layout.DecodePointer(kv.Value)
				if err != nil {
					return nil, err
				}
				s := get(unescape(rest))
				s.Pointer = p.Version
				states[unescape(rest)] = s
			case "seals/":
				sl, err := layout.DecodeSeal(kv.Value)
				if err != nil {
					return nil, err
				}
				s := get(unescape(rest))
				s.Seal = sl.Version
				states[unescape(rest)] = s
			default:
				res, key, _ := strings.Cut(rest, "/")
				r, err := layout.DecodeOp(kv.Key, kv.Value)
				if err != nil {
					return nil, err
				}
				s := get(unescape(res))
				s.Ops[unescape(key)] = OpState{Digest: r.Digest, Version: r.Version}
				states[unescape(res)] = s
			}
		}
	}
	return states, nil
}

// injectReplace runs an EtcdReplaced fault (DESIGN.md invariant 9, the
// runbook's take-over of a bucket by an empty etcd): it cuts every client
// off etcd as a restore does, replaces the cluster by an empty one, runs
// recovery.Recover with recovery.Options.FromBucket (every object found is
// quarantined), records the replacement as a restore of history to nothing
// (no resource has a pointer in the new epoch), republishes the newest
// object of each resource (republishNewest) while the clients are still
// cut off, and lets them back; their grants are gone, so they acquire
// again.
func (h *harness) injectReplace(ctx context.Context, f Fault) (target, detail string, err error) {
	ev := RestoreEvent{OldEpoch: h.epoch.Load(), Replaced: true}
	h.gate.Lock()
	defer h.gate.Unlock()
	defer h.cutOff()()
	ev.Start = h.clock.Now()
	ev.Snapshot = ev.Start
	wait.Sleep(ctx, 200*time.Millisecond) // requests already inside etcd finish
	if ev.Revision, err = h.watch.sync(ctx); err != nil {
		return "", "", err
	}
	if err := h.cfg.Cluster.replace(ctx, f.Hold); err != nil {
		return "", "", err
	}
	h.watch.replaced(1, ev.Revision)
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	rep, err := h.recover(rctx, recovery.Options{FromBucket: true})
	if err != nil {
		return "", "", err
	}
	ev.NewEpoch = rep.NewEpoch
	if ev.States, err = h.readStates(rctx, rep.NewEpoch); err != nil {
		return "", "", err
	}
	h.epoch.Store(rep.NewEpoch)
	ev.End = h.clock.Now()
	h.rec.Restore(ev)
	applied, failed := h.republishNewest(ctx, rep)
	return "cluster", fmt.Sprintf("empty cluster taken over from the bucket; epoch %d -> %d; %d resources found; republished %d, %d failed",
		ev.OldEpoch, rep.NewEpoch, len(rep.Resources), applied, failed), nil
}

// republishNewest republishes, for every resource of rep with objects, the
// newest of them (the last of ResourceRecovery.Above) the way `fencepub
// authority recover --republish` does: a grant of the resource, then
// publisher's republish under the key recover-<old version>, then a release.
// Each grant and publish is logged like a worker's, by client "recover"; up
// to 4 resources at a time, each within republishTimeout (the whole step
// grows with the resources: ~130 s for 393 of them on 2 loaded cores), until
// ctx ends. It returns how many publishes applied and how many did not.
func (h *harness) republishNewest(ctx context.Context, rep recovery.Report) (applied, failed int) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i, r := range rep.Resources {
		if len(r.Above) == 0 {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			ok := republishOne(ctx, h.auth, h.pub, h.readConfig(), h.rec, fmt.Sprintf("recover/%d-%d", rep.NewEpoch, i), r.Resource, r.Above[len(r.Above)-1])
			mu.Lock()
			defer mu.Unlock()
			if ok {
				applied++
			} else {
				failed++
			}
		}()
	}
	wg.Wait()
	return applied, failed
}

// republishTimeout bounds the republish of one resource after a
// replacement: the minute `recover --republish` gives each resource's grant
// (publisher.RestoreLost), the bind and the republish after it.
const republishTimeout = time.Minute

// datasetAt returns the dataset publish of h that wrote the manifest index
// at version v of res, or nil: the one whose request digest is digest (a
// republish keeps it), else the only dataset publish at v. It need not
// have applied: recovery finds the objects of stale publishes too.
func datasetAt(h *History, res string, v layout.Version, digest string) *PublishOp {
	var only *PublishOp
	n := 0
	for i := range h.Publishes {
		p := &h.Publishes[i]
		if p.Resource != res || p.Version != v || p.Files == nil {
			continue
		}
		if digest != "" && p.RequestDigest == digest {
			return p
		}
		only, n = p, n+1
	}
	if n == 1 {
		return only
	}
	return nil
}

// republishOne republishes lost on resource res as publish id, with a grant
// of auth and publisher client pub, within republishTimeout (or until ctx
// ends), logs the grant and the publish in rec and reports whether it
// applied. A lost manifest is republished as a dataset version: its
// entries, listed through rcfg, are logged with it.
func republishOne(ctx context.Context, auth *authority.Authority, pub *publisher.Client, rcfg reader.Config, rec *Recorder, id, res string, lost recovery.LostObject) bool {
	ctx, cancel := context.WithTimeout(ctx, republishTimeout)
	defer cancel()
	clock := rec.Clock()
	g, err := auth.Acquire(ctx, authority.AcquireRequest{
		Resource: res, Owner: "recover-" + authority.NewID()[:12], RequestID: authority.NewID(), TTL: 15 * time.Second, Wait: true,
	})
	if err != nil {
		rec.Anomaly(Anomaly{Client: "recover", Time: clock.Now(), What: "acquire " + res + " to republish", Err: err.Error()})
		return false
	}
	rec.Grant(GrantEvent{Client: "recover", Time: clock.Now(), Resource: res, Owner: g.Owner, RequestID: g.RequestID, Epoch: g.Epoch, Fence: g.Generation})
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = auth.Release(rctx, g)
	}()
	op := PublishOp{
		ID: id, Client: "recover", Resource: res, Key: "recover-" + layout.EncodeVersion(lost.Version), Size: lost.Size,
		Owner: g.Owner, Version: g.Version(1), Call: clock.Now(),
	}
	rec.Invoke(op)
	p, err := pub.Bind(ctx, publisher.GrantTerm(g, false))
	var r publisher.Result
	if err == nil {
		var res any
		res, err = pubhook.Republish(ctx, p, lost.Key, op.Key)
		r, _ = res.(publisher.Result)
	}
	reported(&op, r, err)
	op.Digest, op.RequestDigest = r.Object.SHA256, r.Digest
	if !r.Version.IsZero() {
		op.Version = r.Version
	}
	// A dataset version is republished as a dataset: the files its writer
	// logged, else (no one publish of the history wrote it) what its
	// manifest lists.
	if orig := datasetAt(rec.History(), res, lost.Version, r.Digest); orig != nil {
		op.Files, op.Digest = orig.Files, orig.Digest
	} else if op.Outcome == Applied && r.Pointer != nil && r.Pointer.IsDataset() {
		if op.Files, err = manifestEntries(ctx, rcfg, res, *r.Pointer); err != nil {
			rec.Anomaly(Anomaly{Client: "recover", Time: clock.Now(), What: "list the republished manifest of " + res, Err: err.Error()})
		}
	}
	if op.Reported == Unknown {
		if err := settle(ctx, pub, &op, "harness"); err != nil {
			op.Err = err.Error()
		}
	}
	op.Return, op.Done = clock.Now(), true
	rec.Complete(op)
	return op.Outcome == Applied
}

// manifestEntries lists the manifest of dataset pointer ptr of res through
// cfg, retrying as the final sweep does.
func manifestEntries(ctx context.Context, cfg reader.Config, res string, ptr fencepub.Pointer) ([]FileEntry, error) {
	rd, err := reader.New(cfg, res)
	if err != nil {
		return nil, err
	}
	op := DatasetRead{}
	err = sweepRetry(ctx, func() error { op.Listing = nil; return listFiles(ctx, rd, ptr, &op) })
	if op.Listing == nil {
		op.Listing = []FileEntry{}
	}
	return op.Listing, err
}
