package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/objstore/s3store"
	"github.com/fencepub/fencepub/internal/testkit/faultproxy"
	"github.com/fencepub/fencepub/internal/wait"
)

// Cluster is the servers a run injects faults into: a 3-member etcd cluster
// and either a 4-node distributed MinIO (MinIO) or one SeaweedFS with its
// volume server as a process of its own (SeaweedFS; MinIO nil), each member
// and node a separate process (internal/devstack).
type Cluster struct {
	Etcd      *devstack.Etcd
	MinIO     *devstack.MinIO
	SeaweedFS *devstack.SeaweedFS

	mu sync.Mutex // serialises faults that stop or restart servers
}

// Topology is the servers a chaos run starts: the multi-node topology
// (devstack.MultiNode: 3 etcd members, 4 MinIO nodes of 2 drives each).
// The clients' proxies reach MinIO through its first node; the node faults
// hit the three others.
var Topology = devstack.MultiNode()

// StartCluster starts the servers of Topology under dir
// (devstack.StartCluster) and blocks until they answer.
// Errors: devstack's (a missing binary: run `make deps`).
func StartCluster(ctx context.Context, dir string) (*Cluster, error) {
	c, err := devstack.StartCluster(ctx, dir, Topology)
	if err != nil {
		return nil, err
	}
	return &Cluster{Etcd: c.Etcd, MinIO: c.MinIO}, nil
}

// StartSeaweedFSCluster starts Topology's etcd under dir/etcd and a
// SeaweedFS with a separate volume server under dir/seaweedfs (the
// topology of a run on SeaweedFS: SeaweedFSFaults), and blocks until they
// answer. On error nothing it started is left running. Errors:
// devstack's (a missing binary: run `make deps`).
func StartSeaweedFSCluster(ctx context.Context, dir string) (*Cluster, error) {
	e, err := devstack.StartEtcd(ctx, filepath.Join(dir, "etcd"), Topology.Etcd)
	if err != nil {
		return nil, err
	}
	s, err := devstack.StartSeaweedFS(ctx, filepath.Join(dir, "seaweedfs"), devstack.SeaweedFSOptions{SeparateVolume: true})
	if err != nil {
		e.Stop()
		return nil, err
	}
	return &Cluster{Etcd: e, SeaweedFS: s}, nil
}

// storeKind returns the object store's kind (devstack.StoreKinds).
func (c *Cluster) storeKind() string {
	if c.SeaweedFS != nil {
		return devstack.StoreSeaweedFS
	}
	return devstack.StoreMinIO
}

// s3Config reaches the object store's bucket directly (no proxy).
func (c *Cluster) s3Config() s3store.Config {
	if c.SeaweedFS != nil {
		return c.SeaweedFS.Config
	}
	return c.MinIO.Config
}

// Stop stops every server.
func (c *Cluster) Stop() {
	if c.SeaweedFS != nil {
		c.SeaweedFS.Stop()
	} else {
		c.MinIO.Stop()
	}
	c.Etcd.Stop()
}

// heal brings every server back: members and the object store running,
// MinIO's drives in place. The harness calls it at the end of a run,
// whatever the faults left.
func (c *Cluster) heal(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	if s := c.SeaweedFS; s != nil {
		_ = s.Volume.Resume()
		if s.Exited() {
			s.Stop()
			errs = append(errs, s.Restart(ctx))
		}
	} else {
		for _, n := range c.MinIO.Nodes {
			_ = n.Resume()
		}
	}
	for _, m := range c.Etcd.Members {
		_ = m.Resume()
		if m.Exited() {
			m.Stop() // forget the dead process
			if err := m.Start(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, m := range c.Etcd.Members {
		if err := m.WaitReady(ctx, 30*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if c.MinIO == nil {
		return errors.Join(errs...)
	}
	for _, d := range c.MinIO.Drives {
		if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
			if err := os.Rename(d+".removed", d); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if c.MinIO.Exited() {
		c.MinIO.Stop()
		if err := c.MinIO.Restart(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// proxySet is a set of fault proxies a group of clients talks through: one
// in front of each etcd member and one in front of the object store (minio,
// whichever store it is).
type proxySet struct {
	etcd  []*faultproxy.Proxy
	minio *faultproxy.Proxy
}

func newProxySet(c *Cluster) (*proxySet, error) {
	ps := &proxySet{}
	for _, m := range c.Etcd.Members {
		p, err := faultproxy.Start(strings.TrimPrefix(m.ClientURL, "http://"))
		if err != nil {
			ps.close()
			return nil, err
		}
		ps.etcd = append(ps.etcd, p)
	}
	p, err := faultproxy.Start(c.s3Config().Endpoint)
	if err != nil {
		ps.close()
		return nil, err
	}
	ps.minio = p
	return ps, nil
}

// endpoints returns the etcd client URLs of the proxies.
func (ps *proxySet) endpoints() []string {
	out := make([]string, len(ps.etcd))
	for i, p := range ps.etcd {
		out[i] = p.URL()
	}
	return out
}

// s3 returns cfg with the endpoint replaced by the object store proxy's.
func (ps *proxySet) s3(cfg s3store.Config) s3store.Config {
	cfg.Endpoint = ps.minio.Addr()
	return cfg
}

// clear removes every fault and resets every connection, so clients
// reconnect on clean streams.
func (ps *proxySet) clear() {
	for _, p := range append(ps.etcd[:len(ps.etcd):len(ps.etcd)], ps.minio) {
		p.Set(faultproxy.Faults{})
		p.ResetAll()
	}
}

func (ps *proxySet) close() {
	for _, p := range ps.etcd {
		_ = p.Close()
	}
	if ps.minio != nil {
		_ = ps.minio.Close()
	}
}

// loseResponses applies a lost-response fault of the given variant to
// proxies for hold: 0 drops every response for hold and then resets every
// connection (requests sent meanwhile were delivered and may have applied);
// 1 drops the response of the next request only; 2 resets every connection
// at once. It returns a description.
func loseResponses(ctx context.Context, proxies []*faultproxy.Proxy, variant int, hold time.Duration) string {
	switch variant {
	case 0:
		for _, p := range proxies {
			p.Set(faultproxy.Faults{DropDownstream: true})
		}
		wait.Sleep(ctx, hold)
		n := 0
		for _, p := range proxies {
			p.Set(faultproxy.Faults{})
			n += p.ResetAll()
		}
		return fmt.Sprintf("dropped responses for %s on %d proxies, reset %d connections", hold, len(proxies), n)
	case 1:
		var fired []<-chan struct{}
		for _, p := range proxies {
			fired = append(fired, p.DropResponse(1, hold))
		}
		got := 0
		for _, ch := range fired {
			select {
			case <-ch:
				got++
			case <-time.After(hold + 2*time.Second):
			case <-ctx.Done():
			}
		}
		return fmt.Sprintf("dropped the next response on %d of %d proxies", got, len(proxies))
	default:
		n := 0
		for _, p := range proxies {
			n += p.ResetAll()
		}
		wait.Sleep(ctx, hold)
		return fmt.Sprintf("reset %d connections", n)
	}
}

// injectServer runs one server fault to its end (the restarts included) and
// returns what happened. proxies are every proxy set of the run.
func (c *Cluster) injectServer(ctx context.Context, f Fault, proxies []*proxySet) (target, detail string, err error) {
	switch f.Kind {
	case EtcdLostResponses:
		var ps []*faultproxy.Proxy
		for _, s := range proxies {
			ps = append(ps, s.etcd...)
		}
		return "etcd proxies", loseResponses(ctx, ps, f.Variant, f.Hold), nil
	case MinIOLostResponses, SeaweedFSLostResponses:
		var ps []*faultproxy.Proxy
		for _, s := range proxies {
			ps = append(ps, s.minio)
		}
		return c.storeKind() + " proxies", loseResponses(ctx, ps, f.Variant, f.Hold), nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch f.Kind {
	case EtcdKillMember, EtcdKillLeader:
		m := c.Etcd.Members[f.Target%len(c.Etcd.Members)]
		if leader, lerr := c.Etcd.Leader(ctx); lerr == nil {
			if f.Kind == EtcdKillLeader {
				m = leader
			} else if m == leader {
				m = c.Etcd.Members[(f.Target+1)%len(c.Etcd.Members)]
			}
		} else if f.Kind == EtcdKillLeader {
			detail = "no leader found; killed member " + m.Name + " instead"
		}
		m.Kill()
		wait.Sleep(ctx, f.Hold)
		return m.Name, detail, m.Restart(ctx)
	case EtcdPauseMember, EtcdPauseLeader, EtcdPauseFollower:
		m := c.Etcd.Members[f.Target%len(c.Etcd.Members)]
		leader, lerr := c.Etcd.Leader(ctx)
		switch {
		case lerr != nil && f.Kind != EtcdPauseMember:
			detail = "no leader found; paused member " + m.Name + " instead"
		case f.Kind == EtcdPauseLeader:
			m = leader
		case f.Kind == EtcdPauseFollower && m == leader:
			m = c.Etcd.Members[(f.Target+1)%len(c.Etcd.Members)]
		case f.Kind == EtcdPauseMember && m == leader:
			detail = "the leader"
		}
		return m.Name, detail, pause(ctx, m.Process, f.Hold)
	case MinIOKillNode:
		n := c.minioNode(f.Target)
		n.Kill()
		wait.Sleep(ctx, f.Hold)
		if err := n.Start(); err != nil {
			return n.Name, "", err
		}
		return n.Name, "", c.MinIO.WaitReady(ctx, time.Minute)
	case MinIOPauseNode:
		n := c.minioNode(f.Target)
		if err := pause(ctx, n.Process, f.Hold); err != nil {
			return n.Name, "", err
		}
		return n.Name, "", c.MinIO.WaitReady(ctx, time.Minute)
	case EtcdFullRestart:
		for _, m := range c.Etcd.Members {
			m.Kill()
		}
		wait.Sleep(ctx, f.Hold)
		var errs []error
		for _, m := range c.Etcd.Members {
			errs = append(errs, m.Start())
		}
		for _, m := range c.Etcd.Members {
			errs = append(errs, m.WaitReady(ctx, 60*time.Second))
		}
		return "all members", "", errors.Join(errs...)
	case MinIORestart:
		c.MinIO.Kill()
		wait.Sleep(ctx, f.Hold)
		return "minio", "", c.MinIO.Restart(ctx)
	case SeaweedFSRestart:
		c.SeaweedFS.Kill()
		wait.Sleep(ctx, f.Hold)
		return "seaweedfs", "", c.SeaweedFS.Restart(ctx)
	case SeaweedFSPauseVolume:
		v := c.SeaweedFS.Volume
		if err := pause(ctx, v, f.Hold); err != nil {
			return v.Name, "", err
		}
		return v.Name, "", c.SeaweedFS.WaitReady(ctx, time.Minute)
	case MinIODriveRemoved:
		d := c.MinIO.Drives[f.Target%len(c.MinIO.Drives)]
		if err := os.Rename(d, d+".removed"); err != nil {
			return d, "", err
		}
		wait.Sleep(ctx, f.Hold)
		if _, err := os.Stat(d); err == nil {
			// MinIO recreated the directory meanwhile: keep that copy aside.
			if err := os.Rename(d, fmt.Sprintf("%s.recreated-%d", d, time.Now().UnixNano())); err != nil {
				return d, "", err
			}
			detail = "MinIO had recreated the drive directory"
		}
		if err := os.Rename(d+".removed", d); err != nil {
			return filepath.Base(d), detail, err
		}
		// Healed once every node has its drives online again.
		return filepath.Base(d), detail, c.MinIO.WaitReady(ctx, time.Minute)
	}
	return "", "", fmt.Errorf("chaos: %s is not a server fault", f.Kind)
}

// minioNode returns the MinIO node a node fault of target hits: one of the
// nodes after the first, through which the clients' proxies reach the store
// (the one node of a single-node MinIO).
func (c *Cluster) minioNode(target int) *devstack.MinIONode {
	if len(c.MinIO.Nodes) == 1 {
		return c.MinIO.Nodes[0]
	}
	return c.MinIO.Nodes[1+target%(len(c.MinIO.Nodes)-1)]
}

// pause stops p (SIGSTOP) for hold, then continues it.
func pause(ctx context.Context, p *devstack.Process, hold time.Duration) error {
	if err := p.Pause(); err != nil {
		return err
	}
	wait.Sleep(ctx, hold)
	return p.Resume()
}

// clusterToken is the --initial-cluster-token devstack starts clusters
// with (EtcdOptions' default); a restored member must carry it.
const clusterToken = "fencepub-local"

// restoreRevisionBump is the --bump-revision of a restore: more than the
// revisions a run can write between a snapshot and its restore, so every
// revision after the restore is above every revision before it.
const restoreRevisionBump = 1_000_000

// saveSnapshot saves a snapshot of member target's data to path.
func (c *Cluster) saveSnapshot(ctx context.Context, target int, path string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.Etcd.Members[target%len(c.Etcd.Members)]
	return m.Name, m.SaveSnapshot(ctx, path)
}

// restore replaces the data of every member with the snapshot at path, the
// way the runbook restores a cluster: it kills every member, runs `etcdutl
// snapshot restore` for each with the cluster's membership and
// --bump-revision --mark-compacted (so revisions continue above every one
// handed out before and watchers re-sync instead of waiting), and starts
// the members again on their old URLs, waiting until they answer.
func (c *Cluster) restore(ctx context.Context, path string) error {
	bin, err := devstack.Binary("etcdutl")
	if err != nil {
		return err
	}
	var initial []string
	for _, m := range c.Etcd.Members {
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	return c.rebuild(ctx, 0, func(m *devstack.EtcdMember) error {
		if err := os.RemoveAll(m.DataDir); err != nil {
			return err
		}
		out, err := exec.CommandContext(ctx, bin, "snapshot", "restore", path,
			"--data-dir", m.DataDir, "--name", m.Name,
			"--initial-cluster", strings.Join(initial, ","), "--initial-advertise-peer-urls", m.PeerURL,
			"--initial-cluster-token", clusterToken,
			"--bump-revision", fmt.Sprint(restoreRevisionBump), "--mark-compacted",
		).CombinedOutput()
		if err != nil {
			return fmt.Errorf("chaos: etcdutl snapshot restore for %s: %w\n%s", m.Name, err, out)
		}
		return nil
	})
}

// replace replaces the cluster by an empty one, as an operator would after
// losing every member with no snapshot: it kills every member, wipes its
// data directory, waits hold, and starts the members again on their old
// URLs (they bootstrap a new cluster with the same membership and token),
// waiting until they answer. Revisions start again from 1.
func (c *Cluster) replace(ctx context.Context, hold time.Duration) error {
	return c.rebuild(ctx, hold, func(m *devstack.EtcdMember) error { return os.RemoveAll(m.DataDir) })
}

// rebuild kills every member, runs prepare on each (which writes its new
// data directory), waits hold and starts the members again, waiting until
// they answer.
func (c *Cluster) rebuild(ctx context.Context, hold time.Duration, prepare func(*devstack.EtcdMember) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.Etcd.Members {
		m.Kill()
	}
	for _, m := range c.Etcd.Members {
		if err := prepare(m); err != nil {
			return err
		}
	}
	wait.Sleep(ctx, hold)
	var errs []error
	for _, m := range c.Etcd.Members {
		errs = append(errs, m.Start())
	}
	for _, m := range c.Etcd.Members {
		errs = append(errs, m.WaitReady(ctx, time.Minute))
	}
	return errors.Join(errs...)
}
