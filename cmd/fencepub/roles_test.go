package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/harness/localstack"
	"github.com/fencepub/fencepub/internal/harness/testenv"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/minio/minio-go/v7"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestSetupRoles creates the roles on an etcd with authentication, binds a
// user to each, and runs the CLI as each user: every role can do its part
// and is refused (exit 2, "permission denied", nothing written) outside it.
func TestSetupRoles(t *testing.T) {
	e := testenv.StartEtcd(t, localstack.EtcdOptions{RootPassword: "root-pw"})
	m := testenv.StartMinIO(t, localstack.MinIOOptions{})
	t.Setenv("FENCEPUB_S3_ACCESS_KEY", m.Config.AccessKey)
	t.Setenv("FENCEPUB_S3_SECRET_KEY", m.Config.SecretKey)
	conn := []string{"--etcd-endpoints", e.Endpoints()[0], "--s3-endpoint", m.Config.Endpoint,
		"--s3-bucket", m.Config.Bucket, "--prefix", "roletest"}
	root := testenv.EtcdClient(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	body := filepath.Join(t.TempDir(), "body.txt")
	if err := os.WriteFile(body, []byte("results"), 0o644); err != nil {
		t.Fatal(err)
	}
	// as runs the CLI as user (password user+"-pw"), checks the exit code
	// and returns stdout (and stderr, on failure).
	as := func(user string, wantCode int, args ...string) string {
		t.Helper()
		t.Setenv("FENCEPUB_ETCD_PASSWORD", user+"-pw")
		full := append(append(args, conn...), "--etcd-username", user)
		if !strings.Contains(strings.Join(args, " "), "--domain") {
			full = append(full, "--domain", "d1")
		}
		out, errs, code := runCLI(t, full...)
		if code != wantCode {
			t.Fatalf("as %s: fencepub %s: exit %d, want %d\nstdout: %s\nstderr: %s", user, strings.Join(args, " "), code, wantCode, out, errs)
		}
		if code == 0 {
			return out
		}
		return out + errs
	}
	denied := func(user string, args ...string) {
		t.Helper()
		if msg := as(user, exitcode.Usage, args...); !strings.Contains(msg, "permission denied") || !strings.Contains(msg, user) {
			t.Fatalf("as %s: fencepub %s: message lacks \"permission denied\" or the user: %s", user, strings.Join(args, " "), msg)
		}
	}

	// Dry run first: nothing created; then create; then nothing left to do.
	var dry setupRolesResult
	if err := json.Unmarshal([]byte(as("root", 0, "authority", "setup-roles", "--dry-run", "-o", "json")), &dry); err != nil {
		t.Fatal(err)
	}
	if !dry.DryRun || len(dry.Commands) == 0 || !strings.HasPrefix(dry.Commands[0], "etcdctl role add fencepub-") {
		t.Fatalf("dry run: %+v", dry)
	}
	if r, err := root.RoleList(ctx); err != nil || len(r.Roles) != 0 {
		t.Fatalf("dry run created roles: %v %v", r, err)
	}
	var made setupRolesResult
	if err := json.Unmarshal([]byte(as("root", 0, "authority", "setup-roles", "-o", "json")), &made); err != nil {
		t.Fatal(err)
	}
	if strings.Join(made.Commands, "\n") != strings.Join(dry.Commands, "\n") || made.Epoch != 1 {
		t.Fatalf("setup-roles ran %v (epoch %d); the dry run said %v", made.Commands, made.Epoch, dry.Commands)
	}
	if again := as("root", 0, "authority", "setup-roles"); strings.Contains(again, "etcdctl") {
		t.Fatalf("second setup-roles is not idempotent: %s", again)
	}
	for _, u := range []string{"worker", "reader", "gc", "operator"} {
		if _, err := root.UserAdd(ctx, u, u+"-pw"); err != nil {
			t.Fatal(err)
		}
		if _, err := root.UserGrantRole(ctx, u, "fencepub-"+u); err != nil {
			t.Fatal(err)
		}
	}
	ns, err := layout.NewNamespace("roletest", "d1")
	if err != nil {
		t.Fatal(err)
	}
	snapshot := func() (int64, int) {
		t.Helper()
		resp, err := root.Get(ctx, ns.Root(), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		st, err := m.Store()
		if err != nil {
			t.Fatal(err)
		}
		for obj := range st.Client.ListObjects(ctx, m.Config.Bucket, minio.ListObjectsOptions{Prefix: ns.Root(), Recursive: true}) {
			if obj.Err != nil {
				t.Fatal(obj.Err)
			}
			n++
		}
		return resp.Header.Revision, n
	}

	// Worker: acquire, renew, release, publish; not another domain, not GC.
	as("worker", 0, "publish", "--resource", "job", "--owner", "w1", "--ttl", "10s", "--key", "k1", "--file", body)
	as("worker", 0, "authority", "acquire", "--resource", "job", "--owner", "w2", "--ttl", "10s")
	as("worker", 0, "authority", "renew", "--resource", "job", "--owner", "w2")
	as("worker", 0, "authority", "release", "--resource", "job", "--owner", "w2", "--generation", "2")
	denied("worker", "pointer", "--resource", "job", "--domain", "d2")
	denied("worker", "gc", "run", "--all")
	// The CLI refuses the reserved resource itself; etcd refuses the
	// worker the GC lease's keys.
	wcfg := clientv3.Config{Endpoints: e.Endpoints(), Username: "worker", Password: "worker-pw", DialTimeout: 5 * time.Second}
	wcli, err := clientv3.New(wcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer wcli.Close()
	if _, err := wcli.Put(ctx, ns.AuthorityPrefix()+"_gc/holder", "w3"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("worker put on the GC lease: %v; want permission denied", err)
	}

	// Reader: pointer and read; its publish is refused and writes nothing.
	as("reader", 0, "pointer", "--resource", "job")
	if out := as("reader", 0, "read", "--resource", "job"); !strings.Contains(out, "results") {
		t.Fatalf("reader read: %q", out)
	}
	rev, objects := snapshot()
	denied("reader", "publish", "--resource", "job", "--owner", "r1", "--ttl", "10s", "--key", "k2", "--file", body)
	denied("reader", "authority", "acquire", "--resource", "job", "--owner", "r1")
	if rev2, objects2 := snapshot(); rev2 != rev || objects2 != objects {
		t.Fatalf("the refused publish wrote: etcd revision %d -> %d, objects %d -> %d", rev, rev2, objects, objects2)
	}

	// GC works with its role; the operator can recover.
	as("gc", 0, "gc", "run", "--all")
	denied("gc", "authority", "acquire", "--resource", "job", "--owner", "g1", "--domain", "d2")
	as("operator", 0, "authority", "recover")
}
