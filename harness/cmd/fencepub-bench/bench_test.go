//go:build !unit

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/harness/bench"
	"github.com/fencepub/fencepub/internal/cli"
	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/minio/minio-go/v7"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// benchCLI runs `fencepub-bench args...` in-process and returns stdout,
// stderr and the exit code main would use.
func benchCLI(t *testing.T, ctx context.Context, args ...string) (string, string, int) {
	t.Helper()
	errb := &testenv.SyncBuffer{}
	out, code := benchCLIStderr(t, ctx, errb, args...)
	return out, errb.String(), code
}

// benchCLIStderr is benchCLI with stderr (progress, and the command's
// error at the end) written to errw.
func benchCLIStderr(t *testing.T, ctx context.Context, errw io.Writer, args ...string) (string, int) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(errw)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err != nil {
		_, _ = io.WriteString(errw, err.Error())
	}
	return out.String(), cli.ExitCode(err, ctx.Err() != nil)
}

// TestBenchCLI runs a quick bench against configured servers (the domain
// it uses is a throwaway one next to the configured domain, and is cleaned
// up), then with --local, and checks a bad workload name is a usage error.
func TestBenchCLI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	conn, e, m := testenv.CLIStack(t, "benchcli")
	dir := t.TempDir()
	out, errs, code := benchCLI(t, ctx, append([]string{"--quick", "--workloads", "authority,gc,pipeline", "--gc-objects", "200", "--out", dir}, conn...)...)
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	if !strings.Contains(out, "targets met; wrote") || !strings.Contains(out, "acquire, uncontended") {
		t.Errorf("summary: %s", out)
	}
	// The first line names the servers and the throwaway domain.
	if first, _, _ := strings.Cut(errs, "\n"); !strings.Contains(first, "bench: etcd "+e.Endpoints()[0]) ||
		!strings.Contains(first, "S3 "+m.Config.Endpoint+" bucket ") || !strings.Contains(first, `throwaway domain "d1-bench-`) {
		t.Errorf("start line: %q", first)
	}
	var rep bench.Report
	b, err := os.ReadFile(filepath.Join(dir, "latest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range rep.Rows {
		seen[r.Workload] = true
		if r.Skipped != "" {
			t.Errorf("row skipped: %+v", r)
		}
	}
	if !seen["authority"] || !seen["gc"] || seen["publish"] || !strings.HasPrefix(rep.Servers, "configured: etcd ") {
		t.Errorf("report: workloads %v, servers %q", seen, rep.Servers)
	}
	for _, f := range []string{"latest.md", "latest.png", "pipeline.png"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	for _, f := range []string{"footprint.png", "scale.png"} { // their workloads did not run
		if _, err := os.Stat(filepath.Join(dir, f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v; want no such file", f, err)
		}
	}
	// Interrupted (the context ends as the first workload starts, as on
	// SIGINT): exit 130 and no report; the previous one stays as it was.
	prev, err := os.ReadFile(filepath.Join(dir, "latest.md"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "latest.json")); err != nil {
		t.Fatal(err)
	}
	ictx, icancel := context.WithCancel(ctx)
	ierr := &testenv.SyncBuffer{OnWrite: func(s string) {
		if strings.Contains(s, `msg="bench: workload" name=authority`) {
			icancel()
		}
	}}
	out, code = benchCLIStderr(t, ictx, ierr, append([]string{"--quick", "--workloads", "authority,gc,pipeline", "--gc-objects", "200", "--out", dir}, conn...)...)
	icancel()
	if code != exitcode.Interrupted || out != "" || !strings.Contains(ierr.String(), "no report written") {
		t.Errorf("interrupted: exit %d, want %d\nstdout: %s\nstderr: %s", code, exitcode.Interrupted, out, ierr)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "latest.md")); err != nil || !bytes.Equal(b, prev) {
		t.Errorf("interrupted run changed latest.md (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "latest.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("interrupted run wrote latest.json (%v)", err)
	}

	// Nothing left behind, in etcd or in the bucket.
	cli, err := devstack.NewEtcdClient(e.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if kv, err := cli.Get(ctx, "benchcli/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || kv.Count != 0 {
		t.Errorf("etcd keys left under benchcli/: %v", err)
	}
	st, err := m.Store()
	if err != nil {
		t.Fatal(err)
	}
	// The create-only probe object, outside every domain, is left by design.
	probe := layout.Namespace{Prefix: "benchcli"}.CreateOnlyProbeObject()
	for o := range st.Client.ListObjectsIter(ctx, st.Bucket, minio.ListObjectsOptions{Prefix: "benchcli/", Recursive: true}) {
		if o.Key == probe && o.Err == nil {
			continue
		}
		t.Errorf("object left: %s %v", o.Key, o.Err)
		break
	}

	out, errs, code = benchCLI(t, ctx, "--local", "--quick", "--workloads", "authority", "--out", dir)
	if code != 0 || !strings.Contains(out, "renew, sequential") {
		t.Fatalf("--local: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	if first, _, _ := strings.Cut(errs, "\n"); !strings.HasPrefix(first, "bench: starting a local etcd and MinIO from ") {
		t.Errorf("--local start line: %q", first)
	}

	if _, errs, code := benchCLI(t, ctx, append([]string{"--quick", "--workloads", "nope", "--out", dir}, conn...)...); code != exitcode.Usage || !strings.Contains(errs, "unknown workload") {
		t.Errorf("bad workload: exit %d: %s", code, errs)
	}
}

// TestBenchRejectsBadFlags: invalid values and an --out that cannot take
// the report are usage errors (exit 2) naming the flag, returned at once:
// no server is started or contacted (the configured endpoints do not
// answer, which would take seconds and exit 115), nothing is logged and no
// directory is created.
func TestBenchRejectsBadFlags(t *testing.T) {
	wd := t.TempDir()
	t.Chdir(wd) // the default --out would appear here
	file := filepath.Join(wd, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	reportDir := filepath.Join(wd, "report") // latest.json is a directory
	if err := os.MkdirAll(filepath.Join(reportDir, "latest.json"), 0o755); err != nil {
		t.Fatal(err)
	}
	unreachable := []string{"--etcd-endpoints", "127.0.0.1:1", "--s3-endpoint", "127.0.0.1:1"}
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--scale", "0"}, "--scale"},
		{[]string{"--scale", "-1"}, "--scale"},
		{[]string{"--scale", "NaN"}, "--scale"},
		{[]string{"--scale", "101"}, "--scale"},
		{[]string{"--quick", "--scale", "0"}, "--scale"},
		{[]string{"--local", "--scale", "0"}, "--scale"},
		{[]string{"--gc-objects", "-5"}, "--gc-objects"},
		{[]string{"--gc-objects", "0"}, "--gc-objects"},
		{[]string{"--quick", "--gc-objects", "9"}, "--gc-objects"},
		{[]string{"--wrk-duration", "0s"}, "--wrk-duration"},
		{[]string{"--scale-files", "1000"}, "--scale-files"},
		{[]string{"--scale-files", "300,100"}, "--scale-files"},
		{[]string{"--scale-files", "x"}, "--scale-files"},
		{[]string{"--wrk-duration", "-1s"}, "--wrk-duration"},
		{[]string{"--wrk-duration", "500ms"}, "--wrk-duration"},
		{[]string{"--wrk-duration", "100000h"}, "--wrk-duration"},
		{[]string{"--gc-objects", "9223372036854775807"}, "--gc-objects"},
		{[]string{"--workloads", "publish,nope"}, "--workloads"},
		{[]string{"--out", filepath.Join(wd, "new"), "--scale", "0"}, "--scale"},
		{[]string{"--quick", "--out", file}, "--out"},
		{[]string{"--quick", "--out", filepath.Join(file, "sub")}, "--out"},
		{[]string{"--quick", "--out", reportDir}, "--out"},
		{[]string{"--quick", "--out", ""}, "--out"},
		{[]string{"--local", "--store", "s3"}, "--store"},
		{[]string{"--quick", "--store", "seaweedfs"}, "--store"},
	} {
		start := time.Now()
		out, errs, code := benchCLI(t, context.Background(), append(tc.args, unreachable...)...)
		took := time.Since(start)
		if code != exitcode.Usage || !strings.Contains(errs, tc.flag) || out != "" {
			t.Errorf("%v: exit %d, want 2 naming %s\nstdout: %s\nstderr: %s", tc.args, code, tc.flag, out, errs)
		}
		if strings.Contains(errs, "bench: ") || took > time.Second {
			t.Errorf("%v: something ran (%s): %s", tc.args, took, errs)
		}
	}
	entries, err := os.ReadDir(wd)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "file" && e.Name() != "report" {
			t.Errorf("created %s", e.Name())
		}
	}
	if entries, _ := os.ReadDir(reportDir); len(entries) != 1 {
		t.Errorf("--out %s: %d entries, want only latest.json", reportDir, len(entries))
	}

	// A run that fails after --out was made (servers unreachable: 115)
	// removes every directory it created, not only the last.
	if _, errs, code := benchCLI(t, context.Background(), "--quick", "--out", filepath.Join(wd, "nest", "a", "b"),
		"--etcd-endpoints", "http://127.0.0.1:1", "--s3-endpoint", "127.0.0.1:1"); code != exitcode.Unavailable {
		t.Errorf("unreachable servers: exit %d, want 115: %s", code, errs)
	}
	if _, err := os.Stat(filepath.Join(wd, "nest")); !os.IsNotExist(err) {
		t.Errorf("a failed run left %s behind (%v)", filepath.Join(wd, "nest"), err)
	}

	if os.Geteuid() != 0 { // root writes anywhere
		ro := filepath.Join(wd, "ro")
		if err := os.Mkdir(ro, 0o555); err != nil {
			t.Fatal(err)
		}
		if _, errs, code := benchCLI(t, context.Background(), append([]string{"--quick", "--out", ro}, unreachable...)...); code != exitcode.Usage || !strings.Contains(errs, "--out "+ro+" is not writable") {
			t.Errorf("read-only --out: exit %d: %s", code, errs)
		}
	}
}

// TestBenchHelp: the help is the fencepub-bench command's own, and states
// the one default --out and the object count the code writes.
func TestBenchHelp(t *testing.T) {
	out, _, code := benchCLI(t, context.Background(), "--help")
	if code != 0 || !strings.HasPrefix(out, "fencepub-bench runs ") || !strings.Contains(out, "Usage:\n  fencepub-bench [flags]") || !strings.Contains(out, "default ./fencepub-bench-results") || strings.Contains(out, "bench/results/tmp") ||
		!strings.Contains(out, "about 145k") || !strings.Contains(out, `(default "fencepub-bench-results")`) {
		t.Errorf("help: exit %d\n%s", code, out)
	}
}

// TestBenchLocalSeaweedFS runs a quick reader workload with --local --store
// seaweedfs: the suite starts SeaweedFS, not MinIO, names it in its start
// line and report, and measures its rows next to their baselines on it.
// Without --workloads that store runs publish and reader.
func TestBenchLocalSeaweedFS(t *testing.T) {
	o := &benchCmdOptions{local: true, store: devstack.StoreSeaweedFS, scale: 1, gcObjects: minBenchGCObjects, wrkDuration: time.Second, changed: func(string) bool { return false }}
	opts, err := o.Validate()
	if err != nil || strings.Join(opts.Workloads, ",") != "publish,reader" {
		t.Fatalf("Validate with --store seaweedfs: workloads %v, %v; want publish,reader", opts.Workloads, err)
	}

	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, errs, code := benchCLI(t, ctx, "--local", "--store", "seaweedfs", "--quick", "--workloads", "reader", "--out", dir)
	if code != 0 || !strings.Contains(out, "Open, 1 KiB, c=16") {
		t.Fatalf("--local --store seaweedfs: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	if first, _, _ := strings.Cut(errs, "\n"); !strings.HasPrefix(first, "bench: starting a local etcd and SeaweedFS from ") {
		t.Errorf("start line: %q", first)
	}
	var rep struct{ Servers string }
	b, err := os.ReadFile(filepath.Join(dir, "latest.json"))
	if err == nil {
		err = json.Unmarshal(b, &rep)
	}
	if err != nil || !strings.Contains(rep.Servers, "SeaweedFS") {
		t.Errorf("report servers %q (%v); want SeaweedFS named", rep.Servers, err)
	}
}
