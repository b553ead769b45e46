//go:build !unit

package termtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// buildCLI builds fencepub in its own module (two levels up) from this checkout into a temporary directory
// and returns its path.
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
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), errb.String(), 0
	case errors.As(err, &ee):
		return out.String(), errb.String(), ee.ExitCode()
	}
	t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, errb.String())
	return "", "", -1
}

// jsonLines decodes each line of stderr as one JSON log record with time,
// level and msg, failing t on any other line.
func jsonLines(t *testing.T, what, stderr string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSuffix(stderr, "\n"), "\n") {
		if line == "" && stderr == "" {
			break
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%s: stderr line is not JSON (%v): %q\nstderr:\n%s", what, err, line, stderr)
		}
		for _, k := range []string{"time", "level", "msg"} {
			if _, ok := r[k]; !ok {
				t.Fatalf("%s: record without %q: %q", what, k, line)
			}
		}
		recs = append(recs, r)
	}
	return recs
}
