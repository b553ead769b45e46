//go:build !unit

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

// TestPublishCLI drives publish, pointer, read, watch, resolve and rollback
// against real etcd and MinIO: the JSON shapes and the exit codes the
// black-box checks rely on.
func TestPublishCLI(t *testing.T) {
	conn, _, m := testenv.CLIStack(t, "clitest")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	run := func(stdin string, wantCode int, args ...string) (string, string) {
		t.Helper()
		out, errs, code := publishCLI(t, ctx, stdin, append(args, conn...)...)
		if code != wantCode {
			t.Fatalf("fencepub %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, wantCode, out, errs)
		}
		return out, errs
	}
	type result struct {
		Outcome string `json:"outcome"`
		Reason  string `json:"reason"`
		Version struct{ Epoch, Fence, Seq uint64 }
		Object  struct {
			Bucket, Key, SHA256 string
		}
		Published bool `json:"published"`
	}
	decode := func(s string) result {
		t.Helper()
		var r result
		if err := json.Unmarshal([]byte(s), &r); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, s)
		}
		return r
	}
	a := file("a.txt", "alpha")

	// Acquire + publish + release.
	out, errs := run("", 0, "publish", "--resource", "job", "--owner", "alice", "--ttl", "10s", "--key", "k1", "--file", a, "-o", "json")
	r1 := decode(out)
	if r1.Outcome != "applied" || r1.Reason != "" || r1.Version.Epoch != 1 || r1.Version.Fence != 1 || r1.Version.Seq != 1 ||
		r1.Object.Bucket != m.Config.Bucket || r1.Object.Key == "" || len(r1.Object.SHA256) != 64 || !strings.Contains(errs, "applied") {
		t.Fatalf("publish: %s / %s", out, errs)
	}
	for _, field := range []string{`"outcome"`, `"reason"`, `"version"`, `"object"`, `"epoch"`, `"fence"`, `"seq"`, `"bucket"`, `"key"`, `"sha256"`} {
		if !strings.Contains(out, field) {
			t.Fatalf("publish JSON lacks %s: %s", field, out)
		}
	}
	out, errs = run("", 0, "publish", "--resource", "job", "--owner", "alice", "--ttl", "10s", "--key", "k1", "--file", a, "-o", "json")
	if d := decode(out); d.Outcome != "duplicate" || d.Version != r1.Version || !strings.Contains(errs, "duplicate") {
		t.Fatalf("retried publish: %s / %s", out, errs)
	}
	run("", exitcode.Conflict, "publish", "--resource", "job", "--owner", "alice", "--ttl", "10s", "--key", "k1", "--file", file("b.txt", "beta"))

	// Under an existing grant (bob, fence 4 after alice's three), body from stdin.
	out, _ = run("", 0, "authority", "acquire", "--resource", "job", "--owner", "bob", "--ttl", "30s", "-o", "json")
	if !strings.Contains(out, `"generation": 4`) {
		t.Fatalf("acquire: %s", out)
	}
	out, _ = run("from stdin", 0, "publish", "--resource", "job", "--epoch", "1", "--fence", "4", "--seq", "1", "--owner", "bob", "--key", "k2", "-", "-o", "json")
	r2 := decode(out)
	if r2.Outcome != "applied" || r2.Version.Fence != 4 {
		t.Fatalf("raw publish: %s", out)
	}
	out, _ = run("", exitcode.Stale, "publish", "--resource", "job", "--epoch", "1", "--fence", "1", "--seq", "9", "--owner", "alice", "--key", "k3", "--file", a, "-o", "json")
	if r := decode(out); r.Outcome != "stale" || r.Reason != "pointer" {
		t.Fatalf("old fence: %s", out)
	}
	out, _ = run("", exitcode.Stale, "publish", "--resource", "job", "--epoch", "1", "--fence", "4", "--seq", "9", "--owner", "mallory", "--key", "k4", "--file", a, "-o", "json")
	if r := decode(out); r.Outcome != "stale" || r.Reason != "grant" {
		t.Fatalf("wrong owner: %s", out)
	}
	run("", 0, "publish", "--resource", "job", "--epoch", "1", "--fence", "4", "--seq", "2", "--owner", "bob", "--key", "k5", "--file", a, "--strict")
	out, _ = run("", exitcode.Stale, "publish", "--resource", "job", "--epoch", "1", "--fence", "4", "--seq", "4", "--owner", "bob", "--key", "k-gap", "--file", a, "--contiguous", "-o", "json")
	if r := decode(out); r.Outcome != "stale" || r.Reason != "gap" {
		t.Fatalf("contiguous after a gap: %s", out)
	}
	out, _ = run("", exitcode.LeaseLost, "publish", "--resource", "job", "--epoch", "1", "--fence", "1", "--seq", "9", "--owner", "alice", "--key", "k6", "--file", a, "--strict", "-o", "json")
	if r := decode(out); r.Outcome != "stale" || r.Reason != "lease" {
		t.Fatalf("strict without the lease: %s", out)
	}

	// Bad input exits 2.
	for _, args := range [][]string{
		{"--epoch", "1", "--fence", "4", "--seq", "0", "--owner", "bob", "--key", "k", "--file", a},
		{"--epoch", "1", "--fence", "-1", "--seq", "1", "--owner", "bob", "--key", "k", "--file", a},
		{"--epoch", "1", "--fence", "0", "--seq", "1", "--owner", "bob", "--key", "k", "--file", a},
		{"--epoch", "1", "--fence", "4", "--seq", "3", "--owner", "bob", "--key", "a/b", "--file", a},
		{"--epoch", "1", "--fence", "4", "--seq", "3", "--owner", "bob", "--key", strings.Repeat("k", 257), "--file", a},
		{"--epoch", "1", "--fence", "4", "--seq", "3", "--owner", "bob", "--file", a},
		{"--epoch", "1", "--fence", "4", "--owner", "bob", "--key", "k", "--file", a},
		{"--epoch", "1", "--fence", "4", "--seq", "3", "--owner", "bob", "--key", "k"},
		{"--epoch", "1", "--fence", "4", "--seq", "3", "--owner", "bob", "--key", "k", "--file", filepath.Join(dir, "missing")},
		{"--ttl", "10s", "--fence", "4", "--owner", "bob", "--key", "k", "--file", a},
	} {
		run("", exitcode.Usage, append([]string{"publish", "--resource", "job"}, args...)...)
	}

	// pointer, read, watch.
	out, _ = run("", 0, "pointer", "--resource", "job", "-o", "json")
	if p := decode(out); !p.Published || p.Version.Fence != 4 || p.Version.Seq != 2 {
		t.Fatalf("pointer: %s", out)
	}
	run("", exitcode.NotFound, "pointer", "--resource", "nothing-yet", "-o", "json")
	out, _ = run("", 0, "pointer", "--resource", "nothing-yet", "--allow-missing", "-o", "json")
	if p := decode(out); p.Published {
		t.Fatalf("an unpublished resource reported as published: %s", out)
	}
	out, _ = run("", 0, "read", "--resource", "job")
	if out != "alpha" {
		t.Fatalf("read: %q", out)
	}
	dst := filepath.Join(dir, "out.txt")
	run("", 0, "read", "--resource", "job", "--out", dst)
	if b, err := os.ReadFile(dst); err != nil || string(b) != "alpha" {
		t.Fatalf("read --out: %q %v", b, err)
	}
	out, _ = run("", 0, "watch", "--resource", "job", "--count", "1")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 1 || decode(lines[0]).Version.Seq != 2 {
		t.Fatalf("watch: %q", out)
	}

	// resolve: the applied seq 1 of fence 4; a never-sent seq 7 gets sealed.
	out, _ = run("from stdin", 0, "resolve", "--resource", "job", "--key", "k2", "--epoch", "1", "--fence", "4", "--seq", "1", "--file", "-", "-o", "json")
	if r := decode(out); r.Outcome != "applied" {
		t.Fatalf("resolve applied: %s", out)
	}
	out, _ = run("", exitcode.Stale, "resolve", "--sha256", zeroDigest, "--resource", "job", "--key", "k-never", "--epoch", "1", "--fence", "4", "--seq", "7", "-o", "json")
	if r := decode(out); r.Outcome != "stale" || r.Reason != "seal" {
		t.Fatalf("resolve not applied: %s", out)
	}
	run("", exitcode.Stale, "publish", "--resource", "job", "--epoch", "1", "--fence", "4", "--seq", "7", "--owner", "bob", "--key", "k-never", "--file", a)

	// rollback to alice's first version under bob's grant: seq 8, above the seal.
	out, _ = run("", 0, "rollback", "--resource", "job", "--to", "1.1.1", "--epoch", "1", "--fence", "4", "--owner", "bob", "--key", "rb-1", "-o", "json")
	if r := decode(out); r.Outcome != "applied" || r.Version.Seq != 8 || r.Object.SHA256 != r1.Object.SHA256 {
		t.Fatalf("rollback: %s", out)
	}
	out, _ = run("", 0, "read", "--resource", "job")
	if out != "alpha" {
		t.Fatalf("read after rollback: %q", out)
	}
	run("", exitcode.Usage, "rollback", "--resource", "job", "--to", "1.x.1", "--epoch", "1", "--fence", "4", "--owner", "bob")
	run("", exitcode.Usage, "rollback", "--resource", "job", "--to", "1.99.1", "--epoch", "1", "--fence", "4", "--owner", "bob")
}
