package exampletest

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBatchPublisherWaitFlags: -max-wait is the lease wait, as the CLI
// spells it; the older -wait still works with a deprecation warning, and
// giving both is a usage error (exit 2). Each run stops at its config file,
// which does not exist, so no server is needed.
func TestBatchPublisherWaitFlags(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "batch-publisher")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/fencepub/fencepub/examples/batch-publisher").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	for _, c := range []struct {
		args     []string
		code     int
		want     string
		warnings bool
	}{
		{[]string{"-max-wait", "3s"}, 1, "missing.yaml", false},
		{[]string{"-wait", "3s"}, 1, "-wait is deprecated and will be removed: use -max-wait", true},
		{[]string{"-wait", "3s", "-max-wait", "3s"}, 2, "give -max-wait, not also the deprecated -wait", false},
	} {
		out, err := exec.Command(bin, append(c.args, "-config", missing)...).CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != c.code || !strings.Contains(string(out), c.want) || strings.Contains(string(out), "deprecated and will be removed") != c.warnings {
			t.Errorf("batch-publisher %s: exit %d, want %d and %q (warning %v):\n%s", strings.Join(c.args, " "), code, c.code, c.want, c.warnings, out)
		}
	}
}
