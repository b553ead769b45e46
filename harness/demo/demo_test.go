//go:build !unit

package demo

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/devstack"
)

// userEnv is what a user's shell may hold: settings that would send the
// demo's children to another etcd and domain.
var userEnv = map[string]string{"FENCEPUB_ETCD_ENDPOINTS": "127.0.0.1:1", "FENCEPUB_NAMESPACE_DOMAIN": "x"}

// serverBins returns a fresh bin directory holding links to etcd and minio.
func serverBins(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	for _, s := range []string{"etcd", "minio"} {
		p, err := devstack.Binary(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(p, filepath.Join(bin, s)); err != nil {
			t.Fatal(err)
		}
	}
	return bin
}

// TestDemoEndToEnd runs the demo's whole scenario on real servers with a
// smaller source tree, with FENCEPUB_* settings in the environment that the
// children must not see: every check it makes must hold.
func TestDemoEndToEnd(t *testing.T) {
	for k, v := range userEnv {
		t.Setenv(k, v)
	}
	bin := serverBins(t)
	// Built in the main module (two levels up), whose go.sum covers them.
	for ex, pkg := range map[string]string{"batch-publisher": "./examples/batch-publisher", "reader-service": "./examples/reader-service", "fencepub": "./cmd/fencepub"} {
		out, err := exec.Command("go", "-C", filepath.Join("..", ".."), "build", "-o", filepath.Join(bin, ex), pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("build %s: %v\n%s", ex, err, out)
		}
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sum, err := Run(ctx, Options{BinDir: bin, Src: "..", TTL: 2 * time.Second, Dir: t.TempDir(), Out: &out})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Published) != 2 || sum.StaleRejected != 1 || sum.OrphansCollected != 1 || len(sum.Checks) < 10 {
		t.Fatalf("summary %+v", sum)
	}
}

// A child that fails ends the demo at once with its exit status and
// stderr, and children never see the user's FENCEPUB_* variables.
func TestDemoChildFailureReported(t *testing.T) {
	for k, v := range userEnv {
		t.Setenv(k, v)
	}
	bin := serverBins(t)
	scripts := map[string]string{
		"batch-publisher": "#!/bin/sh\nenv | grep '^FENCEPUB_' >&2\necho 'batch-publisher: acquire: etcd unreachable' >&2\nexit 3\n",
		"reader-service":  "#!/bin/sh\nexec sleep 600\n",
		"fencepub":        "#!/bin/sh\nexit 1\n", // never reached: the workers fail first
	}
	for name, script := range scripts {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	_, err := Run(ctx, Options{BinDir: bin, Src: "..", Dir: t.TempDir(), Out: io.Discard})
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "etcd unreachable") || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("demo with failing workers: %v; want the worker's stderr and exit status", err)
	}
	if strings.Contains(err.Error(), "FENCEPUB_") {
		t.Fatalf("a child saw the user's FENCEPUB_* variables: %v", err)
	}
	if took > 45*time.Second {
		t.Fatalf("the demo took %s to report a failed child", took)
	}
	t.Logf("after %s: %v", took.Round(time.Millisecond), err)
}
