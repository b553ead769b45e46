package devstack

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fencepub/fencepub/internal/objstore/s3store"
)

// MinIOOptions configures a MinIO deployment. The zero value is one server
// process with one drive and fixed local credentials.
type MinIOOptions struct {
	// Nodes is the number of server processes of a distributed MinIO on
	// loopback (one erasure set over every node's drives); default 1.
	Nodes int
	// Drives is the drives per node: default 1 for a single node (4 gives
	// an erasure set on one node) and 2 for several nodes. Every drive is a
	// directory on the same disk (MINIO_CI_CD mode).
	Drives    int
	AccessKey string // default "fencepub"
	SecretKey string // default "fencepub-secret"
	Bucket    string // created at start; default "fencepub"
	// Ports are fixed S3 ports, one per node (dev up); missing ones are
	// free ports.
	Ports        []int
	Detached     bool
	ReadyTimeout time.Duration // default 60 s
	// Hosts places node i on Hosts[i] (its S3 and console addresses on
	// that address, its process in that namespace); missing ones are on
	// 127.0.0.1. Readiness is checked from this process.
	Hosts []Host
	// TLS, when set, makes every node serve HTTPS with this certificate.
	TLS *MinIOTLS
}

// MinIOTLS is the server certificate of a MinIO serving HTTPS (PEM files,
// copied into each node's --certs-dir as public.crt and private.key) and
// the CA that verifies it, which Config trusts (s3.tls.ca).
type MinIOTLS struct {
	CertFile, KeyFile, CAFile string
}

// MinIO is a running MinIO deployment of one or more server processes.
type MinIO struct {
	Dir string
	// Config reaches the bucket through the first node; every node serves
	// the same buckets (Endpoints lists them all).
	Config s3store.Config
	// Drives is every drive directory of every node.
	Drives []string
	Nodes  []*MinIONode
}

// MinIONode is one MinIO server process.
type MinIONode struct {
	*Process
	Endpoint string // host:port of its S3 API
	Drives   []string
}

// StartMinIO starts MinIO under dir and blocks until every node answers a
// bucket call (creating the bucket): the health URL answers before the
// object layer is ready, so it is not the readiness check.
//
// A single node serves dir/data (one drive) or dir/d1..dN as an erasure set.
// Several nodes serve dir/n<i>/d<j>, named to every node as an explicit list
// of http://127.0.0.1:<port>/<drive> endpoints: MinIO's {a...b} expansion
// would pair every port with every node's path. Inside a container MinIO
// refuses loopback peers of a distributed setup until told which endpoints
// are its own, so each node gets _MINIO_SERVER_LOCAL=<its host:port>
// (ignored outside containers).
//
// Errors: ErrNoBinary, a port or directory that cannot be had, a node that
// exits or is not ready within ReadyTimeout (with its log tail).
func StartMinIO(ctx context.Context, dir string, opts MinIOOptions) (*MinIO, error) {
	bin, err := Binary("minio")
	if err != nil {
		return nil, err
	}
	if opts.AccessKey == "" {
		opts.AccessKey, opts.SecretKey = "fencepub", "fencepub-secret"
	}
	if opts.Bucket == "" {
		opts.Bucket = "fencepub"
	}
	nodes := max(opts.Nodes, 1)
	drives := opts.Drives
	if drives <= 0 {
		drives = 1
		if nodes > 1 {
			drives = 2
		}
	}
	m := &MinIO{Dir: dir}
	for i := range nodes {
		port := 0
		if i < len(opts.Ports) {
			port = opts.Ports[i]
		}
		if port == 0 {
			if port, err = FreePort(); err != nil {
				return nil, err
			}
		}
		h := hostAt(opts.Hosts, i)
		n := &MinIONode{Endpoint: h.hostPort(port)}
		name, ndir := "minio", dir
		if nodes > 1 {
			name, ndir = fmt.Sprintf("minio%d", i), filepath.Join(dir, fmt.Sprintf("n%d", i+1))
		}
		switch {
		case nodes == 1 && drives == 1:
			n.Drives = []string{filepath.Join(ndir, "data")}
		default:
			for j := 1; j <= drives; j++ {
				n.Drives = append(n.Drives, filepath.Join(ndir, "d"+strconv.Itoa(j)))
			}
		}
		for _, d := range n.Drives {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return nil, err
			}
		}
		n.Process = &Process{Name: name, LogPath: filepath.Join(ndir, "minio.log"), bin: bin, detached: opts.Detached, netns: h.Netns}
		m.Nodes = append(m.Nodes, n)
		m.Drives = append(m.Drives, n.Drives...)
	}
	scheme := "http://"
	if opts.TLS != nil {
		scheme = "https://"
	}
	var volumes []string
	switch {
	case nodes > 1:
		for _, n := range m.Nodes {
			for _, d := range n.Drives {
				volumes = append(volumes, scheme+n.Endpoint+d)
			}
		}
	case drives > 1:
		volumes = []string{filepath.Join(dir, "d{1..."+strconv.Itoa(drives)+"}")}
	default:
		volumes = m.Drives
	}
	for i, n := range m.Nodes {
		cport, err := FreePort()
		if err != nil {
			return nil, err
		}
		n.args = []string{"server", "--quiet", "--address", n.Endpoint, "--console-address", hostAt(opts.Hosts, i).hostPort(cport)}
		if opts.TLS != nil {
			certs := filepath.Join(filepath.Dir(n.LogPath), "certs")
			if err := writeCerts(certs, opts.TLS); err != nil {
				return nil, err
			}
			n.args = append(n.args, "--certs-dir", certs)
		}
		n.args = append(n.args, volumes...)
		n.env = []string{
			"MINIO_ROOT_USER=" + opts.AccessKey, "MINIO_ROOT_PASSWORD=" + opts.SecretKey,
			"MINIO_BROWSER=off", "MINIO_UPDATE=off",
			// Several drives on one disk: without CI/CD mode MinIO waits
			// forever for "drive not found".
			"MINIO_CI_CD=1",
		}
		if nodes > 1 {
			n.env = append(n.env, "_MINIO_SERVER_LOCAL="+n.Endpoint)
		}
	}
	m.Config = s3store.Config{Endpoint: m.Nodes[0].Endpoint, AccessKey: opts.AccessKey, SecretKey: opts.SecretKey, Bucket: opts.Bucket}
	if opts.TLS != nil {
		m.Config.Endpoint = scheme + m.Config.Endpoint
		m.Config.TLS.CA = opts.TLS.CAFile
	}
	if err := startReady(ctx, m, cmp.Or(opts.ReadyTimeout, 60*time.Second)); err != nil {
		return nil, err
	}
	return m, nil
}

// server is a store deployment startReady can start: MinIO or SeaweedFS.
type server interface {
	Start() error
	Stop()
	WaitReady(ctx context.Context, timeout time.Duration) error
}

// startReady starts s and waits up to timeout until it is ready; on a
// failure of either it stops s and returns the error.
func startReady(ctx context.Context, s server, timeout time.Duration) error {
	err := s.Start()
	if err == nil {
		err = s.WaitReady(ctx, timeout)
	}
	if err != nil {
		s.Stop()
	}
	return err
}

// writeCerts writes t's certificate and key into dir as MinIO's
// --certs-dir expects them.
func writeCerts(dir string, t *MinIOTLS) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for src, dst := range map[string]string{t.CertFile: "public.crt", t.KeyFile: "private.key"} {
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, dst), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// Endpoints returns every node's host:port.
func (m *MinIO) Endpoints() []string {
	out := make([]string, len(m.Nodes))
	for i, n := range m.Nodes {
		out[i] = n.Endpoint
	}
	return out
}

// Store returns an objstore.Store for the bucket through the first node.
func (m *MinIO) Store() (*s3store.Store, error) { return s3store.New(m.Config) }

// Start starts every node that is not running.
func (m *MinIO) Start() error {
	for _, n := range m.Nodes {
		if err := n.Start(); err != nil {
			return err
		}
	}
	return nil
}

// Stop stops every node (SIGTERM, then SIGKILL after a grace).
func (m *MinIO) Stop() {
	for _, n := range m.Nodes {
		n.Stop()
	}
}

// Kill kills every node with SIGKILL and waits for them to exit.
func (m *MinIO) Kill() {
	for _, n := range m.Nodes {
		n.Kill()
	}
}

// Exited reports whether any node has exited on its own (or was stopped).
func (m *MinIO) Exited() bool {
	for _, n := range m.Nodes {
		if n.Exited() {
			return true
		}
	}
	return false
}

// LogTail returns the last n bytes of every node's log, each headed by the
// node's name when there are several.
func (m *MinIO) LogTail(n int64) string {
	if len(m.Nodes) == 1 {
		return m.Nodes[0].LogTail(n)
	}
	var b strings.Builder
	for _, node := range m.Nodes {
		fmt.Fprintf(&b, "--- %s ---\n%s\n", node.Name, node.LogTail(n))
	}
	return b.String()
}

// WaitReady blocks until the bucket exists (creating it through the first
// node) and every node answers a bucket call, a node exits, or timeout.
// With several nodes served over HTTP it also waits until every node says
// the cluster would keep its write quorum without that node
// (/minio/health/cluster?maintenance=true answers 200): the drives of every
// node are back online, not only its S3 API, so a fault that follows a
// restart does not meet a cluster still short of drives.
func (m *MinIO) WaitReady(ctx context.Context, timeout time.Duration) error {
	for i, n := range m.Nodes {
		cfg := m.Config
		cfg.Endpoint = strings.Replace(m.Config.Endpoint, m.Nodes[0].Endpoint, n.Endpoint, 1)
		s, err := s3store.New(cfg)
		if err != nil {
			return err
		}
		check := s.CheckBucket
		if i == 0 {
			check = s.EnsureBucket
		}
		if err := waitReady(ctx, n.Process, timeout, func(ctx context.Context) error {
			if err := check(ctx); err != nil {
				return fmt.Errorf("bucket %q on %s: %w", m.Config.Bucket, n.Endpoint, err)
			}
			return nil
		}); err != nil {
			return err
		}
	}
	if len(m.Nodes) < 2 || m.Config.TLS.CA != "" {
		return nil
	}
	for _, n := range m.Nodes {
		url := "http://" + n.Endpoint + "/minio/health/cluster?maintenance=true"
		if err := waitReady(ctx, n.Process, timeout, func(ctx context.Context) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: cluster health with this node down: %s", n.Endpoint, resp.Status)
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// Restart starts every stopped node again on its drives and waits until
// ready.
func (m *MinIO) Restart(ctx context.Context) error {
	if err := m.Start(); err != nil {
		return err
	}
	return m.WaitReady(ctx, 60*time.Second)
}
