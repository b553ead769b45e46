//go:build !unit

package partition

import (
	"context"
	"errors"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/cli/config"
	"github.com/fencepub/fencepub/internal/objstore/s3store"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// TestLeaderlessMemberRefuses cuts the raft leader from its followers and
// sends an Acquire to it alone, once it has stepped down: the member must
// refuse the authority's requests at once as having no leader
// (rpctypes.ErrNoLeader, retried as fencepub.ErrUnavailable until the
// caller's deadline) instead of holding each until its attempt timeout,
// which is what keeps the clients of the majority side from losing an
// attempt on it for the whole cut (internal/leader, docs/partitions.md).
func TestLeaderlessMemberRefuses(t *testing.T) {
	Require(t)
	ctx := context.Background()
	topo, err := Start(ctx, "fpp10", netip.MustParsePrefix("10.213.10.0/24"), filepath.Join(t.TempDir(), "servers"), Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := topo.Stop(); err != nil {
			t.Error(err)
		}
	})
	leader, err := topo.Cluster.Etcd.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	member := 0
	for i, m := range topo.Cluster.Etcd.Members {
		if m == leader {
			member = i
		}
	}
	cli, err := config.Config{Etcd: config.Etcd{Endpoints: []string{leader.ClientURL}}}.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	st, err := s3store.New(topo.Cluster.MinIO.Config)
	if err != nil {
		t.Fatal(err)
	}
	a, err := authority.New(authority.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(testenv.Namespace(t)), Etcd: cli, Store: st}, RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	heal, err := topo.IsolateMember(member, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := heal(); err != nil {
			t.Error(err)
		}
	}()
	// Cut from its followers, the leader steps down within an election
	// timeout (etcd's check-quorum); its status then names no leader.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		s, err := cli.Status(sctx, leader.ClientURL)
		cancel()
		if err == nil && s.Leader == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still has a leader (or no status: %v) 30 s after it was cut from its followers", leader.Name, err)
		}
	}
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err = a.Acquire(actx, authority.AcquireRequest{Resource: "r", Owner: "o", TTL: 3 * time.Second})
	if !errors.Is(err, fencepub.ErrUnavailable) || !errors.Is(err, rpctypes.ErrNoLeader) {
		t.Errorf("Acquire on a member without a leader: %v, want fencepub.ErrUnavailable refused with %v", err, rpctypes.ErrNoLeader)
	}
}
