//go:build !unit

package main

import (
	"strings"
	"testing"

	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/objstore/s3store"
)

// TestForeignBucketRefused points an initialised domain at another bucket
// (DESIGN.md invariant 9): first one without the domain's ownership marker,
// then one whose marker names another deployment. init, publish (acquiring
// or with an existing grant), run and rollback refuse it with exit 2 naming
// the marker, before anything is minted in etcd or written to the bucket;
// doctor fails its ownership check. The domain's own bucket passes all of it.
func TestForeignBucketRefused(t *testing.T) {
	r := newCLIRig(t, "owned")
	body := r.file("body.txt", "owned")
	r.run("", 0, "publish", "--resource", "job", "--owner", "w", "--ttl", "10s", "--key", "k1", "--file", body)
	if out := r.run("", 0, "doctor"); !strings.Contains(out, "PASS  ownership") {
		t.Fatalf("doctor on the domain's own bucket: no passed ownership check:\n%s", out)
	}
	other := withFlag(r.conn, "--s3-bucket", "elsewhere")
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		return publishCLI(t, r.ctx, "", withConn(args, other)...)
	}
	ns, err := layout.NewNamespace("adv", "owned")
	if err != nil {
		t.Fatal(err)
	}
	cfg := r.s3
	cfg.Bucket = "elsewhere"
	st, err := s3store.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// init --create-bucket makes the bucket, then refuses it: no marker.
	if _, errs, code := cli("init", "--create-bucket"); code != exitcode.Usage || !strings.Contains(errs, "no ownership marker") {
		t.Fatalf("init --create-bucket of another bucket for an initialised domain: exit %d, want 2 naming the missing marker\n%s", code, errs)
	}
	refused := func(what, want string) {
		t.Helper()
		before := r.keys()
		for _, args := range [][]string{
			{"publish", "--resource", "job", "--owner", "w", "--ttl", "10s", "--key", "k2", "--file", body},
			{"publish", "--resource", "job", "--owner", "w", "--epoch", "1", "--fence", "1", "--seq", "2", "--key", "k3", "--file", body},
			{"rollback", "--resource", "job", "--to", "1.1.1", "--owner", "w", "--ttl", "10s"},
			{"init"},
			{"run", "--resource", "job", "--", "echo", "x"},
		} {
			if _, errs, code := cli(args...); code != exitcode.Usage || !strings.Contains(errs, want) {
				t.Errorf("%s, %s: exit %d, want 2 naming %q\n%s", args[0], what, code, want, errs)
			}
		}
		out, _, code := cli("doctor")
		if code == 0 || !strings.Contains(out, "FAIL  ownership") || !strings.Contains(out, want) {
			t.Errorf("doctor, %s: exit %d, want a failed ownership check naming %q\n%s", what, code, want, out)
		}
		for k, rev := range r.keys() {
			if before[k] != rev {
				t.Errorf("%s: a refused command wrote etcd key %s", what, k)
			}
		}
		for o, err := range st.List(r.ctx, ns.ObjectsPrefix("job"), objstore.ListOptions{}) {
			if err != nil {
				t.Fatal(err)
			}
			t.Errorf("%s: a refused command wrote %s to the other bucket", what, o.Key)
		}
	}
	refused("bucket without the domain's marker", "no ownership marker")
	marker := []byte(`{"deployment_id":"another-deployment","created_at":"2024-01-01T00:00:00Z"}`)
	if _, err := objstore.PutSmallCreateOnly(r.ctx, st, ns.OwnershipObject(), marker, "application/json"); err != nil {
		t.Fatal(err)
	}
	refused("bucket of another deployment", "names deployment another-deployment")
}
