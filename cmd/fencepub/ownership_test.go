package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/harness/testenv"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/objstore/s3store"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestForeignBucketRefused points an initialised domain at another bucket
// (DESIGN.md invariant 9): first one without the domain's ownership marker,
// then one whose marker names another deployment. init, publish (acquiring
// or with an existing grant), run and rollback refuse it with exit 2 naming
// the marker, before anything is minted in etcd or written to the bucket;
// doctor fails its ownership check. The domain's own bucket passes all of it.
func TestForeignBucketRefused(t *testing.T) {
	conn, e, m := testenv.CLIStack(t, "owned")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	body := filepath.Join(t.TempDir(), "body.txt")
	if err := os.WriteFile(body, []byte("owned"), 0o644); err != nil {
		t.Fatal(err)
	}
	runWant(t, 0, append([]string{"publish", "--resource", "job", "--owner", "w", "--ttl", "10s", "--key", "k1", "--file", body}, conn...)...)
	out := runWant(t, 0, append([]string{"doctor"}, conn...)...)
	if !strings.Contains(out, "PASS  ownership") {
		t.Fatalf("doctor on the domain's own bucket: no passed ownership check:\n%s", out)
	}
	other := func(bucket string) []string {
		c := append([]string{}, conn...)
		for i, a := range c {
			if a == "--s3-bucket" {
				c[i+1] = bucket
			}
		}
		return c
	}
	ns, err := layout.NewNamespace("owned", "d1")
	if err != nil {
		t.Fatal(err)
	}
	direct := testenv.EtcdClient(t, e)
	etcdKeys := func() map[string]int64 {
		resp, err := direct.Get(ctx, ns.Root(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, kv := range resp.Kvs {
			out[string(kv.Key)] = kv.ModRevision
		}
		return out
	}
	cfg := m.Config
	cfg.Bucket = "elsewhere"
	st, err := s3store.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// init --create-bucket makes the bucket, then refuses it: no marker.
	if _, errs, code := runCLI(t, append([]string{"init", "--create-bucket"}, other("elsewhere")...)...); code != exitcode.Usage || !strings.Contains(errs, "no ownership marker") {
		t.Fatalf("init --create-bucket of another bucket for an initialised domain: exit %d, want 2 naming the missing marker\n%s", code, errs)
	}
	refused := func(what, want string) {
		t.Helper()
		before := etcdKeys()
		for _, args := range [][]string{
			{"publish", "--resource", "job", "--owner", "w", "--ttl", "10s", "--key", "k2", "--file", body},
			{"publish", "--resource", "job", "--owner", "w", "--epoch", "1", "--fence", "1", "--seq", "2", "--key", "k3", "--file", body},
			{"rollback", "--resource", "job", "--to", "1.1.1", "--owner", "w", "--ttl", "10s"},
			{"init"},
		} {
			if _, errs, code := runCLI(t, append(args, other("elsewhere")...)...); code != exitcode.Usage || !strings.Contains(errs, want) {
				t.Errorf("%s, %s: exit %d, want 2 naming %q\n%s", args[0], what, code, want, errs)
			}
		}
		args := append(append([]string{"run", "--resource", "job"}, other("elsewhere")...), "--", "echo", "x")
		if _, errs, code := runCLI(t, args...); code != exitcode.Usage || !strings.Contains(errs, want) {
			t.Errorf("run, %s: exit %d, want 2 naming %q\n%s", what, code, want, errs)
		}
		out, _, code := runCLI(t, append([]string{"doctor"}, other("elsewhere")...)...)
		if code == 0 || !strings.Contains(out, "FAIL  ownership") || !strings.Contains(out, want) {
			t.Errorf("doctor, %s: exit %d, want a failed ownership check naming %q\n%s", what, code, want, out)
		}
		for k, rev := range etcdKeys() {
			if before[k] != rev {
				t.Errorf("%s: a refused command wrote etcd key %s", what, k)
			}
		}
		for o, err := range st.List(ctx, ns.ObjectsPrefix("job"), objstore.ListOptions{}) {
			if err != nil {
				t.Fatal(err)
			}
			t.Errorf("%s: a refused command wrote %s to the other bucket", what, o.Key)
		}
	}
	refused("bucket without the domain's marker", "no ownership marker")
	marker := []byte(`{"deployment_id":"another-deployment","created_at":"2024-01-01T00:00:00Z"}`)
	if _, err := objstore.PutSmallCreateOnly(ctx, st, ns.OwnershipObject(), marker, "application/json"); err != nil {
		t.Fatal(err)
	}
	refused("bucket of another deployment", "names deployment another-deployment")
}
