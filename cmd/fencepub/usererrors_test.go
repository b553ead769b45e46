//go:build !unit

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/testkit/faultproxy"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

// Mistakes a user makes are exit 2 with a message naming what to fix, and
// they are caught before a lease is acquired: a directory given as --file or
// --out, a CMD that does not exist, a bad duration, credentials the store
// refuses. The first real publish afterwards still gets fence 1, so none
// of the mistakes minted a fencing token.
func TestUserMistakes(t *testing.T) {
	conn, _, _ := testenv.CLIStack(t, "mistakes")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	body := filepath.Join(dir, "body.txt")
	if err := os.WriteFile(body, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	emptyFile := filepath.Join(dir, "empty.txt")
	if err := os.WriteFile(emptyFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	publish := []string{"publish", "--resource", "r", "--owner", "me", "--ttl", "5s", "--key", "k1", "-o", "json"}
	for _, tc := range []struct {
		name  string
		args  []string
		want  string // in stderr
		stdin string
	}{
		{"--file is a directory", append(publish, "--file", dir), "is a directory", ""},
		{"--file does not exist", append(publish, "--file", filepath.Join(dir, "nope")), "--file", ""},
		{"--file is empty", append(publish, "--file", emptyFile), "--allow-empty", ""},
		{"stdin is empty", append(publish, "-"), "--allow-empty", ""},
		{"run: --file is a directory", []string{"run", "--resource", "r", "--file", dir, "--", "true"}, "is a directory", ""},
		{"run: CMD does not exist", []string{"run", "--resource", "r", "--", filepath.Join(dir, "no-such-cmd")}, "no-such-cmd", ""},
		{"run: zero publish timeout", []string{"run", "--resource", "r", "--publish-timeout", "0s", "--", "true"}, "--publish-timeout", ""},
		{"run: negative wait", []string{"run", "--resource", "r", "--max-wait", "-1s", "--", "true"}, "--max-wait", ""},
	} {
		_, errs, code := publishCLI(t, ctx, tc.stdin, append(tc.args, conn...)...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Fatalf("%s: exit %d, stderr %q; want 2 naming %q", tc.name, code, errs, tc.want)
		}
	}

	secret := os.Getenv("FENCEPUB_S3_SECRET_KEY")
	t.Setenv("FENCEPUB_S3_SECRET_KEY", "not-the-secret")
	_, errs, code := publishCLI(t, ctx, "", append(publish, append([]string{"--file", body}, conn...)...)...)
	if code != 2 || !strings.Contains(errs, "s3.secret_key") {
		t.Fatalf("wrong secret key: exit %d, stderr %q; want 2 naming s3.secret_key", code, errs)
	}
	t.Setenv("FENCEPUB_S3_SECRET_KEY", secret)

	out, errs, code := publishCLI(t, ctx, "", append(publish, append([]string{"--file", body}, conn...)...)...)
	if code != 0 {
		t.Fatalf("publish: exit %d: %s", code, errs)
	}
	var res struct {
		Version struct{ Fence uint64 }
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	if res.Version.Fence != 1 {
		t.Fatalf("first real publish has fence %d; want 1 (a mistake above minted a token)", res.Version.Fence)
	}

	// A /proc file states size 0 but has content: published whole.
	want, err := os.ReadFile("/proc/version")
	if err != nil {
		t.Fatal(err)
	}
	if _, errs, code := publishCLI(t, ctx, "", append([]string{"publish", "--resource", "procfs", "--owner", "me", "--ttl", "5s", "--key", "k1", "--file", "/proc/version"}, conn...)...); code != 0 {
		t.Fatalf("publish --file /proc/version: exit %d: %s", code, errs)
	}
	if got, errs, code := publishCLI(t, ctx, "", append([]string{"read", "--resource", "procfs"}, conn...)...); code != 0 || got != string(want) {
		t.Fatalf("read of the /proc file: exit %d, %q (%s); want %q", code, got, errs, want)
	}
	// Ctrl-C while publish waits for stdin's first byte: 130 at once,
	// nothing acquired.
	pr, pw := io.Pipe()
	defer pw.Close()
	ictx, interrupt := context.WithCancel(ctx)
	time.AfterFunc(200*time.Millisecond, interrupt)
	start := time.Now()
	if _, errs, code := cliIO(t, ictx, pr, append([]string{"publish", "--resource", "stdin", "--owner", "me", "--ttl", "5s", "--key", "k1", "-"}, conn...)...); code != 130 || time.Since(start) > 10*time.Second {
		t.Fatalf("publish - interrupted while stdin is silent: exit %d after %s (%s); want 130 at once", code, time.Since(start), errs)
	}

	for _, tc := range []struct{ out, want string }{
		{dir, "is a directory"},
		{filepath.Join(dir, "missing", "file"), "does not exist"},
	} {
		_, errs, code := publishCLI(t, ctx, "", append([]string{"read", "--resource", "r", "--out", tc.out}, conn...)...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Fatalf("read --out %s: exit %d, stderr %q; want 2 (%s)", tc.out, code, errs, tc.want)
		}
	}
	if _, errs, code := publishCLI(t, ctx, "", append([]string{"read", "--resource", "r", "--timeout", "-1s"}, conn...)...); code != 2 {
		t.Fatalf("read --timeout -1s: exit %d (%s); want 2", code, errs)
	}
	if out, errs, code := publishCLI(t, ctx, "", append([]string{"read", "--resource", "r", "--timeout", "30s"}, conn...)...); code != 0 || out != "hello" {
		t.Fatalf("read --timeout 30s: exit %d, %q (%s); want the object", code, out, errs)
	}
	// Away from any config file and without --domain, a command says which
	// domain it looks at (the published "r" lives in d1, not "default").
	t.Setenv("HOME", t.TempDir())
	var noDomain []string
	for i := 0; i < len(conn); i += 2 {
		if conn[i] != "--domain" {
			noDomain = append(noDomain, conn[i], conn[i+1])
		}
	}
	if _, errs, _ := publishCLI(t, ctx, "", append([]string{"pointer", "--resource", "r"}, noDomain...)...); !strings.Contains(errs, `no config file`) || !strings.Contains(errs, `domain=default`) {
		t.Fatalf("pointer without a config file or --domain: stderr %q; want a note naming the default domain", errs)
	}
	// --out keeps an existing file's permissions and writes through a
	// symlink.
	target, link := filepath.Join(dir, "target"), filepath.Join(dir, "link")
	if err := os.WriteFile(target, []byte("old"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if _, errs, code := publishCLI(t, ctx, "", append([]string{"read", "--resource", "r", "--out", link}, conn...)...); code != 0 {
		t.Fatalf("read --out a symlink: exit %d: %s", code, errs)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("read --out replaced the symlink (%v)", err)
	}
	if fi, err := os.Stat(target); err != nil || fi.Mode().Perm() != 0o640 || readFile(t, target) != "hello" {
		t.Fatalf("read --out through a symlink: target %v %v %q; want 0640 and the object", fi.Mode(), err, readFile(t, target))
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 4 {
		t.Fatalf("read left files behind in %s: %v", dir, entries)
	}
}

// A store that stops sending: `read` gives up after --stall-timeout with
// exit 115 and says why, instead of waiting for ever (minio-go bounds the
// wait for headers, not a body that stops).
func TestReadStalledStore(t *testing.T) {
	conn, _, m := testenv.CLIStack(t, "stall")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	body := filepath.Join(t.TempDir(), "body")
	if err := os.WriteFile(body, bytes.Repeat([]byte("published "), 400_000), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errs, code := publishCLI(t, ctx, "", append([]string{"publish", "--resource", "r", "--owner", "me", "--ttl", "5s", "--key", "k", "--file", body}, conn...)...); code != 0 {
		t.Fatalf("publish: exit %d: %s", code, errs)
	}
	px, err := faultproxy.Start(m.Config.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	read := append([]string{"read", "--resource", "r", "--stall-timeout", "1s"}, append(conn, "--s3-endpoint", px.Addr())...)
	px.Set(faultproxy.Faults{StallDownstreamAfter: 1 << 20}) // stops after 1 MiB of 4 MB
	start := time.Now()
	out, errs, code := publishCLI(t, ctx, "", read...)
	if took := time.Since(start); code != 115 || !strings.Contains(errs, "sent no bytes") || took > 20*time.Second || len(out) == 0 {
		t.Fatalf("a body that stops: exit %d after %s with %d bytes out, %q; want 115 within seconds, mid-body, naming the stall", code, took, len(out), errs)
	}
	px.Set(faultproxy.Faults{})
	if out, errs, code := publishCLI(t, ctx, "", read...); code != 0 || len(out) != 4_000_000 {
		t.Fatalf("read through the healed proxy: exit %d, %d bytes (%s)", code, len(out), errs)
	}
}
