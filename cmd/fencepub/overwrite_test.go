//go:build !unit

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore/s3store"
	"github.com/fencepub/fencepub/internal/operator"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/lifecycle"
)

// exampleLifecyclePrefix is the key prefix examples/policies/lifecycle-noncurrent.json
// is written for (namespace.prefix: fencepub).
const exampleLifecyclePrefix = `"Prefix": "fencepub/"`

// exampleLifecycle reads examples/policies/lifecycle-noncurrent.json strictly
// (no unknown field, one document) into minio-go's lifecycle configuration,
// with its prefix replaced by prefix + "/".
func exampleLifecycle(t *testing.T, prefix string) *lifecycle.Configuration {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "examples", "policies", "lifecycle-noncurrent.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw, []byte(exampleLifecyclePrefix)) {
		t.Fatalf("examples/policies/lifecycle-noncurrent.json does not name %s", exampleLifecyclePrefix)
	}
	raw = bytes.ReplaceAll(raw, []byte(exampleLifecyclePrefix), []byte(`"Prefix": "`+prefix+`/"`))
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	cfg := lifecycle.NewConfiguration()
	if err := dec.Decode(cfg); err != nil {
		t.Fatalf("examples/policies/lifecycle-noncurrent.json: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		t.Fatalf("examples/policies/lifecycle-noncurrent.json: data after the document (%v)", err)
	}
	return cfg
}

// objectVersions lists every version and delete marker of key, newest
// first, with m's root keys.
func objectVersions(t *testing.T, m *devstack.MinIO, key string) []minio.ObjectInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []minio.ObjectInfo
	for o := range s3As(t, m, credentials.Value{AccessKeyID: m.Config.AccessKey, SecretAccessKey: m.Config.SecretKey}).ListObjects(ctx, m.Config.Bucket, minio.ListObjectsOptions{Prefix: key, WithVersions: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		if o.Key == key {
			out = append(out, o)
		}
	}
	return out
}

// versionWithETag returns the version of key whose ETag is etag (not a
// delete marker), and false when there is none.
func versionWithETag(t *testing.T, m *devstack.MinIO, key, etag string) (minio.ObjectInfo, bool) {
	t.Helper()
	for _, v := range objectVersions(t, m, key) {
		if !v.IsDeleteMarker && strings.Trim(v.ETag, `"`) == strings.Trim(etag, `"`) {
			return v, true
		}
	}
	return minio.ObjectInfo{}, false
}

// docProtection returns the `"protection": {...}` line that
// docs/security-object-store.md shows, decoded strictly.
func docProtection(t *testing.T) doctorProtection {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "security-object-store.md"))
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for l := range strings.Lines(string(raw)) {
		if strings.HasPrefix(l, `"protection": {`) {
			line = l
		}
	}
	var doc struct {
		Protection *doctorProtection `json:"protection"`
	}
	dec := json.NewDecoder(strings.NewReader("{" + line + "}"))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil || doc.Protection == nil {
		t.Fatalf("docs/security-object-store.md: the protection example %q: %v", line, err)
	}
	return *doc.Protection
}

// TestWorkerOverwrite shows, on MinIO with users holding exactly the
// example policies, what a worker's S3 key can do to a published object and
// what the deployment keeps (docs/security-object-store.md):
//   - MinIO has no s3:if-none-match condition key: it refuses
//     examples/policies/worker-aws.json, and worker.json lets a PUT without
//     If-None-Match overwrite a published object;
//   - readers refuse the overwritten object (`read` exits 1, writes nothing
//     to --out and no forged byte to stdout);
//   - without versioning the published bytes are gone;
//   - with versioning and examples/policies/lifecycle-noncurrent.json they
//     stay as a noncurrent version the worker cannot delete, and the
//     operator restores them by deleting the worker's version;
//   - GC's delete of a superseded object there adds a delete marker and
//     keeps the bytes as a noncurrent version, and GC does not warn about
//     versioning; doctor with the worker's keys reports the protections.
func TestWorkerOverwrite(t *testing.T) {
	conn, _, m := testenv.CLIStack(t, "fencepub")
	ns, err := layout.NewNamespace("fencepub", "d1")
	if err != nil {
		t.Fatal(err)
	}
	wKeys := policyKeys(t, m, ns.Root(), "worker")
	gKeys := policyKeys(t, m, ns.Root(), "gc")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	worker := s3As(t, m, wKeys)
	root := s3As(t, m, credentials.Value{AccessKeyID: m.Config.AccessKey, SecretAccessKey: m.Config.SecretKey})
	dir := t.TempDir()
	cli := func(want int, args ...string) string {
		t.Helper()
		return runWant(t, want, append(args, conn...)...)
	}
	publish := func(key, body string) layout.Pointer {
		t.Helper()
		file := filepath.Join(dir, key)
		if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		cli(0, "publish", "--resource", "job", "--owner", "w", "--ttl", "10s", "--key", key, "--file", file)
		var ptr layout.Pointer
		if err := json.Unmarshal([]byte(cli(0, "pointer", "--resource", "job", "-o", "json")), &ptr); err != nil || ptr.Object.Key == "" {
			t.Fatalf("pointer after publishing %s: %+v %v", key, ptr, err)
		}
		return ptr
	}
	overwrite := func(key, body string) {
		t.Helper()
		if _, err := worker.PutObject(ctx, m.Config.Bucket, key, strings.NewReader(body), int64(len(body)), minio.PutObjectOptions{}); err != nil {
			t.Fatalf("the worker's PUT without If-None-Match onto published %s: %v; MinIO let it through before (docs/security-object-store.md is then out of date)", key, err)
		}
	}
	// readRefused: `read` exits 1 naming the changed object, --out stays
	// absent, and stdout holds none of the forged bytes.
	readRefused := func(forged string) {
		t.Helper()
		out := filepath.Join(dir, "refused-"+forged)
		if msg := cli(exitcode.Internal, "read", "--resource", "job", "--out", out); !strings.Contains(msg, "changed") {
			t.Fatalf("read of an overwritten object: %s; want the object named changed", msg)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Fatalf("read --out of an overwritten object left %s (%v)", out, err)
		}
		if stdout, _, code := runCLI(t, append([]string{"read", "--resource", "job"}, conn...)...); code != exitcode.Internal || strings.Contains(stdout, forged) {
			t.Fatalf("read to stdout of an overwritten object: exit %d, stdout %q", code, stdout)
		}
	}
	readServes := func(want string) {
		t.Helper()
		out := filepath.Join(dir, "read.out")
		cli(0, "read", "--resource", "job", "--out", out)
		if got, err := os.ReadFile(out); err != nil || string(got) != want {
			t.Fatalf("read: %q, %v; want %q", got, err, want)
		}
	}

	// MinIO refuses the AWS policy: it knows no s3:if-none-match key.
	aws, err := os.ReadFile(filepath.Join("..", "..", "examples", "policies", "worker-aws.json"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stsAssumeRole(m, string(aws)); err == nil || !strings.Contains(strings.ToLower(err.Error()), "condition") {
		t.Fatalf("MinIO AssumeRole with worker-aws.json as the session policy: %v; want a refusal of its condition key", err)
	}

	// Unversioned: the worker overwrites v1, readers refuse it, and the
	// bucket no longer holds the published bytes.
	useKeys(t, wKeys)
	v1 := publish("k1", "published-1")
	overwrite(v1.Object.Key, "forged-1")
	readRefused("forged-1")
	if vs := objectVersions(t, m, v1.Object.Key); len(vs) != 1 {
		t.Fatalf("versions of %s in an unversioned bucket: %+v", v1.Object.Key, vs)
	}
	if _, kept := versionWithETag(t, m, v1.Object.Key, v1.Object.ETag); kept {
		t.Fatalf("the published bytes of %s are still there without versioning", v1.Object.Key)
	}

	// The operator turns versioning on with the example lifecycle rule;
	// doctor, with the worker's keys, reports both.
	if err := root.EnableVersioning(ctx, m.Config.Bucket); err != nil {
		t.Fatal(err)
	}
	rules := exampleLifecycle(t, ns.Prefix)
	if err := root.SetBucketLifecycle(ctx, m.Config.Bucket, rules); err != nil {
		t.Fatalf("MinIO setting examples/policies/lifecycle-noncurrent.json: %v", err)
	}
	o := doctorJSON(t, 0, conn...)
	checks := byName(o)
	wantStatus(t, checks, "versioning", checkPass, rules.Rules[0].ID)
	wantStatus(t, checks, "lifecycle", checkPass, "only expiring noncurrent versions")
	wantStatus(t, checks, "overwrite", checkPass, "noncurrent version")
	if p := o.Protection; p == nil || p.Versioning != "on" || p.NoncurrentExpiryRule != rules.Rules[0].ID ||
		p.NoncurrentExpiryDays != int(rules.Rules[0].NoncurrentVersionExpiration.NoncurrentDays) || p.CreateOnlyEnforced == nil || *p.CreateOnlyEnforced {
		t.Fatalf("doctor protection with versioning and the example rule: %+v", p)
	}
	if shown := docProtection(t); !reflect.DeepEqual(shown, *o.Protection) {
		t.Fatalf("docs/security-object-store.md shows protection %+v; doctor reports %+v", shown, *o.Protection)
	}

	// Versioned: the worker's overwrite is refused by readers again; the
	// published bytes are a noncurrent version, which the worker cannot
	// delete, nor its own forged version.
	v2 := publish("k2", "published-2")
	readServes("published-2") // a new publish brings readers back
	overwrite(v2.Object.Key, "forged-2")
	readRefused("forged-2")
	kept, ok := versionWithETag(t, m, v2.Object.Key, v2.Object.ETag)
	if !ok {
		t.Fatalf("the published bytes of %s are not kept under versioning: %+v", v2.Object.Key, objectVersions(t, m, v2.Object.Key))
	}
	vs := objectVersions(t, m, v2.Object.Key)
	if len(vs) != 2 || !vs[0].IsLatest || vs[0].VersionID == kept.VersionID {
		t.Fatalf("versions of the overwritten %s: %+v; want the forged one latest", v2.Object.Key, vs)
	}
	forged := vs[0]
	for _, v := range []minio.ObjectInfo{kept, forged} {
		if err := worker.RemoveObject(ctx, m.Config.Bucket, v2.Object.Key, minio.RemoveObjectOptions{VersionID: v.VersionID}); minio.ToErrorResponse(err).Code != "AccessDenied" {
			t.Fatalf("the worker deleting version %s of %s: %v; want AccessDenied", v.VersionID, v2.Object.Key, err)
		}
	}
	// The operator restores the published bytes: deleting the forged
	// version makes the kept one current again, with its ETag.
	if err := root.RemoveObject(ctx, m.Config.Bucket, v2.Object.Key, minio.RemoveObjectOptions{VersionID: forged.VersionID}); err != nil {
		t.Fatal(err)
	}
	readServes("published-2")

	// GC, with only its policy, deletes v2 once v3 supersedes it: a delete
	// marker, the bytes kept as a noncurrent version. No versioning warning:
	// the example rule expires the noncurrent versions.
	v3 := publish("k3", "published-3")
	useKeys(t, gKeys)
	gcPass := func() *operator.GCReport {
		t.Helper()
		rep := &operator.GCReport{}
		out, errs, code := runCLI(t, append([]string{"gc", "run", "--all", "--retain", "1", "--grace", "1ms", "--clock-skew", "0s", "-o", "json"}, conn...)...)
		if err := json.Unmarshal([]byte(out), rep); code != 0 || err != nil {
			t.Fatalf("gc run: exit %d, %v\n%s\n%s", code, err, out, errs)
		}
		return rep
	}
	var rep *operator.GCReport
	testenv.Eventually(t, "gc deletes the superseded v2", 30*time.Second, func() bool {
		rep = gcPass()
		vs := objectVersions(t, m, v2.Object.Key)
		return len(vs) > 0 && vs[0].IsDeleteMarker && vs[0].IsLatest
	})
	if strings.Contains(strings.Join(rep.Warnings, "\n"), "versioning") || len(rep.Errors) != 0 {
		t.Fatalf("gc with versioning and the example rule: warnings %v, errors %v", rep.Warnings, rep.Errors)
	}
	if v, ok := versionWithETag(t, m, v2.Object.Key, v2.Object.ETag); !ok {
		t.Fatalf("GC's delete removed the bytes of %s under versioning", v2.Object.Key)
	} else if body, err := root.GetObject(ctx, m.Config.Bucket, v2.Object.Key, minio.GetObjectOptions{VersionID: v.VersionID}); err != nil {
		t.Fatal(err)
	} else if got, err := io.ReadAll(body); err != nil || string(got) != "published-2" {
		t.Fatalf("the kept version of %s: %q, %v", v2.Object.Key, got, err)
	}
	// The next pass no longer lists the deleted keys: it scans v3 only.
	if rep = gcPass(); rep.Scanned != 1 || rep.Deleted != 0 || len(rep.Errors) != 0 {
		t.Fatalf("gc pass after the deletes under versioning: scanned %d, deleted %d, errors %v", rep.Scanned, rep.Deleted, rep.Errors)
	}
	useKeys(t, wKeys)
	readServes("published-3")
	if _, err := root.StatObject(ctx, m.Config.Bucket, v3.Object.Key, minio.StatObjectOptions{}); err != nil {
		t.Fatalf("the published v3: %v", err)
	}
}

// TestCreateOnlyEnforced runs fencepub through a store that refuses every
// object creation without If-None-Match, as AWS S3 does under
// examples/policies/worker-aws.json (testenv.RefuseOverwrite in front of
// MinIO): the domain's first acquire (its markers), publish in one PUT and
// in a multipart upload, read, rollback (part copies into a create-only
// upload) and gc all work, so every object fencepub writes carries
// If-None-Match; a PUT without it is refused.
func TestCreateOnlyEnforced(t *testing.T) {
	conn, _, m := testenv.CLIStack(t, "fencepub")
	guarded := testenv.RefuseOverwrite(t, m.Config)
	conn[slices.Index(conn, "--s3-endpoint")+1] = guarded.Endpoint
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := func(stdin string, args ...string) string {
		t.Helper()
		out, errs, code := publishCLI(t, ctx, stdin, append(args, conn...)...)
		if code != 0 {
			t.Fatalf("fencepub %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errs)
		}
		return out
	}
	pointer := func() layout.Pointer {
		t.Helper()
		var ptr layout.Pointer
		if err := json.Unmarshal([]byte(run("", "pointer", "--resource", "job", "-o", "json")), &ptr); err != nil || ptr.Object.Key == "" {
			t.Fatalf("pointer: %+v %v", ptr, err)
		}
		return ptr
	}
	publish := func(key, body string) {
		t.Helper()
		run(body, "publish", "--resource", "job", "--owner", "w", "--ttl", "10s", "--key", key, "-")
	}
	publish("k1", "first")
	first := pointer()
	publish("k2", strings.Repeat("m", 17<<20)) // above the part size: multipart
	run("", "rollback", "--resource", "job", "--to", first.Version.String(), "--owner", "w", "--ttl", "10s")
	if got := run("", "read", "--resource", "job"); got != "first" {
		t.Fatalf("read after the rollback: %.40q", got)
	}
	run("", "gc", "run", "--all")

	st, err := s3store.New(guarded)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Client.PutObject(ctx, m.Config.Bucket, pointer().Object.Key, strings.NewReader("x"), 1, minio.PutObjectOptions{}); minio.ToErrorResponse(err).Code != "AccessDenied" {
		t.Fatalf("a PUT without If-None-Match through the proxy: %v; want AccessDenied", err)
	}
}
