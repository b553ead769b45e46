package suite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/fencepub/fencepub/harness/bench"
	"github.com/fencepub/fencepub/internal/cli/config"
	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore/s3store"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Local is a single-member etcd and one object-store server (a
// single-drive MinIO or one SeaweedFS `weed server`) started by StartLocal
// for `fencepub-bench --local`, with their production-like defaults
// (internal/devstack).
type Local struct {
	Dir  string
	Etcd *devstack.Etcd
	// StoreKind is the object store's kind (devstack.StoreKinds).
	StoreKind string
	Store     devstack.ObjectStore
	cli       *clientv3.Client
	n         atomic.Int64 // dedicated clusters started
}

// StartLocal starts etcd and the object store of kind storeKind
// (devstack.StoreMinIO, the default for "", or StoreSeaweedFS) from the
// devstack bin directory under dir (which it creates) and blocks until
// both answer or ctx ends. Close stops them. Errors:
// devstack.ErrNoBinary (run `make deps`), an unknown kind, a server that
// does not become ready.
func StartLocal(ctx context.Context, dir, storeKind string) (*Local, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	e, err := devstack.StartEtcd(ctx, filepath.Join(dir, "etcd"), devstack.EtcdOptions{})
	if err != nil {
		return nil, err
	}
	if storeKind == "" {
		storeKind = devstack.StoreMinIO
	}
	m, err := devstack.StartStore(ctx, filepath.Join(dir, storeKind), storeKind, false)
	if err != nil {
		e.Stop()
		return nil, err
	}
	cli, err := e.Client()
	if err != nil {
		m.Stop()
		e.Stop()
		return nil, err
	}
	return &Local{Dir: dir, Etcd: e, StoreKind: storeKind, Store: m, cli: cli}, nil
}

// Env returns the suite environment of the local servers with namespace
// ns; StartEtcd starts dedicated clusters under Dir. On MinIO,
// StartCluster starts the recovery workload's multi-node cluster; on
// SeaweedFS it is nil (that topology is MinIO's), so the workload is
// skipped.
func (l *Local) Env(ns layout.Namespace) (Env, error) {
	st, err := s3store.New(l.Store.S3Config())
	if err != nil {
		return Env{}, err
	}
	env := Env{
		Target:  bench.Target{Etcd: l.cli, Store: st, NS: ns},
		Config:  config.Config{Etcd: config.Etcd{Endpoints: l.Etcd.Endpoints()}, S3: l.Store.S3Config()},
		NewEtcd: l.Etcd.Client,
		StartEtcd: func(ctx context.Context, members int) (*clientv3.Client, func(), error) {
			d := filepath.Join(l.Dir, fmt.Sprintf("cluster-%d-%dm", l.n.Add(1), members))
			e, err := devstack.StartEtcd(ctx, d, devstack.EtcdOptions{Members: members})
			if err != nil {
				return nil, nil, err
			}
			cli, err := e.Client()
			if err != nil {
				e.Stop()
				return nil, nil, err
			}
			return cli, func() { _ = cli.Close(); e.Stop(); _ = os.RemoveAll(d) }, nil
		},
		Servers: "local (fencepub-bench --local --store seaweedfs): etcd 1 member, SeaweedFS 1 `weed server` process, on loopback, data in a temporary directory; no recovery rows (its multi-node topology is MinIO's)",
	}
	if l.StoreKind == devstack.StoreMinIO {
		env.StartCluster = func(ctx context.Context) (*devstack.Cluster, func(), error) {
			d := filepath.Join(l.Dir, fmt.Sprintf("multinode-%d", l.n.Add(1)))
			c, err := devstack.StartCluster(ctx, d, devstack.MultiNode())
			if err != nil {
				return nil, nil, err
			}
			return c, func() { c.Stop(); _ = os.RemoveAll(d) }, nil
		}
		env.Servers = "local (fencepub-bench --local): etcd 1 member, MinIO 1 drive, on loopback, data in a temporary directory; the recovery rows on a dedicated 3-member etcd and 4-node MinIO"
	}
	return env, nil
}

// Close stops the servers. It does not remove Dir.
func (l *Local) Close() error {
	err := l.cli.Close()
	l.Store.Stop()
	l.Etcd.Stop()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}
