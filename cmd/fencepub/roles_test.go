//go:build !unit

package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/minio/minio-go/v7"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// gcDaemon runs `fencepub gc daemon` with args on a free port until the
// returned stop is called, after it has led a pass (/healthz says leader
// with a last success within 30 s; t fails otherwise). get fetches a path
// of its HTTP endpoint; stop cancels the daemon and returns its output and
// exit code.
func gcDaemon(t *testing.T, ctx context.Context, args ...string) (get func(path string) (int, string), stop func() (string, int)) {
	t.Helper()
	port, err := devstack.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	dctx, cancel := context.WithCancel(ctx)
	type result struct {
		out  string
		code int
	}
	done := make(chan result, 1)
	go func() {
		o, errs, code := publishCLI(t, dctx, "", append([]string{"gc", "daemon", "--interval", "100ms", "--lease-ttl", "2s", "--listen", addr}, args...)...)
		done <- result{o + errs, code}
	}()
	get = func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	stop = func() (string, int) {
		t.Helper()
		cancel()
		select {
		case r := <-done:
			return r.out, r.code
		case <-time.After(15 * time.Second):
			t.Fatal("gc daemon did not stop on cancel")
			return "", 0
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		select {
		case r := <-done:
			t.Fatalf("gc daemon exited %d before leading: %s", r.code, r.out)
		default:
		}
		code, body := get("/healthz")
		if code == 200 && strings.Contains(body, `"leader":true`) && strings.Contains(body, `"last_success"`) {
			break
		}
		if time.Now().After(deadline) {
			out, code := stop()
			t.Fatalf("gc daemon does not lead a pass within 30s: /healthz %s\nexit %d: %s", body, code, out)
		}
	}
	return get, stop
}

// TestSetupRoles creates the roles on an etcd serving TLS with client
// certificates and authentication, binds a user to each, and runs every CLI
// command as each user: each role can do its part, and outside it is
// refused (exit 2, "permission denied" naming the user) with nothing
// written, in etcd or in the bucket. The gc role runs `gc run` and `gc
// daemon` through everything they write: the GC lease, the domain clock,
// an abandon seal, object deletion and record pruning.
func TestSetupRoles(t *testing.T) {
	ca, client, e, m := secureServers(t)
	t.Setenv("FENCEPUB_S3_ACCESS_KEY", m.Config.AccessKey)
	t.Setenv("FENCEPUB_S3_SECRET_KEY", m.Config.SecretKey)
	conn := append([]string{"--etcd-endpoints", e.Endpoints()[0], "--s3-endpoint", m.Config.Endpoint,
		"--s3-bucket", m.Config.Bucket, "--prefix", "roletest"}, tlsFlags(ca.CertFile, client)...)
	root := testenv.EtcdClient(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	body := filepath.Join(t.TempDir(), "body.txt")
	if err := os.WriteFile(body, []byte("results"), 0o644); err != nil {
		t.Fatal(err)
	}
	// args is the command line of args run as user (password user+"-pw"),
	// in domain d1 unless args name one.
	args := func(user string, args ...string) []string {
		t.Setenv("FENCEPUB_ETCD_PASSWORD", user+"-pw")
		flags := append(append([]string{}, conn...), "--etcd-username", user)
		if !slices.Contains(args, "--domain") {
			flags = append(flags, "--domain", "d1")
		}
		// Before a "--" that ends the flags (run's command).
		i := slices.Index(args, "--")
		if i < 0 {
			i = len(args)
		}
		return slices.Concat(args[:i], flags, args[i:])
	}
	// as runs the CLI as user, checks the exit code and returns stdout
	// (and stderr, on failure).
	as := func(user string, wantCode int, a ...string) string {
		t.Helper()
		out, errs, code := runCLI(t, args(user, a...)...)
		if code != wantCode {
			t.Fatalf("as %s: fencepub %s: exit %d, want %d\nstdout: %s\nstderr: %s", user, strings.Join(a, " "), code, wantCode, out, errs)
		}
		if code == 0 {
			return out
		}
		return out + errs
	}
	ns, err := layout.NewNamespace("roletest", "d1")
	if err != nil {
		t.Fatal(err)
	}
	st, err := m.Store()
	if err != nil {
		t.Fatal(err)
	}
	// snapshot is etcd's revision and the bucket's object names.
	snapshot := func() (int64, string) {
		t.Helper()
		resp, err := root.Get(ctx, "/", clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for obj := range st.Client.ListObjects(ctx, m.Config.Bucket, minio.ListObjectsOptions{Recursive: true}) {
			if obj.Err != nil {
				t.Fatal(obj.Err)
			}
			names = append(names, obj.Key)
		}
		return resp.Header.Revision, strings.Join(names, "\n")
	}
	// denied runs a command as user and checks that etcd refused it and
	// that nothing was written.
	denied := func(user string, a ...string) {
		t.Helper()
		rev, objects := snapshot()
		if msg := as(user, exitcode.Usage, a...); !strings.Contains(msg, "permission denied") || !strings.Contains(msg, user) {
			t.Fatalf("as %s: fencepub %s: message lacks \"permission denied\" or the user: %s", user, strings.Join(a, " "), msg)
		}
		if rev2, objects2 := snapshot(); rev2 != rev || objects2 != objects {
			t.Fatalf("as %s: the refused fencepub %s wrote: etcd revision %d -> %d, objects\n%s\n->\n%s", user, strings.Join(a, " "), rev, rev2, objects, objects2)
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
	users := []string{"worker", "reader", "gc", "operator"}
	for _, u := range users {
		if _, err := root.UserAdd(ctx, u, u+"-pw"); err != nil {
			t.Fatal(err)
		}
		if _, err := root.UserGrantRole(ctx, u, "fencepub-"+u); err != nil {
			t.Fatal(err)
		}
	}
	// Domain d2 exists, so that refusals there are etcd's.
	as("root", 0, "publish", "--resource", "job", "--owner", "r", "--ttl", "10s", "--key", "k1", "--file", body, "--domain", "d2")

	// Worker: acquire, renew, release, show, publish, run, resolve (an
	// applied attempt, and one never made, which raises the seal).
	as("worker", 0, "publish", "--resource", "job", "--owner", "w1", "--ttl", "10s", "--key", "k1", "--file", body)
	as("worker", 0, "authority", "acquire", "--resource", "job", "--owner", "w2", "--ttl", "10s")
	as("worker", 0, "authority", "renew", "--resource", "job", "--owner", "w2")
	as("worker", 0, "authority", "show", "--resource", "job")
	as("worker", 0, "authority", "release", "--resource", "job", "--owner", "w2", "--generation", "2")
	as("worker", 0, "run", "--resource", "job", "--owner", "w3", "--ttl", "10s", "--run-id", "r1", "--", "echo", "from run")
	as("worker", 0, "resolve", "--resource", "job", "--key", "k1", "--epoch", "1", "--fence", "1", "--seq", "1", "--file", body)
	as("worker", exitcode.Stale, "resolve", "--resource", "job", "--key", "never", "--epoch", "1", "--fence", "3", "--seq", "9", "--sha256", strings.Repeat("0", 64))
	// Outside its part: GC, recovery, roles, another domain. (A
	// decommission and a rollback write only seals and pointers, which
	// resolve and publish need: etcd cannot keep them from a worker.)
	denied("worker", "gc", "run", "--all")
	denied("worker", "authority", "recover")
	denied("worker", "authority", "setup-roles")
	denied("worker", "pointer", "--resource", "job", "--domain", "d2")
	denied("worker", "publish", "--resource", "job", "--owner", "w1", "--ttl", "10s", "--key", "k9", "--file", body, "--domain", "d2")
	// Through etcd itself: the GC lease, the domain clock, the epoch,
	// the epoch records and another domain's history and seals.
	wcli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), Username: "worker", Password: "worker-pw",
		TLS: ca.ClientTLS(t, client), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer wcli.Close()
	ns2, err := layout.NewNamespace("roletest", "d2")
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []clientv3.Op{
		clientv3.OpPut(ns.AuthorityPrefix()+"_gc/holder", "w"),
		clientv3.OpPut(ns.ClockHeadKey(), "{}"),
		clientv3.OpDelete(ns.EpochKey()),
		clientv3.OpDelete(ns.DeploymentKey()),
		clientv3.OpDelete(ns.EpochRecordsPrefix(), clientv3.WithPrefix()),
		clientv3.OpDelete(ns2.HistoryPrefix("job"), clientv3.WithPrefix()),
		clientv3.OpDelete(ns2.SealKey("job")),
		clientv3.OpDelete(ns2.Root(), clientv3.WithPrefix()),
	} {
		if _, err := wcli.Do(ctx, op); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Fatalf("worker %s %q: %v; want permission denied", map[bool]string{true: "put", false: "delete"}[op.IsPut()], op.KeyBytes(), err)
		}
	}

	// Reader: pointer, read, watch, ls, history, read --version, and a
	// misspelt name told from one not yet published; nothing that writes.
	as("reader", 0, "pointer", "--resource", "job")
	if out := as("reader", 0, "read", "--resource", "job"); !strings.Contains(out, "from run") {
		t.Fatalf("reader read: %q", out)
	}
	as("reader", 0, "watch", "--resource", "job", "--count", "1")
	if out := as("reader", 0, "ls"); !strings.Contains(out, "job") {
		t.Fatalf("reader ls: %q", out)
	}
	as("reader", 0, "history", "--resource", "job")
	as("reader", 0, "read", "--resource", "job", "--version", "1.1.1")
	as("reader", exitcode.NotFound, "pointer", "--resource", "nothing-here")
	as("worker", 0, "authority", "acquire", "--resource", "pending", "--owner", "w5", "--ttl", "10s")
	if out := as("reader", 0, "pointer", "--resource", "pending"); !strings.Contains(out, "granted, nothing published yet") {
		t.Fatalf("reader pointer of a granted resource: %q", out)
	}
	as("worker", 0, "authority", "release", "--resource", "pending", "--owner", "w5", "--generation", "1")
	for _, a := range [][]string{
		{"publish", "--resource", "job", "--owner", "r1", "--ttl", "10s", "--key", "k2", "--file", body},
		{"run", "--resource", "job", "--owner", "r1", "--ttl", "10s", "--run-id", "r2", "--", "echo", "x"},
		{"authority", "acquire", "--resource", "job", "--owner", "r1"},
		{"resolve", "--resource", "job", "--key", "never2", "--epoch", "1", "--fence", "3", "--seq", "10", "--sha256", strings.Repeat("0", 64)},
		{"rollback", "--resource", "job", "--to", "1.1.1", "--owner", "r1", "--ttl", "10s"},
		{"gc", "run", "--all"},
		{"resource", "delete", "job", "--force"},
		{"authority", "recover"},
		{"pointer", "--resource", "job", "--domain", "d2"},
	} {
		denied("reader", a...)
	}

	// GC: an abandoned grant (its lease gone, an object it uploaded and
	// never published) gets an abandon seal and its object deleted;
	// superseded versions are deleted and old records pruned, by gc run
	// and by gc daemon, with the GC lease and the domain clock.
	as("worker", 0, "publish", "--resource", "lost", "--owner", "w4", "--ttl", "10s", "--key", "k1", "--file", body)
	as("worker", 0, "authority", "acquire", "--resource", "lost", "--owner", "w4", "--ttl", "10s")
	if _, err := root.Revoke(ctx, holderLease(t, ctx, root, ns.HolderKey("lost"))); err != nil {
		t.Fatal(err)
	}
	orphan := ns.ObjectKey("lost", layout.Version{Epoch: 1, Fence: 2, Seq: 1}, layout.NewNonce())
	if _, err := st.Client.PutObject(ctx, m.Config.Bucket, orphan, strings.NewReader("never published"), -1, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	fast := []string{"--grace", "1ms", "--clock-skew", "0s", "--retain", "1", "--abandon-after", "1ms", "--op-retention", "1ms", "--request-retention", "1ms"}
	as("gc", 0, "gc", "run", "--all")
	opCount := func() int64 {
		resp, err := root.Get(ctx, ns.OpsPrefix("job"), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	if opCount() == 0 {
		t.Fatal("job has no op records to prune")
	}
	testenv.Eventually(t, "gc run as gc deletes the abandoned object and prunes the op records", 30*time.Second, func() bool {
		as("gc", 0, append([]string{"gc", "run", "--all"}, fast...)...)
		_, err := st.Client.StatObject(ctx, m.Config.Bucket, orphan, minio.StatObjectOptions{})
		return minio.ToErrorResponse(err).Code == "NoSuchKey" && opCount() == 0
	})
	if resp, err := root.Get(ctx, ns.SealKey("lost")); err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("no abandon seal on the lost resource: %v", err)
	}
	as("worker", 0, "publish", "--resource", "job", "--owner", "w5", "--ttl", "10s", "--key", "k5", "--file", body)
	_, stop := gcDaemon(t, ctx, args("gc", fast...)...)
	if out, code := stop(); code != 0 || strings.Contains(out, "permission denied") {
		t.Fatalf("gc daemon as gc: exit %d: %s", code, out)
	}
	// (GC prunes grant and request records, which sit beside each
	// resource's generation and holder keys: etcd cannot keep a grant from
	// the gc role.)
	for _, a := range [][]string{
		{"authority", "recover"},
		{"authority", "setup-roles"},
		{"gc", "run", "--all", "--domain", "d2"},
	} {
		denied("gc", a...)
	}

	// Operator: rollback, resource delete, recover; not another domain,
	// not the roles.
	var ptr layout.Pointer
	if err := json.Unmarshal([]byte(as("operator", 0, "pointer", "--resource", "job", "-o", "json")), &ptr); err != nil {
		t.Fatal(err)
	}
	as("operator", 0, "rollback", "--resource", "job", "--to", ptr.Version.String(), "--owner", "op", "--ttl", "10s")
	as("operator", 0, "resource", "delete", "job", "--force")
	as("operator", 0, "authority", "recover")
	denied("operator", "authority", "setup-roles")
	denied("operator", "pointer", "--resource", "job", "--domain", "d2")
}

// holderLease returns the lease of the holder record key.
func holderLease(t *testing.T, ctx context.Context, cli *clientv3.Client, key string) clientv3.LeaseID {
	t.Helper()
	resp, err := cli.Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 || resp.Kvs[0].Lease == 0 {
		t.Fatalf("holder %s: %v %v", key, resp, err)
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}
