package devstack

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// EtcdOptions configures an etcd cluster. The zero value is one member with
// production-like settings: periodic auto-compaction every hour and a 2 GiB
// backend quota.
type EtcdOptions struct {
	Members           int    // number of members; default 1
	AutoCompaction    string // --auto-compaction-retention; default "1h" (periodic)
	QuotaBackendBytes int64  // --quota-backend-bytes; default 2 GiB
	Detached          bool   // processes survive this one (dev up)
	ExtraArgs         []string
	ReadyTimeout      time.Duration // default 30 s
	ClusterToken      string        // default "fencepub-local"
	ListenClientPorts []int         // fixed client ports (dev up); default free ports
	ListenPeerPorts   []int
	// TLS, if set, serves the client URLs over HTTPS (peers stay on
	// plain HTTP on loopback).
	TLS *EtcdTLS
	// Hosts places member i on Hosts[i] (its client and peer URLs on that
	// address, its process in that namespace); missing ones are on
	// 127.0.0.1. The cluster's own clients reach every member from this
	// process.
	Hosts []Host
	// RootPassword, if set, enables etcd's authentication once the
	// cluster is up: user root with this password and role root. The
	// cluster's own clients (Client, readiness) then log in as root.
	RootPassword string
}

// EtcdTLS is the client-side TLS of an etcd cluster.
type EtcdTLS struct {
	CertFile, KeyFile string // server certificate and key (PEM) for 127.0.0.1
	// ClientCAFile (PEM) with ClientCertAuth: --client-cert-auth, so
	// every client must present a certificate this CA signed.
	ClientCAFile   string
	ClientCertAuth bool
	// Client is what the cluster's own clients (Client, readiness) use:
	// the CA trusted, and a client certificate with ClientCertAuth.
	Client *tls.Config
}

// Etcd is a running etcd cluster of separate member processes.
type Etcd struct {
	Dir     string
	Members []*EtcdMember

	access *etcdAccess
}

// EtcdMember is one etcd member process.
type EtcdMember struct {
	*Process
	DataDir   string
	ClientURL string
	PeerURL   string

	access *etcdAccess
}

// etcdAccess is how the cluster's own clients connect: TLS and, once auth
// is enabled, root's credentials.
type etcdAccess struct {
	tls                *tls.Config
	username, password string
}

// clientConfig is a client configuration for endpoints with access a: a
// 5 s dial timeout and etcd's logging silenced.
func (a *etcdAccess) clientConfig(endpoints []string) clientv3.Config {
	return clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: a.tls, Username: a.username, Password: a.password}
}

// StartEtcd starts an etcd cluster under dir (one subdirectory per member)
// and blocks until every member answers a linearizable read or ctx ends.
func StartEtcd(ctx context.Context, dir string, opts EtcdOptions) (*Etcd, error) {
	bin, err := Binary("etcd")
	if err != nil {
		return nil, err
	}
	n := max(opts.Members, 1)
	if opts.AutoCompaction == "" {
		opts.AutoCompaction = "1h"
	}
	if opts.QuotaBackendBytes == 0 {
		opts.QuotaBackendBytes = 2 << 30
	}
	if opts.ClusterToken == "" {
		opts.ClusterToken = "fencepub-local"
	}
	e := &Etcd{Dir: dir, access: &etcdAccess{}}
	scheme := "http://"
	if opts.TLS != nil {
		e.access.tls, scheme = opts.TLS.Client, "https://"
	}
	var initial []string
	for i := range n {
		cport, pport, err := ports(opts, i)
		if err != nil {
			return nil, err
		}
		name := fmt.Sprintf("etcd%d", i)
		mdir := filepath.Join(dir, name)
		if err := os.MkdirAll(mdir, 0o755); err != nil {
			return nil, err
		}
		h := hostAt(opts.Hosts, i)
		m := &EtcdMember{DataDir: filepath.Join(mdir, "data"), ClientURL: scheme + h.hostPort(cport), PeerURL: "http://" + h.hostPort(pport), access: e.access}
		m.Process = &Process{Name: name, LogPath: filepath.Join(mdir, "etcd.log"), bin: bin, detached: opts.Detached, netns: h.Netns}
		e.Members = append(e.Members, m)
		initial = append(initial, name+"="+m.PeerURL)
	}
	cluster := strings.Join(initial, ",")
	for _, m := range e.Members {
		m.args = append([]string{
			"--name", m.Name, "--data-dir", m.DataDir,
			"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL,
			"--listen-peer-urls", m.PeerURL, "--initial-advertise-peer-urls", m.PeerURL,
			"--initial-cluster", cluster, "--initial-cluster-state", "new",
			"--initial-cluster-token", opts.ClusterToken,
			"--auto-compaction-mode", "periodic", "--auto-compaction-retention", opts.AutoCompaction,
			"--quota-backend-bytes", fmt.Sprint(opts.QuotaBackendBytes),
			"--logger", "zap", "--log-level", "warn",
		}, opts.TLS.args()...)
		m.args = append(m.args, opts.ExtraArgs...)
		if err := m.Start(); err != nil {
			e.Stop()
			return nil, err
		}
	}
	timeout := opts.ReadyTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	for _, m := range e.Members {
		if err := m.WaitReady(ctx, timeout); err != nil {
			e.Stop()
			return nil, err
		}
	}
	if opts.RootPassword != "" {
		if err := e.enableAuth(ctx, opts.RootPassword); err != nil {
			e.Stop()
			return nil, err
		}
	}
	return e, nil
}

// args are etcd's client TLS flags for t (none for nil).
func (t *EtcdTLS) args() []string {
	if t == nil {
		return nil
	}
	a := []string{"--cert-file", t.CertFile, "--key-file", t.KeyFile}
	if t.ClientCertAuth {
		a = append(a, "--client-cert-auth", "--trusted-ca-file", t.ClientCAFile)
	}
	return a
}

// enableAuth creates user root with password and role root and enables
// authentication; from then on the cluster's own clients log in as root.
func (e *Etcd) enableAuth(ctx context.Context, password string) error {
	c, err := e.Client()
	if err != nil {
		return err
	}
	defer c.Close()
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := c.UserAdd(actx, "root", password); err != nil {
		return fmt.Errorf("devstack: etcd user add root: %w", err)
	}
	if _, err := c.UserGrantRole(actx, "root", "root"); err != nil {
		return fmt.Errorf("devstack: etcd grant root: %w", err)
	}
	if _, err := c.AuthEnable(actx); err != nil {
		return fmt.Errorf("devstack: etcd auth enable: %w", err)
	}
	e.access.username, e.access.password = "root", password
	return nil
}

func ports(opts EtcdOptions, i int) (client, peer int, err error) {
	if i < len(opts.ListenClientPorts) && i < len(opts.ListenPeerPorts) {
		return opts.ListenClientPorts[i], opts.ListenPeerPorts[i], nil
	}
	if client, err = FreePort(); err != nil {
		return 0, 0, err
	}
	peer, err = FreePort()
	return client, peer, err
}

// Endpoints returns every member's client URL.
func (e *Etcd) Endpoints() []string {
	out := make([]string, len(e.Members))
	for i, m := range e.Members {
		out[i] = m.ClientURL
	}
	return out
}

// Client returns a new client for every member's endpoint, with the
// cluster's TLS and, when auth is enabled, logged in as root; the caller
// closes it.
func (e *Etcd) Client() (*clientv3.Client, error) {
	return clientv3.New(e.access.clientConfig(e.Endpoints()))
}

// NewEtcdClient returns a client with a 5 s dial timeout and etcd's logging
// silenced (servers write their own logs).
func NewEtcdClient(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New((&etcdAccess{}).clientConfig(endpoints))
}

// Stop stops every member (SIGTERM, then SIGKILL after a grace).
func (e *Etcd) Stop() {
	for _, m := range e.Members {
		m.Stop()
	}
}

// Leader returns the member that is the raft leader, asking each running
// member for its status.
func (e *Etcd) Leader(ctx context.Context) (*EtcdMember, error) {
	c, err := e.Client()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	for _, m := range e.Members {
		if m.Exited() {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := c.Status(sctx, m.ClientURL)
		cancel()
		if err == nil && st.Header.MemberId == st.Leader {
			return m, nil
		}
	}
	return nil, fmt.Errorf("devstack: no etcd leader found")
}

// Follower returns a running member that is not the raft leader (Leader's
// errors; an error when every running member leads, a one-member cluster).
func (e *Etcd) Follower(ctx context.Context) (*EtcdMember, error) {
	leader, err := e.Leader(ctx)
	if err != nil {
		return nil, err
	}
	for _, m := range e.Members {
		if m != leader && !m.Exited() {
			return m, nil
		}
	}
	return nil, fmt.Errorf("devstack: no running etcd follower")
}

// Restart starts a stopped or killed member again on its data directory and
// waits until it answers.
func (m *EtcdMember) Restart(ctx context.Context) error {
	if err := m.Start(); err != nil {
		return err
	}
	return m.WaitReady(ctx, 30*time.Second)
}

// WaitReady blocks until the member answers a linearizable read through its
// own endpoint, or timeout.
func (m *EtcdMember) WaitReady(ctx context.Context, timeout time.Duration) error {
	c, err := clientv3.New(m.access.clientConfig([]string{m.ClientURL}))
	if err != nil {
		return err
	}
	defer c.Close()
	return waitReady(ctx, m.Process, timeout, func(ctx context.Context) error {
		_, err := c.Get(ctx, "fencepub-readiness-probe")
		return err
	})
}
