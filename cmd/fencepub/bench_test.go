package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/bench"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/localstack"
	"github.com/minio/minio-go/v7"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// benchCLI runs `fencepub bench args...` in-process and returns stdout,
// stderr and the exit code. It uses the root's bench command, registering
// newBenchCmd on the root first if the root does not have one yet.
func benchCLI(t *testing.T, ctx context.Context, args ...string) (string, string, int) {
	t.Helper()
	root := newRootCmd()
	if c, _, err := root.Find([]string{"bench"}); err != nil || c.Name() != "bench" {
		root.AddCommand(newBenchCmd())
	}
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs(append([]string{"bench"}, args...))
	err := root.ExecuteContext(ctx)
	if err != nil {
		errb.WriteString(err.Error())
	}
	return out.String(), errb.String(), exitcode.Of(err)
}

// TestBenchCLI runs a quick bench against configured servers (the domain
// it uses is a throwaway one next to the configured domain, and is cleaned
// up), then with --local, and checks a bad workload name is a usage error.
func TestBenchCLI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	conn, e, m := cliStack(t, "benchcli")
	dir := t.TempDir()
	out, errs, code := benchCLI(t, ctx, append([]string{"--quick", "--workloads", "authority,gc", "--gc-objects", "200", "--out", dir}, conn...)...)
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	if !strings.Contains(out, "targets met; wrote") || !strings.Contains(out, "acquire, uncontended") {
		t.Errorf("summary: %s", out)
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
	for _, f := range []string{"latest.md", "latest.png"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	// Nothing left behind, in etcd or in the bucket.
	cli, err := localstack.NewEtcdClient(e.Endpoints())
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
	for o := range st.Client.ListObjectsIter(ctx, st.Bucket, minio.ListObjectsOptions{Prefix: "benchcli/", Recursive: true}) {
		t.Errorf("object left: %s %v", o.Key, o.Err)
		break
	}

	out, errs, code = benchCLI(t, ctx, "--local", "--quick", "--workloads", "authority", "--out", dir)
	if code != 0 || !strings.Contains(out, "renew, sequential") {
		t.Fatalf("--local: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}

	if _, errs, code := benchCLI(t, ctx, append([]string{"--quick", "--workloads", "nope", "--out", dir}, conn...)...); code != exitcode.Usage || !strings.Contains(errs, "unknown workload") {
		t.Errorf("bad workload: exit %d: %s", code, errs)
	}
}
