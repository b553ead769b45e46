package partition

import (
	"os"
	"os/exec"
	"testing"
)

// DeselectEnv is the environment variable that deselects the tests that
// need network namespaces: FENCEPUB_NETNS=0 skips them (say so where the
// suite runs without root). Any other value, or none, runs them.
const DeselectEnv = "FENCEPUB_NETNS"

// FullEnv selects the full partition suite (`make partitions`):
// FENCEPUB_PARTITIONS=full runs every scenario at its full length and the
// soak; unset, the smoke subset of `make test` runs.
const FullEnv = "FENCEPUB_PARTITIONS"

// Require makes t a test that builds a Net: it skips t when DeselectEnv is
// "0", and otherwise fails it, with what is missing and how to deselect,
// unless this process is root and has ip and iptables in PATH. It never
// skips silently.
func Require(t testing.TB) {
	t.Helper()
	if os.Getenv(DeselectEnv) == "0" {
		t.Skip("partition tests deselected: " + DeselectEnv + "=0")
	}
	if !Root() {
		t.Fatal("partition tests need root (network namespaces, iptables); run as root, or deselect them with " + DeselectEnv + "=0")
	}
	for _, bin := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("partition tests need %s in PATH (`make iptables` installs iptables; iproute2 has ip), or deselect them with %s=0", bin, DeselectEnv)
		}
	}
}
