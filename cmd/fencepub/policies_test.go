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

	"github.com/fencepub/fencepub/internal/harness/localstack"
	"github.com/fencepub/fencepub/internal/harness/testenv"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/minio/madmin-go/v3"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// The example policies are written for bucket "results" and the domain root
// "fencepub/nightly/" (docs/security.md); policyUser substitutes both.
const (
	examplePolicyBucket = "arn:aws:s3:::results"
	examplePolicyRoot   = "fencepub/nightly/"
)

// policyUser creates the MinIO user name (secret name+"-secret") through
// the admin API, attached to examples/policies/<policy>.json only, with the
// example's bucket and domain root replaced by m's bucket and root. It
// returns the user's keys.
func policyUser(t *testing.T, m *localstack.MinIO, root, name, policy string) (string, string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "examples", "policies", policy+".json"))
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(raw) || !bytes.Contains(raw, []byte(examplePolicyBucket)) {
		t.Fatalf("examples/policies/%s.json is not JSON naming %s", policy, examplePolicyBucket)
	}
	doc := strings.ReplaceAll(string(raw), examplePolicyBucket, "arn:aws:s3:::"+m.Config.Bucket)
	doc = strings.ReplaceAll(doc, examplePolicyRoot, root)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pname := "fencepub-" + policy
	if err := minioAdmin(t, m).AddCannedPolicy(ctx, pname, []byte(doc)); err != nil {
		t.Fatalf("add policy %s: %v", pname, err)
	}
	secret := name + "-secret"
	minioUser(t, m, name, secret, pname)
	return name, secret
}

// minioAdmin is a MinIO admin API client of m with its root keys.
func minioAdmin(t *testing.T, m *localstack.MinIO) *madmin.AdminClient {
	t.Helper()
	host, secure, err := m.Config.HostSecure()
	if err != nil {
		t.Fatal(err)
	}
	adm, err := madmin.NewWithOptions(host, &madmin.Options{Creds: credentials.NewStaticV4(m.Config.AccessKey, m.Config.SecretKey, ""), Secure: secure})
	if err != nil {
		t.Fatal(err)
	}
	return adm
}

// minioUser creates the MinIO user name with secret, attached to policy
// only (a policy created before, or a built-in one such as readwrite).
func minioUser(t *testing.T, m *localstack.MinIO, name, secret, policy string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := minioAdmin(t, m)
	if err := adm.AddUser(ctx, name, secret); err != nil {
		t.Fatalf("add user %s: %v", name, err)
	}
	if _, err := adm.AttachPolicy(ctx, madmin.PolicyAssociationReq{Policies: []string{policy}, User: name}); err != nil {
		t.Fatalf("attach %s to %s: %v", policy, name, err)
	}
}

// assumeRole returns temporary keys of the MinIO user (STS AssumeRole
// through minio-go), with a session token.
func assumeRole(t *testing.T, m *localstack.MinIO, user, secret string) credentials.Value {
	t.Helper()
	host, _, err := m.Config.HostSecure()
	if err != nil {
		t.Fatal(err)
	}
	sts, err := credentials.NewSTSAssumeRole("http://"+host, credentials.STSAssumeRoleOptions{AccessKey: user, SecretKey: secret, DurationSeconds: 900})
	if err != nil {
		t.Fatal(err)
	}
	tmp, err := sts.GetWithContext(&credentials.CredContext{Client: http.DefaultClient})
	if err != nil {
		t.Fatalf("AssumeRole as %s: %v", user, err)
	}
	if tmp.SessionToken == "" || tmp.AccessKeyID == user {
		t.Fatalf("AssumeRole gave no temporary keys: access key %q, token set %v", tmp.AccessKeyID, tmp.SessionToken != "")
	}
	return tmp
}

// s3As returns a minio-go client of m's endpoint with the given keys.
func s3As(t *testing.T, m *localstack.MinIO, access, secret string) *minio.Client {
	t.Helper()
	host, secure, err := m.Config.HostSecure()
	if err != nil {
		t.Fatal(err)
	}
	c, err := minio.New(host, &minio.Options{Creds: credentials.NewStaticV4(access, secret, ""), Secure: secure})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// useKeys makes the CLI's s3.access_key and s3.secret_key these keys.
func useKeys(t *testing.T, access, secret string) {
	t.Setenv("FENCEPUB_S3_ACCESS_KEY", access)
	t.Setenv("FENCEPUB_S3_SECRET_KEY", secret)
}

// TestBucketPolicies runs the protocol with MinIO users holding only the
// example policies of examples/policies: a worker publishes (a single PUT
// and a multipart upload) and cannot delete what it published, a reader
// reads and can neither write nor delete, and GC deletes superseded
// versions with only its own policy.
func TestBucketPolicies(t *testing.T) {
	conn, _, m := testenv.CLIStack(t, "fencepub")
	ns, err := layout.NewNamespace("fencepub", "d1")
	if err != nil {
		t.Fatal(err)
	}
	wKey, wSecret := policyUser(t, m, ns.Root(), "worker", "worker")
	rKey, rSecret := policyUser(t, m, ns.Root(), "reader", "reader")
	gKey, gSecret := policyUser(t, m, ns.Root(), "collector", "gc")
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
	useKeys(t, wKey, wSecret)
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

	worker := s3As(t, m, wKey, wSecret)
	if err := worker.RemoveObject(ctx, m.Config.Bucket, multipart, minio.RemoveObjectOptions{}); minio.ToErrorResponse(err).Code != "AccessDenied" {
		t.Fatalf("worker deleting published %s: %v; want AccessDenied", multipart, err)
	}
	if _, err := worker.PutObject(ctx, m.Config.Bucket, "other/d1/job/x", strings.NewReader("x"), 1, minio.PutObjectOptions{}); minio.ToErrorResponse(err).Code != "AccessDenied" {
		t.Fatalf("worker writing outside its domain: %v; want AccessDenied", err)
	}

	// The reader reads; it may not write or delete.
	useKeys(t, rKey, rSecret)
	if out := run(0, "", "read", "--resource", "job"); !strings.Contains(out, "v3") {
		t.Fatalf("reader read: %q", out)
	}
	reader := s3As(t, m, rKey, rSecret)
	if _, err := reader.PutObject(ctx, m.Config.Bucket, ns.Root()+"job/x", strings.NewReader("x"), 1, minio.PutObjectOptions{}); minio.ToErrorResponse(err).Code != "AccessDenied" {
		t.Fatalf("reader writing: %v; want AccessDenied", err)
	}
	if err := reader.RemoveObject(ctx, m.Config.Bucket, multipart, minio.RemoveObjectOptions{}); minio.ToErrorResponse(err).Code != "AccessDenied" {
		t.Fatalf("reader deleting: %v; want AccessDenied", err)
	}

	// GC with only its policy deletes v1 and v2 once they are past a 1ms
	// grace (no clock skew) on the domain clock the first pass starts, and
	// keeps v3.
	useKeys(t, gKey, gSecret)
	run(0, "", "gc", "run", "--all")
	root := s3As(t, m, m.Config.AccessKey, m.Config.SecretKey)
	testenv.Eventually(t, "gc deletes the superseded multipart object", 30*time.Second, func() bool {
		run(0, "", "gc", "run", "--all", "--retain", "1", "--grace", "1ms", "--clock-skew", "0s")
		_, err := root.StatObject(ctx, m.Config.Bucket, multipart, minio.StatObjectOptions{})
		return minio.ToErrorResponse(err).Code == "NoSuchKey"
	})
	useKeys(t, rKey, rSecret)
	if out := run(0, "", "read", "--resource", "job"); !strings.Contains(out, "v3") {
		t.Fatalf("reader read after gc: %q", out)
	}
}
