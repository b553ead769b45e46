package reader

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/leader"
	"github.com/fencepub/fencepub/internal/wait"
)

// Cut is the published pointers of several resources read at one etcd
// revision: a group publish (DESIGN.md "Groups") is in it whole or not at
// all.
type Cut struct {
	// Revision is the etcd revision of the read.
	Revision int64 `json:"revision"`
	// Pointers maps each resource to its pointer: the zero Pointer (its
	// Version.IsZero) while nothing is published.
	Pointers map[string]fencepub.Pointer `json:"pointers"`
}

// ReadCut reads the pointers of resources in one etcd transaction
// (linearizable), retried as Current's reads are within
// Config.RequestTimeout. It reads no object. The number of resources is
// bounded by etcd's --max-txn-ops (128 by default): etcd refuses more.
// Errors: fencepub.ErrInvalid (cfg, a bad or repeated name, none given),
// ErrUnknownResource (a resource never granted), fencepub.ErrUnavailable,
// fencepub.ErrCorruptRecord, ctx's error.
func ReadCut(ctx context.Context, cfg Config, resources ...string) (Cut, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Cut{}, err
	}
	if err := checkNames(resources); err != nil {
		return Cut{}, err
	}
	ns := layout.Namespace(cfg.Namespace)
	ops := make([]clientv3.Op, len(resources))
	for i, res := range resources {
		ops[i] = clientv3.OpGet(ns.PointerKey(res))
	}
	var resp *clientv3.TxnResponse
	err = etcdRead(ctx, cfg, fmt.Sprintf("read the pointers of %s", strings.Join(resources, ", ")), func(ctx context.Context) (err error) {
		resp, err = leader.KV(cfg.Etcd).Txn(ctx).Then(ops...).Commit()
		return err
	})
	if err != nil {
		return Cut{}, err
	}
	cut := Cut{Revision: resp.Header.Revision, Pointers: make(map[string]fencepub.Pointer, len(resources))}
	for i, res := range resources {
		kvs := resp.Responses[i].GetResponseRange().Kvs
		if len(kvs) == 0 {
			r := &Reader{cfg: cfg, res: res, key: ns.PointerKey(res)}
			if err := r.known(ctx); err != nil {
				return Cut{}, err
			}
			cut.Pointers[res] = fencepub.Pointer{}
			continue
		}
		ptr, err := layout.DecodePointer(kvs[0].Value)
		if err != nil {
			return Cut{}, fmt.Errorf("reader: pointer of %q: %w", res, err)
		}
		cut.Pointers[res] = ptr
	}
	return cut, nil
}

// checkNames refuses an empty list, a bad resource name and a name given
// twice. Errors: fencepub.ErrInvalid.
func checkNames(resources []string) error {
	if len(resources) == 0 {
		return fmt.Errorf("%w: reader: no resource to read", fencepub.ErrInvalid)
	}
	sorted := slices.Sorted(slices.Values(resources))
	for i, res := range sorted {
		if err := layout.ValidateResource(res, false); err != nil {
			return fmt.Errorf("%w: %w", fencepub.ErrInvalid, err)
		}
		if i > 0 && sorted[i-1] == res {
			return fmt.Errorf("%w: reader: resource %q given twice", fencepub.ErrInvalid, res)
		}
	}
	return nil
}

// CutUpdate is one item of WatchCut: a Cut in which some pointer moved,
// or an error that did not stop the watch (Err set, Cut zero).
type CutUpdate struct {
	Cut
	// Resync marks a Cut read afresh after the watch was interrupted
	// (compaction, lost leader, broken stream).
	Resync bool
	Err    error
}

// WatchCut follows the pointers of resources until ctx ends, then closes
// the channel: first the current Cut (ReadCut), then one Cut per etcd
// revision that moved any of them, so a group publish arrives whole
// (DESIGN.md "Groups"). An interrupted watch re-syncs with ReadCut.
// Errors arrive as CutUpdates with Err set and do not end it, except a bad
// argument. Cancel ctx when done and drain the channel.
func WatchCut(ctx context.Context, cfg Config, resources ...string) <-chan CutUpdate {
	ch := make(chan CutUpdate)
	go watchCut(ctx, cfg, resources, ch)
	return ch
}

func watchCut(ctx context.Context, cfg Config, resources []string, ch chan<- CutUpdate) {
	defer close(ch)
	send := func(u CutUpdate) bool {
		select {
		case ch <- u:
			return true
		case <-ctx.Done():
			return false
		}
	}
	if _, err := cfg.withDefaults(); err != nil {
		send(CutUpdate{Err: err})
		return
	}
	if err := checkNames(resources); err != nil {
		send(CutUpdate{Err: err})
		return
	}
	ns := layout.Namespace(cfg.Namespace)
	members := make(map[string]string, len(resources)) // pointer key -> resource
	keys := make([]string, 0, len(resources))
	for _, res := range resources {
		members[ns.PointerKey(res)] = res
		keys = append(keys, ns.PointerKey(res))
	}
	slices.Sort(keys)
	resync := false
	for ctx.Err() == nil {
		cut, err := ReadCut(ctx, cfg, resources...)
		if err != nil {
			if ctx.Err() != nil || !send(CutUpdate{Err: err}) {
				return
			}
			wait.Sleep(ctx, resyncDelay)
			continue
		}
		if !send(CutUpdate{Cut: cut, Resync: resync}) || !followCut(ctx, cfg, cut, keys, members, send) {
			return
		}
		resync = true
		wait.Sleep(ctx, resyncDelay)
	}
}

// followCut runs one etcd watch of the range of keys from cut.Revision+1
// and sends a Cut for each revision that put a pointer of members. It
// returns false when the consumer is gone and true when the watch ended
// otherwise and needs a re-sync.
func followCut(ctx context.Context, cfg Config, cut Cut, keys []string, members map[string]string, send func(CutUpdate) bool) bool {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	end := keys[len(keys)-1] + "\x00"
	for resp := range cfg.Etcd.Watch(wctx, keys[0], clientv3.WithRange(end), clientv3.WithRev(cut.Revision+1), clientv3.WithFilterDelete()) {
		if resp.Err() != nil {
			return ctx.Err() == nil
		}
		var next *Cut
		flush := func() bool {
			if next == nil {
				return true
			}
			ok := send(CutUpdate{Cut: *next})
			cut, next = *next, nil
			return ok
		}
		for _, ev := range resp.Events {
			res, ok := members[string(ev.Kv.Key)]
			if !ok {
				continue
			}
			if next != nil && next.Revision != ev.Kv.ModRevision && !flush() {
				return false
			}
			ptr, err := layout.DecodePointer(ev.Kv.Value)
			if err != nil {
				if !flush() || !send(CutUpdate{Err: fmt.Errorf("reader: pointer of %q at revision %d: %w", res, ev.Kv.ModRevision, err)}) {
					return false
				}
				continue
			}
			if next == nil {
				next = &Cut{Revision: ev.Kv.ModRevision, Pointers: maps.Clone(cut.Pointers)}
			}
			next.Pointers[res] = ptr
		}
		if !flush() {
			return false
		}
	}
	return ctx.Err() == nil
}
