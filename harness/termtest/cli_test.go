//go:build !unit

package termtest

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

// buildCLI builds fencepub, in its own module two levels up, into a
// temporary directory and returns its path.
func buildCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fencepub")
	if out, err := exec.Command("go", "-C", filepath.Join("..", ".."), "build", "-o", bin, "./cmd/fencepub").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// child runs bin with args and stdin and returns its stdout, stderr and
// exit code; it fails t when bin cannot run.
func child(t *testing.T, ctx context.Context, bin string, stdin *bytes.Reader, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	return testenv.RunCmd(t, cmd)
}
