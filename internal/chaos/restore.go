package chaos

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/faultproxy"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/wait"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// injectRestore runs an EtcdRestore fault (DESIGN.md invariant 3, the
// runbook's restore): it saves a snapshot of one member, lets the workload
// run for f.Hold, then cuts every client off etcd — the proxies refuse and
// reset every connection, the gate stops the harness's GC passes and
// Resolves — restores every member from the snapshot, runs
// authority.Recover, records the state Recover left and lets the clients
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
	proxies := append([]*proxySet{h.shared}, slotProxies(h.slots)...)
	for _, ps := range proxies {
		for _, p := range ps.etcd {
			p.Set(faultproxy.Faults{Refuse: true})
			p.ResetAll()
		}
	}
	defer func() {
		for _, ps := range proxies {
			for _, p := range ps.etcd {
				p.Set(faultproxy.Faults{})
			}
		}
	}()
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
	var rep authority.RecoverReport
	for {
		if rep, err = h.auth.Recover(rctx, authority.RecoverOptions{}); err == nil {
			break
		}
		if !wait.Sleep(rctx, 500*time.Millisecond) {
			return target, "", fmt.Errorf("chaos: recover after the restore: %w", err)
		}
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
				r, err := layout.DecodeOp(kv.Value)
				if err != nil {
					return nil, err
				}
				s := get(unescape(res))
				s.Ops[unescape(key)] = OpState{Digest: r.Object.SHA256, Version: r.Version}
				states[unescape(res)] = s
			}
		}
	}
	return states, nil
}
