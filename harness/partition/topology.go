package partition

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/fencepub/fencepub/harness/chaos"
	"github.com/fencepub/fencepub/internal/devstack"
)

// Topology is the partition suite's servers and worker hosts on a Net: a
// 3-member etcd cluster (hosts e0-e2), a MinIO of one or more nodes (hosts
// m0, m1, ...) and one host per worker process (w0, w1, ...), each host a
// namespace of its own. It is a
// chaos.Network: chaos runs on it start their worker processes on the
// worker hosts and cut the links between them and the servers.
type Topology struct {
	Net     *Net
	Etcd    []Host
	Store   []Host // the MinIO nodes'
	Workers []Host
	// Cluster is the servers, for chaos.Config.Cluster.
	Cluster *chaos.Cluster
}

var _ chaos.Network = (*Topology)(nil)

// Options shapes a Topology: how many worker hosts, and how many MinIO
// nodes (default 1; chaos.Topology's 4 for a distributed MinIO).
type Options struct {
	Workers    int
	MinIONodes int
}

// Start builds a Net named prefix on subnet (New), adds the hosts of opts
// and starts the servers on theirs through internal/devstack, their data
// and logs under dir. It blocks until every server answers. On error
// nothing it made is left behind. Errors: New's, devstack's.
func Start(ctx context.Context, prefix string, subnet netip.Prefix, dir string, opts Options) (*Topology, error) {
	n, err := New(prefix, subnet)
	if err != nil {
		return nil, err
	}
	t := &Topology{Net: n}
	fail := func(err error) (*Topology, error) {
		return nil, errors.Join(err, t.Stop())
	}
	add := func(name string) Host {
		h, herr := n.AddHost(name)
		err = errors.Join(err, herr)
		return h
	}
	for i := range 3 {
		t.Etcd = append(t.Etcd, add(fmt.Sprintf("e%d", i)))
	}
	for i := range max(opts.MinIONodes, 1) {
		t.Store = append(t.Store, add(fmt.Sprintf("m%d", i)))
	}
	for i := range opts.Workers {
		t.Workers = append(t.Workers, add(fmt.Sprintf("w%d", i)))
	}
	if err != nil {
		return fail(err)
	}
	var eh []devstack.Host
	for _, h := range t.Etcd {
		eh = append(eh, devstack.Host{Addr: h.Addr.String(), Netns: h.Netns})
	}
	e, err := devstack.StartEtcd(ctx, filepath.Join(dir, "etcd"), devstack.EtcdOptions{Members: len(t.Etcd), Hosts: eh})
	if err != nil {
		return fail(err)
	}
	t.Cluster = &chaos.Cluster{Etcd: e}
	var mh []devstack.Host
	for _, h := range t.Store {
		mh = append(mh, devstack.Host{Addr: h.Addr.String(), Netns: h.Netns})
	}
	m, err := devstack.StartMinIO(ctx, filepath.Join(dir, "minio"), devstack.MinIOOptions{Nodes: len(t.Store), Hosts: mh})
	if err != nil {
		return fail(err)
	}
	t.Cluster.MinIO = m
	return t, nil
}

// Stop stops the servers and deletes the Net.
func (t *Topology) Stop() error {
	if t.Cluster != nil {
		if t.Cluster.MinIO != nil {
			t.Cluster.MinIO.Stop()
		}
		t.Cluster.Etcd.Stop()
	}
	return t.Net.Close()
}

// WorkerCommand runs argv on worker host slot.
func (t *Topology) WorkerCommand(slot int, argv []string) []string {
	return t.Workers[slot%len(t.Workers)].Command(argv)
}

// CutWorker cuts worker host slot from the etcd hosts (store false) or
// the MinIO nodes' hosts; with oneWay only the packets towards the worker are
// dropped.
func (t *Topology) CutWorker(slot int, store, oneWay bool) (func() error, error) {
	servers := t.Etcd
	if store {
		servers = t.Store
	}
	return t.Net.Cut(servers, []Host{t.Workers[slot%len(t.Workers)]}, oneWay)
}

// DegradeWorker makes the link between worker host slot and the etcd
// hosts (store false) or the MinIO nodes' hosts lose a share loss of its packets
// (none for 0) and delay the others by delay (none for 0) each way.
func (t *Topology) DegradeWorker(slot int, store bool, loss float64, delay time.Duration) (func() error, error) {
	w := t.Workers[slot%len(t.Workers)]
	servers := t.Etcd
	if store {
		servers = t.Store
	}
	var heals []func() error
	heal := func() error {
		var errs []error
		for i := len(heals) - 1; i >= 0; i-- {
			errs = append(errs, heals[i]())
		}
		return errors.Join(errs...)
	}
	if loss > 0 {
		h, err := t.Net.Loss([]Host{w}, servers, loss)
		if err != nil {
			return nil, err
		}
		heals = append(heals, h)
	}
	if delay > 0 {
		h, err := t.Net.Delay(w, servers, delay)
		if err != nil {
			return nil, errors.Join(err, heal())
		}
		heals = append(heals, h)
	}
	return heal, nil
}

// IsolateMember cuts etcd host member and worker host slot from the other
// etcd hosts.
func (t *Topology) IsolateMember(member, slot int) (func() error, error) {
	var others []Host
	for i, h := range t.Etcd {
		if i != member {
			others = append(others, h)
		}
	}
	return t.Net.Cut([]Host{t.Etcd[member], t.Workers[slot%len(t.Workers)]}, others, false)
}
