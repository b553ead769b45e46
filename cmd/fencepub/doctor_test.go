//go:build !unit

package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/minio/minio-go/v7/pkg/lifecycle"
)

// doctorJSON runs `fencepub doctor -o json` with args, wants exit code
// want, and returns its output.
func doctorJSON(t *testing.T, want int, args ...string) doctorOutput {
	t.Helper()
	out, errs, code := runCLI(t, append([]string{"doctor", "-o", "json"}, args...)...)
	if code != want {
		t.Fatalf("doctor %v: exit %d, want %d\nstdout: %s\nstderr: %s", args, code, want, out, errs)
	}
	var o doctorOutput
	if err := json.Unmarshal([]byte(out), &o); err != nil {
		t.Fatalf("doctor JSON: %v\n%s", err, out)
	}
	if o.OK != (want == 0) {
		t.Fatalf("doctor ok=%v with exit %d: %s", o.OK, code, out)
	}
	return o
}

// byName returns o's checks by name.
func byName(o doctorOutput) map[string]doctorCheck {
	m := map[string]doctorCheck{}
	for _, c := range o.Checks {
		m[c.Name] = c
	}
	return m
}

// doctorChecks is doctorJSON's checks by name.
func doctorChecks(t *testing.T, want int, args ...string) map[string]doctorCheck {
	t.Helper()
	return byName(doctorJSON(t, want, args...))
}

// wantStatus fails t unless check name has status and, when given, a
// detail or fix containing text.
func wantStatus(t *testing.T, checks map[string]doctorCheck, name, status, text string) {
	t.Helper()
	c, ok := checks[name]
	if !ok || c.Status != status || !strings.Contains(c.Detail+" "+c.Fix, text) {
		t.Fatalf("check %s = %+v, want %s mentioning %q (all: %+v)", name, c, status, text, checks)
	}
}

// TestDoctorAndInit runs doctor and init on a real etcd and MinIO: every
// check passes on a healthy stack but the overwrite check, which warns that
// the keys can overwrite an object in an unversioned bucket (and the domain
// until `init`); a missing bucket fails with its fix and `init
// --create-bucket` creates it; versioning without a noncurrent expiry rule
// and a rule expiring current objects warn, and the overwrite check then
// passes (versioning keeps the bytes); behind a proxy refusing PUTs without
// If-None-Match (AWS S3 under worker-aws.json) the overwrite check reports
// create-only enforced; a store that ignores If-None-Match fails doctor's
// create-only probe and is refused by init (exit 2, naming the endpoint).
func TestDoctorAndInit(t *testing.T) {
	conn, _, m := testenv.CLIStack(t, "doctor")
	o := doctorJSON(t, 0, conn...)
	checks := byName(o)
	for _, name := range []string{"etcd", "bucket", "create-only", "if-match", "versioning", "lifecycle"} {
		wantStatus(t, checks, name, checkPass, "")
	}
	wantStatus(t, checks, "overwrite", checkWarn, "published bytes are lost")
	if p := o.Protection; p == nil || p.Versioning != "off" || p.NoncurrentExpiryRule != "" || p.CreateOnlyEnforced == nil || *p.CreateOnlyEnforced {
		t.Fatalf("doctor protection on a plain MinIO bucket: %+v", p)
	}
	wantStatus(t, checks, "domain", checkWarn, "fencepub init")
	if c := checks["clock"]; c.Status != checkPass || !strings.Contains(c.Detail, "etcd's leader") {
		t.Fatalf("clock check on one host: %+v", c)
	}

	initJSON := func(args ...string) initOutput {
		t.Helper()
		out, errs, code := runCLI(t, append([]string{"init", "-o", "json"}, args...)...)
		var o initOutput
		if err := json.Unmarshal([]byte(out), &o); code != 0 || err != nil {
			t.Fatalf("init %v: exit %d, %v\n%s\n%s", args, code, err, out, errs)
		}
		return o
	}
	first := initJSON(conn...)
	if !first.Initialised || first.Epoch != 1 || first.DeploymentID == "" {
		t.Fatalf("init: %+v", first)
	}
	if again := initJSON(conn...); again.Initialised || again.Epoch != 1 || again.DeploymentID != first.DeploymentID {
		t.Fatalf("init again: %+v, first %+v", again, first)
	}
	wantStatus(t, doctorChecks(t, 0, conn...), "domain", checkPass, "epoch 1")

	// A missing bucket: doctor fails with the fix, publish names it, init
	// --create-bucket creates it.
	other := slices.Clone(conn)
	other[slices.Index(other, "--s3-bucket")+1] = "doctor-other"
	other[slices.Index(other, "--domain")+1] = "d2"
	o = doctorJSON(t, exitcode.Internal, other...)
	wantStatus(t, byName(o), "bucket", checkFail, "fencepub init --create-bucket")
	if o.Protection != nil {
		t.Fatalf("doctor protection for a missing bucket: %+v", o.Protection)
	}
	if _, errs, code := publishCLI(t, context.Background(), "body", append([]string{"publish", "--resource", "r", "--owner", "o", "--ttl", "10s", "--key", "k", "-"}, other...)...); code != exitcode.Usage || !strings.Contains(errs, "fencepub init --create-bucket") {
		t.Fatalf("publish to a missing bucket: exit %d, %s", code, errs)
	}
	if created := initJSON(append([]string{"--create-bucket"}, other...)...); !created.BucketCreated || !created.Initialised {
		t.Fatalf("init --create-bucket: %+v", created)
	}

	// Versioning and a lifecycle rule on that bucket warn.
	st, err := m.Store()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := st.Client.EnableVersioning(ctx, "doctor-other"); err != nil {
		t.Fatal(err)
	}
	rules := lifecycle.NewConfiguration()
	rules.Rules = []lifecycle.Rule{{ID: "expire", Status: "Enabled", RuleFilter: lifecycle.Filter{Prefix: "logs/"}, Expiration: lifecycle.Expiration{Days: 30}}}
	if err := st.Client.SetBucketLifecycle(ctx, "doctor-other", rules); err != nil {
		t.Fatal(err)
	}
	checks = doctorChecks(t, 0, other...)
	wantStatus(t, checks, "versioning", checkWarn, "noncurrent")
	wantStatus(t, checks, "lifecycle", checkWarn, "1 lifecycle rule")
	wantStatus(t, checks, "overwrite", checkPass, "noncurrent version")
	if err := st.Client.SuspendVersioning(ctx, "doctor-other"); err != nil {
		t.Fatal(err)
	}
	o = doctorJSON(t, 0, other...)
	wantStatus(t, byName(o), "versioning", checkWarn, "suspended")
	wantStatus(t, byName(o), "overwrite", checkWarn, "versioning is suspended")
	if p := o.Protection; p == nil || p.Versioning != "suspended" {
		t.Fatalf("doctor protection with versioning suspended: %+v", p)
	}

	// A store that refuses a PUT without If-None-Match to these keys.
	guarded := slices.Clone(conn)
	guarded[slices.Index(guarded, "--s3-endpoint")+1] = testenv.RefuseOverwrite(t, m.Config).Endpoint
	o = doctorJSON(t, 0, guarded...)
	wantStatus(t, byName(o), "overwrite", checkPass, "can only create objects")
	if p := o.Protection; p == nil || p.CreateOnlyEnforced == nil || !*p.CreateOnlyEnforced {
		t.Fatalf("doctor protection behind a store refusing overwrites: %+v", p)
	}

	// A store that ignores If-None-Match.
	bad := testenv.IgnoreCreateOnly(t, m.Config)
	ignoring := slices.Clone(conn)
	ignoring[slices.Index(ignoring, "--s3-endpoint")+1] = bad.Endpoint
	ignoring[slices.Index(ignoring, "--domain")+1] = "d3"
	o = doctorJSON(t, exitcode.Internal, ignoring...)
	wantStatus(t, byName(o), "create-only", checkFail, "If-None-Match")
	wantStatus(t, byName(o), "overwrite", checkWarn, "not checked")
	if p := o.Protection; p == nil || p.CreateOnlyEnforced != nil {
		t.Fatalf("doctor protection when the create-only probe failed: %+v", p)
	}
	if out := runWant(t, exitcode.Usage, append([]string{"init"}, ignoring...)...); !strings.Contains(out, bad.Endpoint) || !strings.Contains(out, "If-None-Match") {
		t.Fatalf("init on a store ignoring If-None-Match: %s", out)
	}
}
