package demo

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/localstack"
)

// TestDemoEndToEnd runs the demo's whole scenario on real servers with a
// smaller source tree: every check it makes must hold.
func TestDemoEndToEnd(t *testing.T) {
	bin := t.TempDir()
	for _, s := range []string{"etcd", "minio"} {
		p, err := localstack.Binary(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(p, filepath.Join(bin, s)); err != nil {
			t.Fatal(err)
		}
	}
	for _, ex := range []string{"batch-publisher", "reader-service"} {
		out, err := exec.Command("go", "build", "-o", filepath.Join(bin, ex), "../../examples/"+ex).CombinedOutput()
		if err != nil {
			t.Fatalf("build %s: %v\n%s", ex, err, out)
		}
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sum, err := Run(ctx, Options{BinDir: bin, Src: "../../internal", TTL: 2 * time.Second, Dir: t.TempDir(), Out: &out})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Published) != 2 || sum.StaleRejected != 1 || sum.OrphansCollected != 1 || len(sum.Checks) < 10 {
		t.Fatalf("summary %+v", sum)
	}
}
