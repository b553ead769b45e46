//go:build !unit

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/objstore/s3store"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The CLI's error contract: hostile flag values, the exact JSON names and
// exit codes, an unreachable etcd and a missing bucket.

// cliRig is a dedicated etcd and MinIO with the connection flags of one
// domain.
type cliRig struct {
	t    *testing.T
	ctx  context.Context
	conn []string
	etcd *clientv3.Client
	s3   s3store.Config // the MinIO's
	dir  string
}

func newCLIRig(t *testing.T, domain string) *cliRig {
	t.Helper()
	e := testenv.StartEtcd(t, devstack.EtcdOptions{})
	m := testenv.StartMinIO(t, devstack.MinIOOptions{})
	t.Setenv("FENCEPUB_S3_ACCESS_KEY", m.Config.AccessKey)
	t.Setenv("FENCEPUB_S3_SECRET_KEY", m.Config.SecretKey)
	cli := testenv.EtcdClient(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return &cliRig{t: t, ctx: ctx, etcd: cli, s3: m.Config, dir: t.TempDir(),
		conn: []string{"--etcd-endpoints", e.Endpoints()[0], "--s3-endpoint", m.Config.Endpoint,
			"--s3-bucket", m.Config.Bucket, "--prefix", "adv", "--domain", domain}}
}

// run runs fencepub with args plus the rig's connection flags and fails
// unless it exits with want. It returns stdout.
func (r *cliRig) run(stdin string, want int, args ...string) string {
	r.t.Helper()
	out, errs, code := publishCLI(r.t, r.ctx, stdin, append(args, r.conn...)...)
	if code != want {
		r.t.Errorf("fencepub %q: exit %d, want %d\nstdout: %s\nstderr: %s", args, code, want, out, errs)
	}
	return out
}

// withFlag returns a copy of args in which the value of flag (given as
// "--flag value") is value.
func withFlag(args []string, flag, value string) []string {
	out := slices.Clone(args)
	if i := slices.Index(out, flag); i >= 0 && i+1 < len(out) {
		out[i+1] = value
	}
	return out
}

// withConn returns args with the connection flags conn added: at the end,
// or before a "--" that starts run's CMD.
func withConn(args, conn []string) []string {
	i := slices.Index(args, "--")
	if i < 0 {
		i = len(args)
	}
	return append(append(slices.Clone(args[:i]), conn...), args[i:]...)
}

// keys returns every etcd key and its mod revision under the rig's prefix.
func (r *cliRig) keys() map[string]int64 {
	r.t.Helper()
	resp, err := r.etcd.Get(r.ctx, "adv/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		r.t.Fatal(err)
	}
	out := map[string]int64{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = kv.ModRevision
	}
	return out
}

func (r *cliRig) file(name, content string) string {
	r.t.Helper()
	p := filepath.Join(r.dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		r.t.Fatal(err)
	}
	return p
}

// jsonKeys decodes one JSON object into a map, so field names are checked
// exactly (encoding/json matches struct fields case-insensitively).
func jsonKeys(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, s)
	}
	return m
}

// requireFields fails unless m has every dotted path in paths.
func requireFields(t *testing.T, what string, m map[string]any, paths ...string) {
	t.Helper()
	for _, p := range paths {
		var cur any = m
		for _, part := range strings.Split(p, ".") {
			obj, ok := cur.(map[string]any)
			if !ok {
				cur = nil
				break
			}
			cur, ok = obj[part]
			if !ok {
				cur = nil
				break
			}
		}
		if cur == nil {
			t.Errorf("%s JSON lacks %q: %v", what, p, m)
		}
	}
}

// TestCLIBadInput feeds hostile names and numbers to every
// command: each exits 2 and writes nothing to etcd — in particular
// `publish --ttl` with a bad key or seq no longer acquires a grant (mints
// a generation) before refusing.
func TestCLIBadInput(t *testing.T) {
	r := newCLIRig(t, "bad")
	a := r.file("a.txt", "alpha")
	// A grant to name in the raw forms, and a published version.
	g := jsonKeys(t, r.run("", 0, "authority", "acquire", "--resource", "job", "--owner", "bob", "--ttl", "60s", "-o", "json"))
	epoch, fence := strconv.Itoa(int(g["epoch"].(float64))), strconv.Itoa(int(g["generation"].(float64)))
	raw := []string{"--epoch", epoch, "--fence", fence, "--owner", "bob"}
	r.run("", 0, append([]string{"publish", "--resource", "job", "--seq", "1", "--key", "k1", "--file", a}, raw...)...)
	before := r.keys()

	badNames := []string{"", "a/b", "a%2Fb", "..", ".", "ünïcode", "tab\tname", "nul\x00", "new\nline", "sp ace",
		strings.Repeat("r", 201)}
	badKeys := []string{"", "a/b", "ctl\x01", "del\x7f", "nl\n", strings.Repeat("k", 257), "bad-utf8-\xff"}
	badNums := []string{"-1", "1e3", "18446744073709551616", "one", "", "1.5"}
	var cases [][]string
	for _, n := range badNames {
		cases = append(cases,
			[]string{"authority", "acquire", "--resource", n},
			[]string{"authority", "acquire", "--resource", "job2", "--owner", n},
			[]string{"authority", "show", "--resource", n},
			[]string{"authority", "renew", "--resource", n, "--owner", "bob"},
			[]string{"authority", "release", "--resource", n, "--owner", "bob", "--generation", fence},
			[]string{"publish", "--resource", n, "--owner", "bob", "--ttl", "5s", "--key", "k", "--file", a},
			[]string{"publish", "--resource", "job", "--owner", n, "--ttl", "5s", "--key", "k", "--file", a},
			[]string{"pointer", "--resource", n},
			[]string{"read", "--resource", n},
			[]string{"watch", "--resource", n, "--count", "1"},
			[]string{"resolve", "--sha256", zeroDigest, "--resource", n, "--key", "k", "--epoch", epoch, "--fence", fence, "--seq", "1"},
			[]string{"rollback", "--resource", n, "--to", "1.1.1", "--owner", "bob", "--ttl", "5s"},
		)
	}
	// '_' names are reserved for fencepub's own leases: nobody acquires or
	// publishes them from the command line (show, renew and release may name
	// them, and owners may start with '_').
	cases = append(cases, [][]string{
		{"authority", "acquire", "--resource", "_gc"},
		{"publish", "--resource", "_gc", "--owner", "bob", "--ttl", "5s", "--key", "k", "--file", a},
		{"publish", "--resource", "_gc", "--epoch", epoch, "--fence", fence, "--seq", "1", "--owner", "bob", "--key", "k", "--file", a},
		{"pointer", "--resource", "_gc"},
		{"resolve", "--sha256", zeroDigest, "--resource", "_gc", "--key", "k", "--epoch", epoch, "--fence", fence, "--seq", "1"},
		{"rollback", "--resource", "_gc", "--to", "1.1.1", "--owner", "bob", "--ttl", "5s"},
	}...)
	// An explicitly empty owner or request id (an unset shell variable) is
	// refused rather than replaced by a random one.
	cases = append(cases,
		[]string{"authority", "acquire", "--resource", "job2", "--owner", ""},
		[]string{"authority", "acquire", "--resource", "job2", "--request-id", ""},
		[]string{"publish", "--resource", "job2", "--owner", "carol", "--ttl", "5s", "--request-id", "", "--key", "k", "--file", a},
	)
	for _, k := range badKeys {
		cases = append(cases,
			[]string{"authority", "acquire", "--resource", "job2", "--owner", "carol", "--request-id", k},
			[]string{"publish", "--resource", "job2", "--owner", "carol", "--ttl", "5s", "--key", k, "--file", a},
			append([]string{"publish", "--resource", "job", "--seq", "2", "--key", k, "--file", a}, raw...),
			[]string{"resolve", "--sha256", zeroDigest, "--resource", "job", "--key", k, "--epoch", epoch, "--fence", fence, "--seq", "1"},
			[]string{"rollback", "--resource", "job", "--to", epoch + "." + fence + ".1", "--owner", "carol", "--ttl", "5s", "--key", k},
		)
	}
	for _, n := range badNums {
		cases = append(cases,
			append([]string{"publish", "--resource", "job", "--seq", n, "--key", "k", "--file", a}, raw...),
			[]string{"publish", "--resource", "job", "--epoch", n, "--fence", fence, "--seq", "2", "--owner", "bob", "--key", "k", "--file", a},
			[]string{"resolve", "--sha256", zeroDigest, "--resource", "job", "--key", "k", "--epoch", epoch, "--fence", n, "--seq", "1"},
			[]string{"authority", "release", "--resource", "job", "--owner", "bob", "--generation", n},
			[]string{"watch", "--resource", "job", "--count", n},
		)
	}
	for _, ttl := range []string{"0s", "-5s", "1s", "1500ms", "2.5s", "9999999999999999h", "10", "forever"} {
		cases = append(cases,
			[]string{"authority", "acquire", "--resource", "job2", "--ttl", ttl},
			[]string{"publish", "--resource", "job2", "--owner", "carol", "--ttl", ttl, "--key", "k", "--file", a},
		)
	}
	for _, d := range []string{"0s", "-1s"} {
		cases = append(cases,
			append([]string{"publish", "--resource", "job", "--seq", "2", "--key", "k", "--file", a, "--timeout", d}, raw...),
			[]string{"pointer", "--resource", "job", "--timeout", d},
			[]string{"resolve", "--sha256", zeroDigest, "--resource", "job", "--key", "k", "--epoch", epoch, "--fence", fence, "--seq", "1", "--timeout", d},
			[]string{"rollback", "--resource", "job2", "--to", "1.1.1", "--owner", "carol", "--ttl", "5s", "--timeout", d},
		)
	}
	big := strconv.FormatUint(1<<63, 10) // one above layout.MaxNumber
	cases = append(cases,
		// Numbers above layout.MaxNumber are bad input (exit 2), not an
		// internal error, and acquire nothing first.
		[]string{"publish", "--resource", "job2", "--owner", "carol", "--ttl", "5s", "--seq", big, "--key", "k", "--file", a},
		append([]string{"publish", "--resource", "job", "--seq", big, "--key", "k", "--file", a}, raw...),
		[]string{"publish", "--resource", "job", "--epoch", big, "--fence", fence, "--seq", "2", "--owner", "bob", "--key", "k", "--file", a},
		[]string{"publish", "--resource", "job", "--epoch", epoch, "--fence", big, "--seq", "2", "--owner", "bob", "--key", "k", "--file", a},
		[]string{"resolve", "--sha256", zeroDigest, "--resource", "job", "--key", "k", "--epoch", epoch, "--fence", fence, "--seq", big},
		[]string{"rollback", "--resource", "job", "--to", epoch + "." + fence + "." + big, "--owner", "carol", "--ttl", "5s"},
		// Metadata and content types that cannot travel as headers.
		[]string{"publish", "--resource", "job2", "--owner", "carol", "--ttl", "5s", "--key", "k", "--file", a, "--meta", "Bad_Key=v"},
		[]string{"publish", "--resource", "job2", "--owner", "carol", "--ttl", "5s", "--key", "k", "--file", a, "--meta", "k=\x01"},
		[]string{"publish", "--resource", "job2", "--owner", "carol", "--ttl", "5s", "--key", "k", "--file", a, "--content-type", "text/ünï"},
		// A rollback to a version that does not exist acquires nothing.
		[]string{"rollback", "--resource", "job2", "--to", "1.1.1", "--owner", "carol", "--ttl", "5s"},
		// A resolve of a version no publish can carry would seal the
		// resource for good: refused.
		[]string{"resolve", "--sha256", zeroDigest, "--resource", "job", "--key", "k", "--epoch", strconv.FormatUint(1<<63-1, 10), "--fence", "1", "--seq", "1"},
		[]string{"resolve", "--sha256", zeroDigest, "--resource", "job", "--key", "k", "--epoch", epoch, "--fence", "999", "--seq", "1"},
	)
	for _, c := range cases {
		r.run("", exitcode.Usage, c...)
	}
	after := r.keys()
	for k, rev := range after {
		if before[k] != rev {
			t.Errorf("bad input wrote %s (mod revision %d, was %d)", k, rev, before[k])
		}
	}
	// The resource still publishes after all of that.
	r.run("", 0, append([]string{"publish", "--resource", "job", "--seq", "2", "--key", "k2", "--file", a}, raw...)...)
}

// TestCLIContract checks the JSON names and exit codes the docs promise
// (README "Exit codes", docs/cli.md), exactly as written there.
func TestCLIContract(t *testing.T) {
	r := newCLIRig(t, "contract")
	a := r.file("a.txt", "alpha")
	acq := jsonKeys(t, r.run("", 0, "authority", "acquire", "--resource", "res", "--owner", "o1", "--ttl", "30s", "-o", "json"))
	requireFields(t, "acquire", acq, "resource", "owner", "request_id", "epoch", "generation", "lease_id", "ttl_seconds", "expires_at")
	show := jsonKeys(t, r.run("", 0, "authority", "show", "--resource", "res", "-o", "json"))
	requireFields(t, "show", show, "owner")
	if show["owner"] != "o1" {
		t.Errorf("show owner %v", show["owner"])
	}
	epoch, fence := strconv.Itoa(int(acq["epoch"].(float64))), strconv.Itoa(int(acq["generation"].(float64)))
	raw := []string{"--epoch", epoch, "--fence", fence, "--owner", "o1"}
	resultFields := []string{"outcome", "reason", "version.epoch", "version.fence", "version.seq", "object.bucket", "object.key", "object.sha256"}

	pub := jsonKeys(t, r.run("", 0, append([]string{"publish", "--resource", "res", "--seq", "1", "--key", "k1", "--file", a, "-o", "json"}, raw...)...))
	requireFields(t, "publish", pub, resultFields...)
	if pub["outcome"] != "applied" || pub["reason"] != "" {
		t.Errorf("publish %v", pub)
	}
	dup := jsonKeys(t, r.run("", 0, append([]string{"publish", "--resource", "res", "--seq", "2", "--key", "k1", "--file", a, "-o", "json"}, raw...)...))
	if dup["outcome"] != "duplicate" {
		t.Errorf("duplicate publish %v", dup)
	}
	ptr := jsonKeys(t, r.run("", 0, "pointer", "--resource", "res", "-o", "json"))
	requireFields(t, "pointer", ptr, "version.epoch", "version.fence", "version.seq", "object.bucket", "object.key", "object.sha256")
	res := jsonKeys(t, r.run("", 0, "resolve", "--resource", "res", "--key", "k1", "--epoch", epoch, "--fence", fence, "--seq", "1", "--file", a, "-o", "json"))
	requireFields(t, "resolve", res, resultFields...)
	rb := jsonKeys(t, r.run("", 0, append([]string{"rollback", "--resource", "res", "--to", epoch + "." + fence + ".1", "--key", "rb", "-o", "json"}, raw...)...))
	requireFields(t, "rollback", rb, resultFields...)
	for _, c := range []struct {
		code   int
		reason string
		args   []string
	}{
		{exitcode.Stale, "pointer", append([]string{"publish", "--resource", "res", "--seq", "1", "--key", "k-old"}, raw...)},
		{exitcode.Stale, "grant", []string{"publish", "--resource", "res", "--epoch", epoch, "--fence", fence, "--seq", "9", "--owner", "o2", "--key", "k-o2"}},
		{exitcode.Stale, "grant", []string{"publish", "--resource", "res", "--epoch", epoch, "--fence", "77", "--seq", "9", "--owner", "o1", "--key", "k-77"}},
		{exitcode.Stale, "epoch", []string{"publish", "--resource", "res", "--epoch", "99", "--fence", fence, "--seq", "9", "--owner", "o1", "--key", "k-e"}},
		{exitcode.Conflict, "", append([]string{"publish", "--resource", "res", "--seq", "9", "--key", "k1", "--content-type", "text/plain"}, raw...)},
	} {
		out := jsonKeys(t, r.run("", c.code, append(c.args, "--file", a, "-o", "json")...))
		requireFields(t, c.reason, out, resultFields...)
		if out["reason"] != c.reason {
			t.Errorf("%q: reason %v, want %q", c.args, out["reason"], c.reason)
		}
	}
	r.run("", exitcode.Held, "authority", "acquire", "--resource", "res", "--owner", "o2")
	r.run("", exitcode.Held, "publish", "--resource", "res", "--owner", "o2", "--ttl", "5s", "--key", "kh", "--file", a)
}

// TestCLIUnreachableEtcd runs every server command against an
// address where no etcd listens: each exits 115 (unavailable) within a
// bound — never a hang, never another code — and, asked for -o json,
// prints a JSON error document with that exit code on stdout (a script that
// saves the JSON for resolve --from gets a document, which resolve refuses
// saying nothing was published). A command with a --timeout keeps asking
// etcd until then; one without, for two etcd.request_timeout attempts.
// (`read` has no default deadline; before the reader's per-request timeout
// it hung for ever. The connection probe now answers first; the reader's
// timeout still bounds an etcd lost after the probe.)
func TestCLIUnreachableEtcd(t *testing.T) {
	m := testenv.StartMinIO(t, devstack.MinIOOptions{})
	t.Setenv("FENCEPUB_S3_ACCESS_KEY", m.Config.AccessKey)
	t.Setenv("FENCEPUB_S3_SECRET_KEY", m.Config.SecretKey)
	t.Setenv("FENCEPUB_ETCD_REQUEST_TIMEOUT", "2s")
	port, err := devstack.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	conn := []string{"--etcd-endpoints", "http://127.0.0.1:" + strconv.Itoa(port), "--s3-endpoint", m.Config.Endpoint,
		"--s3-bucket", m.Config.Bucket, "--prefix", "adv", "--domain", "dead"}
	dir := t.TempDir()
	a := filepath.Join(dir, "a.txt")
	if err := os.WriteFile(a, []byte("alpha"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const bound = 25 * time.Second
	deadline := []string{"--timeout", "6s"}
	var wg sync.WaitGroup
	for i, args := range [][]string{
		{"authority", "acquire", "--resource", "r"},
		{"authority", "show", "--resource", "r"},
		{"authority", "renew", "--resource", "r", "--owner", "o"},
		{"authority", "release", "--resource", "r", "--owner", "o", "--generation", "1"},
		{"authority", "recover", "--dry-run"},
		append([]string{"publish", "--resource", "r", "--owner", "o", "--ttl", "5s", "--key", "k", "--file", a}, deadline...),
		append([]string{"publish", "--resource", "r", "--owner", "o", "--epoch", "1", "--fence", "1", "--seq", "1", "--key", "k", "--file", a}, deadline...),
		append([]string{"pointer", "--resource", "r"}, deadline...),
		{"read", "--resource", "r", "--out", filepath.Join(dir, "out")},
		{"read", "--resource", "r", "--version", "1.1.1", "--out", filepath.Join(dir, "out")},
		append([]string{"ls"}, deadline...),
		append([]string{"history", "--resource", "r"}, deadline...),
		append([]string{"resolve", "--sha256", zeroDigest, "--resource", "r", "--key", "k", "--epoch", "1", "--fence", "1", "--seq", "1"}, deadline...),
		append([]string{"rollback", "--resource", "r", "--to", "1.1.1", "--owner", "o", "--epoch", "1", "--fence", "1"}, deadline...),
		{"run", "--resource", "r", "--", "true"},
		{"gc", "run", "--all"},
		{"verify", "--all"},
	} {
		wg.Go(func() {
			start := time.Now()
			out, errs, code := publishCLI(t, ctx, "", withConn(args, append([]string{"-o", "json"}, conn...))...)
			took := time.Since(start)
			t.Logf("%q: exit %d after %s", args[:2], code, took.Round(10*time.Millisecond))
			if code != exitcode.Unavailable || took > bound {
				t.Errorf("fencepub %q on an unreachable etcd: exit %d after %s (%s); want %d within %s",
					args, code, took, errs, exitcode.Unavailable, bound)
			}
			var doc map[string]any
			if err := json.Unmarshal([]byte(out), &doc); err != nil || doc["exit_code"] != float64(code) || !strings.Contains(fmt.Sprint(doc["error"]), "etcd") {
				t.Errorf("fencepub %q -o json on an unreachable etcd: stdout %q; want a JSON document with exit_code %d and the error", args, out, code)
			}
			if args[0] == "publish" {
				from := filepath.Join(dir, fmt.Sprintf("attempt%d.json", i))
				if err := os.WriteFile(from, []byte(out), 0o644); err != nil {
					t.Error(err)
					return
				}
				if _, errs, code := publishCLI(t, ctx, "", append([]string{"resolve", "--from", from}, conn...)...); code != exitcode.Usage || !strings.Contains(errs, "nothing was published") {
					t.Errorf("resolve --from the failed publish's JSON: exit %d, %s; want 2 saying nothing was published", code, errs)
				}
			}
		})
	}
	wg.Wait()
}

// TestCLIMissingBucket points every command at a bucket that does
// not exist: a configuration mistake, so exit 2 naming the bucket — and an
// acquire must not mint a generation it cannot record.
func TestCLIMissingBucket(t *testing.T) {
	r := newCLIRig(t, "nobucket")
	a := r.file("a.txt", "alpha")
	// A domain initialised against the real bucket, then a wrong bucket name.
	g := jsonKeys(t, r.run("", 0, "authority", "acquire", "--resource", "job", "--owner", "o", "--ttl", "60s", "-o", "json"))
	r.run("", 0, "publish", "--resource", "job", "--epoch", "1", "--fence", "1", "--seq", "1", "--owner", "o", "--key", "k1", "--file", a)
	for i, f := range r.conn {
		if f == "--s3-bucket" {
			r.conn[i+1] = "no-such-bucket"
		}
	}
	before := r.keys()
	for _, args := range [][]string{
		{"authority", "acquire", "--resource", "fresh", "--owner", "o"},
		{"authority", "recover", "--dry-run"},
		{"publish", "--resource", "job", "--epoch", "1", "--fence", "1", "--seq", "2", "--owner", "o", "--key", "k2", "--file", a},
		{"publish", "--resource", "fresh2", "--owner", "o", "--ttl", "5s", "--key", "k", "--file", a},
		{"rollback", "--resource", "job", "--to", "1.1.1", "--owner", "o", "--epoch", "1", "--fence", "1", "--key", "rb"},
		{"rollback", "--resource", "fresh3", "--to", "1.1.1", "--owner", "o", "--ttl", "5s", "--key", "rb"},
	} {
		r.run("", exitcode.Usage, args...)
	}
	for k, rev := range r.keys() {
		if before[k] != rev {
			t.Errorf("a command against a missing bucket wrote %s", k)
		}
	}
	// The reader follows the bucket the pointer names, not the configured
	// one: the published object is still served and verified.
	if out := r.run("", 0, "read", "--resource", "job"); out != "alpha" {
		t.Errorf("read: %q", out)
	}
	if g["generation"] != 1.0 {
		t.Errorf("acquire %v", g)
	}
}
