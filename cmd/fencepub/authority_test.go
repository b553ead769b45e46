//go:build !unit

package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

// TestAuthorityCLI drives `fencepub authority` against real etcd and MinIO:
// the JSON shapes, idempotent acquire, and the documented exit codes.
func TestAuthorityCLI(t *testing.T) {
	conn, _, _ := testenv.CLIStack(t, "clitest")
	// run returns stdout, or stdout and stderr when the exit code is not 0.
	run := func(wantCode int, args ...string) string {
		t.Helper()
		out, errs, code := runCLI(t, append(args, conn...)...)
		if code != wantCode {
			t.Fatalf("fencepub %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, wantCode, out, errs)
		}
		if code != 0 && !strings.HasPrefix(out, "{") {
			return out + errs
		}
		return out
	}
	decode := func(s string) map[string]any {
		t.Helper()
		var v map[string]any
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, s)
		}
		return v
	}

	out := run(0, "authority", "acquire", "--resource", "job", "--owner", "alice", "--ttl", "30s", "--request-id", "req-1", "-o", "json")
	g := decode(out)
	for _, k := range []string{"resource", "owner", "request_id", "epoch", "generation", "lease_id", "ttl_seconds", "expires_at"} {
		if _, ok := g[k]; !ok {
			t.Fatalf("acquire JSON lacks %q: %s", k, out)
		}
	}
	if g["generation"] != 1.0 || g["owner"] != "alice" || g["ttl_seconds"] != 30.0 || g["request_id"] != "req-1" {
		t.Fatalf("acquire JSON %s", out)
	}
	// A retried request id gets the same grant; another owner is refused.
	if again := decode(run(0, "authority", "acquire", "--resource", "job", "--owner", "alice", "--ttl", "30s", "--request-id", "req-1", "-o", "json")); again["generation"] != 1.0 || again["lease_id"] != g["lease_id"] {
		t.Fatalf("retried acquire %v; want the original grant %v", again, g)
	}
	if msg := run(exitcode.Held, "authority", "acquire", "--resource", "job", "--owner", "bob"); !strings.Contains(msg, `"alice"`) {
		t.Fatalf("held message does not name the holder: %s", msg)
	}
	run(exitcode.Conflict, "authority", "acquire", "--resource", "job", "--owner", "bob", "--request-id", "req-1")

	show := decode(run(0, "authority", "show", "--resource", "job", "-o", "json"))
	if show["owner"] != "alice" || show["held"] != true || show["generation"] != 1.0 {
		t.Fatalf("show JSON %v", show)
	}
	run(0, "authority", "renew", "--resource", "job", "--owner", "alice")
	run(exitcode.LeaseLost, "authority", "renew", "--resource", "job", "--owner", "bob")
	run(exitcode.LeaseLost, "authority", "release", "--resource", "job", "--owner", "alice", "--generation", "2")
	run(0, "authority", "release", "--resource", "job", "--owner", "alice", "--generation", "1")
	if show := decode(run(0, "authority", "show", "--resource", "job", "-o", "json")); show["held"] != false || show["owner"] != "" {
		t.Fatalf("show after release %v", show)
	}
	run(exitcode.LeaseLost, "authority", "renew", "--resource", "job", "--owner", "alice")
	// The released grant's request id now reports the original, expired.
	if exp := decode(run(exitcode.LeaseLost, "authority", "acquire", "--resource", "job", "--owner", "alice", "--request-id", "req-1", "-o", "json")); exp["expired"] != true || exp["generation"] != 1.0 {
		t.Fatalf("expired retry %v", exp)
	}

	// Bad input is a usage error and writes nothing.
	run(exitcode.Usage, "authority", "acquire", "--resource", "job", "--ttl", "1s")
	run(exitcode.Usage, "authority", "acquire", "--resource", "job", "--ttl", "2500ms")
	run(exitcode.Usage, "authority", "acquire", "--resource", "a/b")
	run(exitcode.Usage, "authority", "acquire", "--resource", "_gc")
	run(exitcode.Usage, "authority", "acquire")
	run(exitcode.Usage, "authority", "release", "--resource", "job", "--owner", "alice")
	run(exitcode.Usage, "authority", "show")

	rep := decode(run(0, "authority", "recover", "--dry-run", "-o", "json"))
	if rep["dry_run"] != true || rep["new_epoch"].(float64) <= rep["old_epoch"].(float64) {
		t.Fatalf("recover --dry-run %v", rep)
	}
	if msg := run(0, "authority", "recover"); !strings.Contains(msg, "moved the domain from epoch 1 to 2") {
		t.Fatalf("recover: %s", msg)
	}
	if g2 := decode(run(0, "authority", "acquire", "--resource", "job", "-o", "json")); g2["epoch"] != 2.0 || g2["generation"] != 2.0 {
		t.Fatalf("acquire after recover %v", g2)
	}

	port, err := devstack.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dead := []string{"authority", "show", "--resource", "job", "--etcd-endpoints", "http://127.0.0.1:" + strconv.Itoa(port)}
	if _, errs, code := runCLI(t, append(dead, conn[2:]...)...); code != exitcode.Unavailable {
		t.Fatalf("unreachable etcd: exit %d (%s); want %d", code, errs, exitcode.Unavailable)
	}
}
