package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/harness/testenv"
)

// `fencepub run` streams CMD's stdout into the store while CMD runs
// (README "fencepub run"): a failing CMD whose output already spans
// several multipart parts leaves nothing in the bucket, not even an
// incomplete upload; and a process that CMD leaves behind outside its
// process group, holding stdout open, neither holds the run nor adds to
// the result.
func TestRunStdoutStreams(t *testing.T) {
	conn, _, m := testenv.CLIStack(t, "stream")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := func(want int, args ...string) runOutput {
		t.Helper()
		dash := 0
		for dash < len(args) && args[dash] != "--" {
			dash++
		}
		all := append(append(append([]string{"run", "--ttl", "5s", "-o", "json"}, args[:dash]...), conn...), args[dash:]...)
		stdout, stderr, code := publishCLI(t, ctx, "", all...)
		var o runOutput
		if code != want || json.Unmarshal([]byte(stdout), &o) != nil {
			t.Fatalf("fencepub %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(all, " "), code, want, stdout, stderr)
		}
		return o
	}

	// 40 MiB, then failure: three 16 MiB parts were under way.
	o := run(5, "--resource", "failing", "--", "sh", "-c", "head -c 41943040 /dev/zero; exit 5")
	if o.CommandExit != 5 || o.Outcome != "not_published" {
		t.Fatalf("failing command: %+v", o)
	}
	st, err := m.Store()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range bucketKeys(t, m) {
		if strings.HasPrefix(k, "stream/d1/failing/") { // the resource's objects (not the authority's markers)
			t.Fatalf("a failed command left object %s", k)
		}
	}
	for u, err := range st.ListUploads(ctx, "") {
		if err != nil {
			t.Fatal(err)
		}
		t.Fatalf("a failed command left the incomplete upload %s of %s", u.UploadID, u.Key)
	}

	// A daemon CMD starts in a session of its own keeps stdout open for a
	// minute: the run ends with CMD and publishes what CMD wrote.
	pidFile := filepath.Join(t.TempDir(), "daemon.pid")
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	start := time.Now()
	o = run(0, "--resource", "daemon", "--", "sh", "-c",
		`setsid sh -c 'echo $$ > `+pidFile+`; exec sleep 60' & echo first; sleep 0.2; echo second`)
	if took := time.Since(start); o.Outcome != "applied" || took > 30*time.Second {
		t.Fatalf("run with a daemon holding stdout: %+v after %s", o, took)
	}
	out := filepath.Join(t.TempDir(), "read")
	if stdout, stderr, code := publishCLI(t, ctx, "", append([]string{"read", "--resource", "daemon", "--out", out}, conn...)...); code != 0 {
		t.Fatalf("read: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if got := readFile(t, out); got != "first\nsecond\n" {
		t.Fatalf("published %q, want what CMD wrote", got)
	}
}
