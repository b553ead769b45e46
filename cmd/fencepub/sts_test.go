//go:build !unit

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

// TestSTSCredentials gets temporary keys from MinIO's STS (AssumeRole,
// through minio-go, with the worker policy as the session policy) and
// publishes and reads with them from the environment under
// s3.credentials: auto. Without AWS_SESSION_TOKEN the same keys are refused
// (exit 2), so the session token is what the requests carry.
func TestSTSCredentials(t *testing.T) {
	conn, _, m := testenv.CLIStack(t, "fencepub")
	ns, err := layout.NewNamespace("fencepub", "d1")
	if err != nil {
		t.Fatal(err)
	}
	useKeys(t, policyKeys(t, m, ns.Root(), "worker"))
	if out := runWant(t, 0, append([]string{"config", "show"}, conn...)...); !strings.Contains(out, "auto (from environment AWS_ACCESS_KEY_ID)") {
		t.Fatalf("config show does not name the environment as the key source:\n%s", out)
	}
	body := filepath.Join(t.TempDir(), "body.txt")
	if err := os.WriteFile(body, []byte("through sts"), 0o644); err != nil {
		t.Fatal(err)
	}
	runWant(t, 0, append([]string{"publish", "--resource", "job", "--owner", "w", "--ttl", "10s", "--key", "k1", "--file", body}, conn...)...)
	if out := runWant(t, 0, append([]string{"read", "--resource", "job"}, conn...)...); !strings.Contains(out, "through sts") {
		t.Fatalf("read with temporary keys: %q", out)
	}

	t.Setenv("AWS_SESSION_TOKEN", "")
	if out := runWant(t, exitcode.Usage, append([]string{"publish", "--resource", "job", "--owner", "w", "--ttl", "10s", "--key", "k2", "--file", body}, conn...)...); !strings.Contains(out, "s3.credentials") {
		t.Fatalf("temporary keys without their session token: %q; want a message naming s3.credentials", out)
	}
}
