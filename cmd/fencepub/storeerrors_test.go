//go:build !unit

package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

// TestStoreErrorsSayWhatToCheck points a working domain at an object store
// that is not there, and at a port that is not S3, and runs the binary as an
// operator would: an unavailable store exits 115 naming the endpoint, the
// bucket and the keys to check, with one "fencepub:" prefix; an endpoint
// that answers but is not S3 exits 2 saying so, never advising
// `init --create-bucket`.
func TestStoreErrorsSayWhatToCheck(t *testing.T) {
	bin := buildCLI(t)
	conn, e, _ := testenv.CLIStack(t, "storeerr")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	body := filepath.Join(dir, "body.txt")
	if err := os.WriteFile(body, []byte("published"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errs, code := child(t, ctx, bin, nil, append([]string{"publish", "--resource", "job", "--owner", "w", "--ttl", "10s", "--key", "k1", "--file", body, "-o", "json"}, conn...)...); code != 0 {
		t.Fatalf("publish: exit %d\n%s%s", code, out, errs)
	}

	t.Run("unavailable", func(t *testing.T) {
		port, err := devstack.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		dead := "127.0.0.1:" + strconv.Itoa(port)
		down := withFlag(conn, "--s3-endpoint", dead)
		for _, args := range [][]string{
			{"read", "--resource", "job", "--timeout", "20s"},
			{"run", "--resource", "job2", "--", "echo", "x"},
			{"gc", "run", "--all"},
			{"resolve", "--resource", "job", "--key", "k9", "--epoch", "1", "--fence", "1", "--seq", "9", "--sha256", zeroDigest, "--timeout", "20s"},
		} {
			_, errs, code := child(t, ctx, bin, nil, withConn(args, down)...)
			t.Logf("%s: exit %d\n%s", args[0], code, errs)
			if code != exitcode.Unavailable {
				t.Errorf("%s with the store down: exit %d, want 115\n%s", args[0], code, errs)
			}
			for _, want := range []string{"object store at " + dead, "s3.endpoint"} {
				if !strings.Contains(errs, want) {
					t.Errorf("%s with the store down: stderr does not name %q:\n%s", args[0], want, errs)
				}
			}
			if strings.Contains(errs, "fencepub: fencepub:") {
				t.Errorf("%s: doubled prefix in\n%s", args[0], errs)
			}
		}
	})

	t.Run("not S3", func(t *testing.T) {
		etcdPort := strings.TrimPrefix(e.Members[0].ClientURL, "http://") // answers HTTP, not S3
		notS3 := withFlag(conn, "--s3-endpoint", etcdPort)
		for _, args := range [][]string{
			{"publish", "--resource", "job", "--owner", "w", "--ttl", "10s", "--key", "k2", "--file", body},
			{"init"},
			{"authority", "acquire", "--resource", "other"},
		} {
			_, errs, code := child(t, ctx, bin, nil, append(args, notS3...)...)
			t.Logf("%s: exit %d\n%s", args[0], code, errs)
			if code != exitcode.Usage || !strings.Contains(errs, "not an S3 endpoint") || strings.Contains(errs, "create-bucket") {
				t.Errorf("%s with s3.endpoint at etcd's port: exit %d; want 2 saying it is not an S3 endpoint, without create-bucket:\n%s", args[0], code, errs)
			}
		}
		out, _, code := child(t, ctx, bin, nil, append([]string{"doctor"}, notS3...)...)
		if code == 0 || !strings.Contains(out, "not an S3 endpoint") || strings.Contains(out, "create-bucket") {
			t.Errorf("doctor with s3.endpoint at etcd's port: exit %d; want a failed check saying it is not an S3 endpoint:\n%s", code, out)
		}
	})
}
