//go:build !unit

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// The example policies are written for bucket "results" and the domain root
// "fencepub/nightly/" (docs/security.md); policyKeys substitutes both.
const (
	examplePolicyBucket = "arn:aws:s3:::results"
	examplePolicyRoot   = "fencepub/nightly/"
)

// policyKeys returns temporary keys of m (STS AssumeRole with m's root
// keys, through minio-go) whose session policy is
// examples/policies/<policy>.json with the example's bucket and domain root
// replaced by m's bucket and root. MinIO grants temporary keys the
// intersection of the session policy and the caller's, so keys assumed by
// the root hold exactly the example policy.
func policyKeys(t *testing.T, m *devstack.MinIO, root, policy string) credentials.Value {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "examples", "policies", policy+".json"))
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(raw) || !bytes.Contains(raw, []byte(examplePolicyBucket)) {
		t.Fatalf("examples/policies/%s.json is not JSON naming %s", policy, examplePolicyBucket)
	}
	doc := strings.ReplaceAll(string(raw), examplePolicyBucket, "arn:aws:s3:::"+m.Config.Bucket)
	return assumeRole(t, m, strings.ReplaceAll(doc, examplePolicyRoot, root))
}

// assumeRole returns temporary keys of m's root user (STS AssumeRole
// through minio-go), with a session token, limited to the session policy
// doc when it is not "". It waits up to a minute for MinIO's STS.
func assumeRole(t *testing.T, m *devstack.MinIO, doc string) credentials.Value {
	t.Helper()
	var tmp credentials.Value
	var err error
	// A MinIO just started answers "Server not initialized" until its IAM
	// subsystem has loaded.
	testenv.Eventually(t, "MinIO's STS to initialise", time.Minute, func() bool {
		tmp, err = stsAssumeRole(m, doc)
		return err == nil || !strings.Contains(err.Error(), "not initialized")
	})
	if err != nil {
		t.Fatalf("AssumeRole: %v", err)
	}
	if tmp.SessionToken == "" || tmp.AccessKeyID == m.Config.AccessKey {
		t.Fatalf("AssumeRole gave no temporary keys: access key %q, token set %v", tmp.AccessKeyID, tmp.SessionToken != "")
	}
	return tmp
}

// stsAssumeRole asks m's STS for temporary keys of its root user limited to
// the session policy doc, and returns them or the refusal.
func stsAssumeRole(m *devstack.MinIO, doc string) (credentials.Value, error) {
	host, _, err := m.Config.HostSecure()
	if err != nil {
		return credentials.Value{}, err
	}
	sts, err := credentials.NewSTSAssumeRole("http://"+host, credentials.STSAssumeRoleOptions{
		AccessKey: m.Config.AccessKey, SecretKey: m.Config.SecretKey, Policy: doc, DurationSeconds: 900})
	if err != nil {
		return credentials.Value{}, err
	}
	return sts.GetWithContext(&credentials.CredContext{Client: http.DefaultClient})
}

// s3As returns a minio-go client of m's endpoint with the given keys.
func s3As(t *testing.T, m *devstack.MinIO, keys credentials.Value) *minio.Client {
	t.Helper()
	host, secure, err := m.Config.HostSecure()
	if err != nil {
		t.Fatal(err)
	}
	c, err := minio.New(host, &minio.Options{Creds: credentials.NewStaticV4(keys.AccessKeyID, keys.SecretAccessKey, keys.SessionToken), Secure: secure})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// useKeys makes temporary keys the CLI's only credential source: the
// environment's AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
// AWS_SESSION_TOKEN under s3.credentials: auto.
func useKeys(t *testing.T, keys credentials.Value) {
	clearS3Env(t)
	t.Setenv("AWS_ACCESS_KEY_ID", keys.AccessKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", keys.SecretAccessKey)
	t.Setenv("AWS_SESSION_TOKEN", keys.SessionToken)
}

// TestBucketPolicies runs the protocol with keys holding only the example
// policies of examples/policies: a worker publishes (a single PUT
// and a multipart upload) and cannot delete what it published, a reader
// reads and can neither write nor delete, and GC deletes superseded
// versions with only its own policy.
func TestBucketPolicies(t *testing.T) {
	conn, _, m := testenv.CLIStack(t, "fencepub")
	ns, err := layout.NewNamespace("fencepub", "d1")
	if err != nil {
		t.Fatal(err)
	}
	wKeys := policyKeys(t, m, ns.Root(), "worker")
	rKeys := policyKeys(t, m, ns.Root(), "reader")
	gKeys := policyKeys(t, m, ns.Root(), "gc")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := func(want int, stdin string, args ...string) string {
		t.Helper()
		out, errs, code := publishCLI(t, ctx, stdin, append(args, conn...)...)
		if code != want {
			t.Fatalf("fencepub %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, want, out, errs)
		}
		return out + errs
	}

	// The worker initialises the domain and publishes: v1 in one PUT, v2
	// in a multipart upload (a body of unknown length above the part size),
	// v3 in one PUT.
	useKeys(t, wKeys)
	publish := func(key, stdin string) {
		t.Helper()
		run(0, stdin, "publish", "--resource", "job", "--owner", "w", "--ttl", "10s", "--key", key, "-")
	}
	publish("k1", "v1")
	big := strings.Repeat("x", 17<<20)
	publish("k2", big)
	var ptr layout.Pointer
	if err := json.Unmarshal([]byte(run(0, "", "pointer", "--resource", "job", "-o", "json")), &ptr); err != nil || ptr.Object.Key == "" {
		t.Fatalf("pointer after the multipart publish: %+v %v", ptr, err)
	}
	multipart := ptr.Object.Key
	publish("k3", "v3")

	worker := s3As(t, m, wKeys)
	if err := worker.RemoveObject(ctx, m.Config.Bucket, multipart, minio.RemoveObjectOptions{}); minio.ToErrorResponse(err).Code != "AccessDenied" {
		t.Fatalf("worker deleting published %s: %v; want AccessDenied", multipart, err)
	}
	if _, err := worker.PutObject(ctx, m.Config.Bucket, "other/d1/job/x", strings.NewReader("x"), 1, minio.PutObjectOptions{}); minio.ToErrorResponse(err).Code != "AccessDenied" {
		t.Fatalf("worker writing outside its domain: %v; want AccessDenied", err)
	}

	// The reader reads; it may not write or delete.
	useKeys(t, rKeys)
	if out := run(0, "", "read", "--resource", "job"); !strings.Contains(out, "v3") {
		t.Fatalf("reader read: %q", out)
	}
	reader := s3As(t, m, rKeys)
	if _, err := reader.PutObject(ctx, m.Config.Bucket, ns.Root()+"job/x", strings.NewReader("x"), 1, minio.PutObjectOptions{}); minio.ToErrorResponse(err).Code != "AccessDenied" {
		t.Fatalf("reader writing: %v; want AccessDenied", err)
	}
	if err := reader.RemoveObject(ctx, m.Config.Bucket, multipart, minio.RemoveObjectOptions{}); minio.ToErrorResponse(err).Code != "AccessDenied" {
		t.Fatalf("reader deleting: %v; want AccessDenied", err)
	}

	// GC with only its policy deletes v1 and v2 once they are past a 1ms
	// grace (no clock skew) on the domain clock the first pass starts, and
	// keeps v3.
	useKeys(t, gKeys)
	run(0, "", "gc", "run", "--all")
	root := s3As(t, m, credentials.Value{AccessKeyID: m.Config.AccessKey, SecretAccessKey: m.Config.SecretKey})
	testenv.Eventually(t, "gc deletes the superseded multipart object", 30*time.Second, func() bool {
		run(0, "", "gc", "run", "--all", "--retain", "1", "--grace", "1ms", "--clock-skew", "0s")
		_, err := root.StatObject(ctx, m.Config.Bucket, multipart, minio.StatObjectOptions{})
		return minio.ToErrorResponse(err).Code == "NoSuchKey"
	})
	useKeys(t, rKeys)
	if out := run(0, "", "read", "--resource", "job"); !strings.Contains(out, "v3") {
		t.Fatalf("reader read after gc: %q", out)
	}
}
