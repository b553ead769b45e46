package localstack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/fencepub/fencepub/internal/objstore"
)

// MinIOOptions configures a MinIO server. The zero value is one drive with
// fixed local credentials.
type MinIOOptions struct {
	Drives       int    // 1 (default) or 4 for an erasure set on one disk
	AccessKey    string // default "fencepub"
	SecretKey    string // default "fencepub-secret"
	Bucket       string // created at start; default "fencepub"
	Port         int    // fixed port (dev up); default a free port
	Detached     bool
	ReadyTimeout time.Duration // default 60 s
}

// MinIO is a running MinIO server.
type MinIO struct {
	*Process
	Dir    string
	Config objstore.Config
	Drives []string
}

// StartMinIO starts MinIO under dir and blocks until the bucket exists: the
// readiness check is a real bucket call, not the health URL.
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
	port := opts.Port
	if port == 0 {
		if port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	cport, err := FreePort()
	if err != nil {
		return nil, err
	}
	m := &MinIO{Dir: dir}
	drives := max(opts.Drives, 1)
	var volume string
	if drives == 1 {
		volume = filepath.Join(dir, "data")
		m.Drives = []string{volume}
	} else {
		volume = filepath.Join(dir, "d{1..."+strconv.Itoa(drives)+"}")
		for i := 1; i <= drives; i++ {
			m.Drives = append(m.Drives, filepath.Join(dir, "d"+strconv.Itoa(i)))
		}
	}
	for _, d := range m.Drives {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	m.Config = objstore.Config{Endpoint: addr, AccessKey: opts.AccessKey, SecretKey: opts.SecretKey, Bucket: opts.Bucket}
	m.Process = &Process{
		Name: "minio", LogPath: filepath.Join(dir, "minio.log"), bin: bin, detached: opts.Detached,
		args: []string{"server", "--quiet", "--address", addr, "--console-address", "127.0.0.1:" + strconv.Itoa(cport), volume},
		env: []string{
			"MINIO_ROOT_USER=" + opts.AccessKey, "MINIO_ROOT_PASSWORD=" + opts.SecretKey,
			"MINIO_BROWSER=off", "MINIO_UPDATE=off",
			// Several drives on one disk: without CI/CD mode MinIO waits
			// forever for "drive not found".
			"MINIO_CI_CD=1",
		},
	}
	if err := m.Start(); err != nil {
		return nil, err
	}
	timeout := opts.ReadyTimeout
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	if err := m.WaitReady(ctx, timeout); err != nil {
		m.Stop()
		return nil, err
	}
	return m, nil
}

// Store returns an objstore.Store for the server's bucket.
func (m *MinIO) Store() (*objstore.Store, error) { return objstore.New(m.Config) }

// WaitReady blocks until the bucket exists (creating it), the server exits,
// or timeout.
func (m *MinIO) WaitReady(ctx context.Context, timeout time.Duration) error {
	s, err := m.Store()
	if err != nil {
		return err
	}
	return waitReady(ctx, m.Process, timeout, func(ctx context.Context) error {
		if err := s.EnsureBucket(ctx); err != nil {
			return fmt.Errorf("bucket %q: %w", m.Config.Bucket, err)
		}
		return nil
	})
}

// Restart starts a stopped server again on its drives and waits until ready.
func (m *MinIO) Restart(ctx context.Context) error {
	if err := m.Start(); err != nil {
		return err
	}
	return m.WaitReady(ctx, 60*time.Second)
}
