//go:build !unit

package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

// completions runs `fencepub __complete args...` and returns the offered
// values (the directive line dropped).
func completions(t *testing.T, args ...string) []string {
	t.Helper()
	out, errs, code := runCLI(t, append([]string{"__complete"}, args...)...)
	if code != 0 {
		t.Fatalf("__complete %v: exit %d\n%s\n%s", args, code, out, errs)
	}
	var vals []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(l, ":") && l != "" {
			vals = append(vals, strings.SplitN(l, "\t", 2)[0])
		}
	}
	return vals
}

// TestCompletion: resource names complete from etcd (for --resource of any
// command and `resource delete`'s argument, filtered by the prefix typed),
// and -o, --format and --log-format complete their values.
func TestCompletion(t *testing.T) {
	conn, _, _ := testenv.CLIStack(t, "complete")
	body := filepath.Join(t.TempDir(), "body")
	if err := os.WriteFile(body, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, res := range []string{"alpha", "alps", "beta"} {
		runWant(t, 0, append([]string{"publish", "--resource", res, "--owner", "me", "--ttl", "10s", "--key", "k", "--file", body}, conn...)...)
	}
	if got := completions(t, append(append([]string{"pointer"}, conn...), "--resource", "")...); !slices.Equal(got, []string{"alpha", "alps", "beta"}) {
		t.Fatalf("pointer --resource: %q", got)
	}
	if got := completions(t, append(append([]string{"verify"}, conn...), "--resource", "al")...); !slices.Equal(got, []string{"alpha", "alps"}) {
		t.Fatalf("verify --resource al: %q", got)
	}
	if got := completions(t, append(append([]string{"resource", "delete"}, conn...), "b")...); !slices.Equal(got, []string{"beta"}) {
		t.Fatalf("resource delete b: %q", got)
	}
	if got := completions(t, "pointer", "-o", ""); !slices.Equal(got, []string{"text", "json"}) {
		t.Fatalf("pointer -o: %q", got)
	}
	if got := completions(t, "run", "-o", ""); !slices.Equal(got, []string{"text", "json"}) {
		t.Fatalf("run -o: %q", got)
	}
	if got := completions(t, "version", "--log-format", ""); !slices.Equal(got, []string{"text", "json"}) {
		t.Fatalf("--log-format: %q", got)
	}
}
