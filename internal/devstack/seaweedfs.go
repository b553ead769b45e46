package devstack

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/objstore/s3store"
)

// SeaweedFSOptions configures a SeaweedFS server. The zero value is one
// `weed server` process (master, volume server, filer and S3 gateway in
// one) with fixed local credentials.
type SeaweedFSOptions struct {
	// SeparateVolume runs the volume server as its own `weed volume`
	// process (SeaweedFS.Volume) beside a `weed server -volume=false`
	// (master, filer and S3 gateway), so a fault can stall the data path
	// alone (the chaos runs pause it).
	SeparateVolume bool
	AccessKey      string // default "fencepub"
	SecretKey      string // default "fencepub-secret"
	Bucket         string // created at start; default "fencepub"
	// Port is a fixed S3 port (dev up); 0 takes a free one. The master,
	// volume and filer ports, and their gRPC ports, are always free ones.
	Port         int
	Detached     bool
	ReadyTimeout time.Duration // default 90 s
}

// SeaweedFS is a running SeaweedFS server serving the S3 API on loopback:
// the `weed server` process, and with SeparateVolume its volume server.
// Start, Stop, Kill and Exited cover both processes.
type SeaweedFS struct {
	*Process
	// Volume is the `weed volume` process (SeparateVolume), else nil.
	Volume *Process
	Dir    string
	// Config reaches the bucket through the S3 gateway.
	Config s3store.Config
}

// StartSeaweedFS starts `weed server` under dir with its S3 gateway (and,
// with SeparateVolume, `weed volume` on dir/volume registered with its
// master) and blocks until the gateway answers a bucket call (creating the
// bucket).
// Every one of its eight ports (HTTP and gRPC of the master, volume server,
// filer and S3 gateway) is a free loopback port, so several servers run side
// by side. The S3 identities file grants the one configured key pair every
// action.
//
// Errors: ErrNoBinary, a port or directory that cannot be had, a server that
// exits or is not ready within ReadyTimeout (with its log tail).
func StartSeaweedFS(ctx context.Context, dir string, opts SeaweedFSOptions) (*SeaweedFS, error) {
	bin, err := Binary("weed")
	if err != nil {
		return nil, err
	}
	if opts.AccessKey == "" {
		opts.AccessKey, opts.SecretKey = "fencepub", "fencepub-secret"
	}
	if opts.Bucket == "" {
		opts.Bucket = "fencepub"
	}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, err
	}
	ident, err := json.Marshal(map[string]any{"identities": []any{map[string]any{
		"name":        opts.AccessKey,
		"credentials": []any{map[string]string{"accessKey": opts.AccessKey, "secretKey": opts.SecretKey}},
		"actions":     []string{"Admin", "Read", "List", "Tagging", "Write"},
	}}})
	if err != nil {
		return nil, err
	}
	identPath := filepath.Join(dir, "identities.json")
	if err := os.WriteFile(identPath, ident, 0o600); err != nil {
		return nil, err
	}
	// A free port can be taken by another process before weed binds it:
	// start again on fresh ports when that is why it exited.
	for attempt := 1; ; attempt++ {
		s, err := startSeaweedFS(ctx, dir, bin, data, identPath, opts)
		if err == nil || attempt == portAttempts || !strings.Contains(err.Error(), "address already in use") {
			return s, err
		}
	}
}

// portAttempts bounds the starts of a server whose free port was taken
// before it bound it.
const portAttempts = 3

// masterNoGrowthFreeze turns off the master's freeze of volume growth when
// a volume server reports another cluster's topology id (its guard against
// master state loss). Servers started here are throwaway ones on recycled
// loopback ports: a volume server of another test's SeaweedFS, still
// retrying its killed master's port, can reach this master and would freeze
// its growth for good, so that no write succeeds (CI once met a master
// frozen this way at its first start).
const masterNoGrowthFreeze = "WEED_MASTER_VOLUME_GROWTH_FREEZE_ON_TOPOLOGY_MISMATCH=false"

// startSeaweedFS is one start of StartSeaweedFS on fresh free ports.
func startSeaweedFS(ctx context.Context, dir, bin, data, identPath string, opts SeaweedFSOptions) (*SeaweedFS, error) {
	var err error
	ports := make([]int, 8)
	for i := range ports {
		if i == 0 && opts.Port != 0 {
			ports[0] = opts.Port
			continue
		}
		if ports[i], err = FreePort(); err != nil {
			return nil, err
		}
	}
	p := func(i int) string { return strconv.Itoa(ports[i]) }
	s := &SeaweedFS{Dir: dir, Process: &Process{Name: "seaweedfs", LogPath: filepath.Join(dir, "weed.log"), bin: bin, detached: opts.Detached,
		env: []string{masterNoGrowthFreeze}}}
	s.args = []string{"server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-dir=" + data,
		"-s3", "-s3.port=" + p(0), "-s3.port.grpc=" + p(1), "-s3.config=" + identPath,
		"-master.port=" + p(2), "-master.port.grpc=" + p(3),
		"-filer.port=" + p(6), "-filer.port.grpc=" + p(7),
		// Small volumes: a test writes megabytes, and each volume file is
		// preallocated up to this size on some filesystems.
		"-master.volumeSizeLimitMB=64",
	}
	if opts.SeparateVolume {
		vdata := filepath.Join(dir, "volume")
		if err := os.MkdirAll(vdata, 0o755); err != nil {
			return nil, err
		}
		s.args = append(s.args, "-volume=false")
		s.Volume = &Process{Name: "seaweedfs-volume", LogPath: filepath.Join(dir, "volume.log"), bin: bin, detached: opts.Detached,
			args: []string{"volume", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-dir=" + vdata, "-max=0",
				"-port=" + p(4), "-port.grpc=" + p(5), "-master=127.0.0.1:" + p(2) + "." + p(3),
				// A stop is a stop: no 10 s of draining heartbeats first.
				"-preStopSeconds=0"}}
	} else {
		s.args = append(s.args, "-volume.port="+p(4), "-volume.port.grpc="+p(5), "-volume.max=0")
	}
	s.Config = s3store.Config{Endpoint: "127.0.0.1:" + p(0), AccessKey: opts.AccessKey, SecretKey: opts.SecretKey, Bucket: opts.Bucket}
	if err := startReady(ctx, s, cmp.Or(opts.ReadyTimeout, 90*time.Second)); err != nil {
		return nil, err
	}
	return s, nil
}

// Start starts the server and the volume server (SeparateVolume) where
// they are not running.
func (s *SeaweedFS) Start() error {
	if err := s.Process.Start(); err != nil {
		return err
	}
	if s.Volume != nil {
		return s.Volume.Start()
	}
	return nil
}

// Stop stops the volume server, then the server (SIGTERM, then SIGKILL
// after a grace).
func (s *SeaweedFS) Stop() {
	if s.Volume != nil {
		s.Volume.Stop()
	}
	s.Process.Stop()
}

// Kill kills both processes with SIGKILL and waits for them to exit.
func (s *SeaweedFS) Kill() {
	if s.Volume != nil {
		s.Volume.Kill()
	}
	s.Process.Kill()
}

// Exited reports whether either process has exited (or was stopped).
func (s *SeaweedFS) Exited() bool {
	return s.Process.Exited() || s.Volume != nil && s.Volume.Exited()
}

// Restart starts the stopped processes again on their data and blocks
// until the store is ready (WaitReady, 90 s).
func (s *SeaweedFS) Restart(ctx context.Context) error {
	if err := s.Start(); err != nil {
		return err
	}
	return s.WaitReady(ctx, 90*time.Second)
}

// WaitReady blocks until the bucket exists (creating it) and a create-only
// PUT is served, the server exits, or timeout passes. The bucket answers
// seconds before the filer's lock ring, which every conditional write takes,
// has a lock server: until then such a write waits and retries inside the
// server, and after a restart the ring takes seconds again. So readiness is
// a create-only PUT of a key new to this call answered (created, or refused
// as existing after an earlier attempt timed out): a refusal of a key that
// existed before does not prove that the ring serves (it is answered
// without it). The key is deleted afterwards.
func (s *SeaweedFS) WaitReady(ctx context.Context, timeout time.Duration) error {
	st, err := s3store.New(s.Config)
	if err != nil {
		return err
	}
	key := fmt.Sprintf("%s/%d-%d", readyPrefix, time.Now().UnixNano(), rand.Uint64())
	err = waitReady(ctx, s.Process, timeout, func(ctx context.Context) error {
		if err := st.EnsureBucket(ctx); err != nil {
			return fmt.Errorf("bucket %q on %s: %w", s.Config.Bucket, s.Config.Endpoint, err)
		}
		if _, err := objstore.PutSmallCreateOnly(ctx, st, key, []byte("ready"), "text/plain"); err != nil && !errors.Is(err, objstore.ErrExists) {
			return fmt.Errorf("create-only put on %s: %w", s.Config.Endpoint, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return errors.Join(st.Delete(ctx, []string{key})...)
}

// readyPrefix is where WaitReady writes its probe objects: outside every
// fencepub namespace (those are <prefix>/<domain>/...), so no domain sees
// them.
const readyPrefix = "_devstack/ready"

// Store returns a Store of the bucket.
func (s *SeaweedFS) Store() (*s3store.Store, error) { return s3store.New(s.Config) }

// The object stores StartStore can start (docs/object-stores.md).
const (
	StoreMinIO     = "minio"
	StoreSeaweedFS = "seaweedfs"
)

// StoreKinds lists the names StartStore accepts.
var StoreKinds = []string{StoreMinIO, StoreSeaweedFS}

// ObjectStore is a running S3-compatible server as the tests, the demo and
// `dev up` use it: its bucket's configuration, its log and a way to stop it.
type ObjectStore interface {
	// S3Config reaches the server's bucket (s3.* configuration keys).
	S3Config() s3store.Config
	// LogTail returns the last n bytes of the server's log.
	LogTail(n int64) string
	// Stop stops the server (SIGTERM, then SIGKILL after a grace).
	Stop()
}

// S3Config implements ObjectStore.
func (m *MinIO) S3Config() s3store.Config { return m.Config }

// S3Config implements ObjectStore.
func (s *SeaweedFS) S3Config() s3store.Config { return s.Config }

// StartStore starts one server of the named kind (StoreMinIO: a one-drive
// MinIO; StoreSeaweedFS: a `weed server`) under dir with default
// credentials and bucket, and waits until its bucket answers. detached
// servers outlive the caller (dev up). Errors: an unknown kind (naming the
// known ones), and those of StartMinIO and StartSeaweedFS.
func StartStore(ctx context.Context, dir, kind string, detached bool) (ObjectStore, error) {
	switch kind {
	case StoreMinIO, "":
		m, err := StartMinIO(ctx, dir, MinIOOptions{Detached: detached})
		if err != nil {
			return nil, err
		}
		return m, nil
	case StoreSeaweedFS:
		s, err := StartSeaweedFS(ctx, dir, SeaweedFSOptions{Detached: detached})
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	return nil, fmt.Errorf("devstack: unknown object store %q (known: %v)", kind, StoreKinds)
}
