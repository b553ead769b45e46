//go:build !unit

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/testkit/faultproxy"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

// zeroDigest is a well-formed request digest that no publish has.
var zeroDigest = strings.Repeat("0", 64)

// buildCLI builds the fencepub binary into a temp dir and returns its path.
func buildCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fencepub")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// child runs bin with args and stdin in a process of its own and returns
// its stdout, stderr and exit code.
func child(t *testing.T, ctx context.Context, bin string, stdin io.Reader, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdin = stdin
	return testenv.RunCmd(t, cmd)
}

// TestResolveCLI runs publish and resolve as child processes on real etcd
// and MinIO. An attempt whose transaction never reached etcd ends unknown
// (112) with JSON that names it; a second attempt under the same key, grant
// and seq with another body applies; resolving the first — from its printed
// JSON (--from FILE and -), by its body, digest or object key — is conflict
// (111), the second is applied and the same body at another seq duplicate;
// resolve without an identity exits 2 and writes nothing.
func TestResolveCLI(t *testing.T) {
	bin := buildCLI(t)
	conn, e, _ := testenv.CLIStack(t, "resolvecli")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cli, err := e.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	px, err := faultproxy.Start(strings.TrimPrefix(e.Members[0].ClientURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	proxied := append([]string{}, conn...)
	for i, a := range proxied {
		if a == "--etcd-endpoints" {
			proxied[i+1] = px.URL()
		}
	}
	ns, err := layout.NewNamespace("resolvecli", "d1")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	run := func(stdin io.Reader, want int, args ...string) (string, string) {
		t.Helper()
		out, errs, code := child(t, ctx, bin, stdin, append(args, conn...)...)
		if code != want {
			t.Fatalf("fencepub %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, want, out, errs)
		}
		return out, errs
	}
	type result struct {
		Outcome        string         `json:"outcome"`
		Resource       string         `json:"resource"`
		IdempotencyKey string         `json:"idempotency_key"`
		Digest         string         `json:"digest"`
		Version        layout.Version `json:"version"`
		Object         layout.Object  `json:"object"`
	}
	decode := func(s string) result {
		t.Helper()
		var r result
		if err := json.Unmarshal([]byte(s), &r); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, s)
		}
		return r
	}
	seal := func() string {
		t.Helper()
		resp, err := cli.Get(ctx, ns.SealKey("job"))
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("seal: %v %v", resp, err)
		}
		return string(resp.Kvs[0].Value)
	}

	out, _ := run(nil, 0, "authority", "acquire", "--resource", "job", "--owner", "alice", "--ttl", "60s", "-o", "json")
	var g struct{ Epoch, Generation uint64 }
	if err := json.Unmarshal([]byte(out), &g); err != nil || g.Generation == 0 {
		t.Fatalf("acquire: %v\n%s", err, out)
	}
	grant := []string{"--resource", "job", "--owner", "alice", "--epoch", strconv.FormatUint(g.Epoch, 10), "--fence", strconv.FormatUint(g.Generation, 10)}
	attempt := []string{"--resource", "job", "--key", "K", "--epoch", strconv.FormatUint(g.Epoch, 10), "--fence", strconv.FormatUint(g.Generation, 10)}

	// Attempt 1: its transaction never reaches etcd. The body waits on
	// stdin until the publisher is bound (the resource's pointer exists),
	// then the proxy drops every request and the body ends.
	wctx, stopWatch := context.WithTimeout(ctx, 30*time.Second)
	defer stopWatch()
	bound := cli.Watch(wctx, ns.PointerKey("job"))
	stdin, feed := io.Pipe()
	type exited struct {
		out, errs string
		code      int
	}
	done := make(chan exited, 1)
	go func() {
		args := append(append([]string{"publish", "--seq", "1", "--key", "K", "--file", "-", "--timeout", "3s", "-o", "json"}, grant...), proxied...)
		o, es, c := child(t, ctx, bin, stdin, args...)
		done <- exited{o, es, c}
	}()
	if _, err := feed.Write([]byte("body ")); err != nil {
		t.Fatal(err)
	}
	if wr := <-bound; wr.Err() != nil || len(wr.Events) == 0 {
		t.Fatalf("waiting for the publisher to create the resource: %v", wr.Err())
	}
	stopWatch()
	px.Set(faultproxy.Faults{DropUpstream: true})
	if _, err := feed.Write([]byte("1")); err != nil {
		t.Fatal(err)
	}
	feed.Close()
	first := <-done
	px.Set(faultproxy.Faults{})
	if first.code != exitcode.Unknown {
		t.Fatalf("attempt 1: exit %d, want %d\nstdout: %s\nstderr: %s", first.code, exitcode.Unknown, first.out, first.errs)
	}
	lost := decode(first.out)
	if lost.Outcome != "unknown" || lost.Resource != "job" || lost.IdempotencyKey != "K" || lost.Digest == "" || lost.Object.Key == "" ||
		lost.Version != (layout.Version{Epoch: g.Epoch, Fence: g.Generation, Seq: 1}) {
		t.Fatalf("unknown JSON lacks what resolve needs: %s", first.out)
	}
	if !strings.Contains(first.errs, "--sha256 "+lost.Digest) || !strings.Contains(first.errs, "--from") {
		t.Fatalf("the unknown hint does not name the attempt: %s", first.errs)
	}
	unknownJSON := file("unknown.json", first.out)
	body1 := file("body1", "body 1")

	// Attempt 2: same key, grant and seq, another body.
	body2 := file("body2", "body 2")
	out, _ = run(nil, 0, append([]string{"publish", "--seq", "1", "--key", "K", "--file", body2, "-o", "json"}, grant...)...)
	won := decode(out)
	if won.Outcome != "applied" {
		t.Fatalf("attempt 2: %s", out)
	}
	sealBefore := seal()

	seq1 := append(append([]string{}, attempt...), "--seq", "1")
	for name, args := range map[string][]string{
		"--from FILE":  {"--from", unknownJSON},
		"--file":       append([]string{"--file", body1}, seq1...),
		"--sha256":     append([]string{"--sha256", lost.Digest}, seq1...),
		"--object-key": append([]string{"--object-key", lost.Object.Key}, seq1...),
	} {
		out, _ := run(nil, exitcode.Conflict, append([]string{"resolve", "-o", "json"}, args...)...)
		if r := decode(out); r.Outcome != "conflict" || r.Digest != won.Digest || r.Object.Key != won.Object.Key {
			t.Fatalf("resolve attempt 1 by %s: %s; want conflict naming attempt 2", name, out)
		}
	}
	out, _ = run(strings.NewReader(first.out), exitcode.Conflict, "resolve", "--from", "-", "-o", "json")
	if r := decode(out); r.Outcome != "conflict" {
		t.Fatalf("resolve --from -: %s", out)
	}
	// run -o json names the key "key"; its unknown JSON works the same.
	runJSON, _ := json.Marshal(map[string]any{"resource": "job", "key": "K", "outcome": "unknown", "version": lost.Version,
		"object": map[string]string{"key": lost.Object.Key}, "digest": lost.Digest})
	run(bytes.NewReader(runJSON), exitcode.Conflict, "resolve", "--from", "-")

	for name, args := range map[string][]string{
		"--file":          append([]string{"--file", body2}, seq1...),
		"--sha256 (caps)": append([]string{"--sha256", strings.ToUpper(won.Digest)}, seq1...),
		"--object-key":    append([]string{"--object-key", won.Object.Key}, seq1...),
	} {
		out, _ := run(nil, 0, append([]string{"resolve", "-o", "json"}, args...)...)
		if r := decode(out); r.Outcome != "applied" {
			t.Fatalf("resolve attempt 2 by %s: %s; want applied", name, out)
		}
	}
	out, _ = run(nil, 0, append([]string{"resolve", "-o", "json", "--file", body2}, append(attempt, "--seq", "2")...)...)
	if r := decode(out); r.Outcome != "duplicate" || r.Version != won.Version {
		t.Fatalf("same body at another seq: %s; want duplicate of %s", out, won.Version)
	}
	if got := seal(); got != sealBefore {
		t.Fatalf("resolves answered by the op record moved the seal to %q", got)
	}

	// No identity: exit 2, nothing sealed, even for a version never sent.
	_, errs := run(nil, exitcode.Usage, append([]string{"resolve"}, append(attempt, "--seq", "5")...)...)
	if !strings.Contains(errs, "cannot tell which attempt") {
		t.Fatalf("resolve without an identity: %s", errs)
	}
	for _, args := range [][]string{
		{"--from", unknownJSON, "--seq", "1"},
		append([]string{"--file", body1, "--sha256", lost.Digest}, seq1...),
		append([]string{"--sha256", lost.Digest, "--meta", "a=b"}, seq1...),
		{"--from", file("applied.json", out)},
	} {
		run(nil, exitcode.Usage, append([]string{"resolve"}, args...)...)
	}
	if got := seal(); got != sealBefore {
		t.Fatalf("a refused resolve moved the seal to %q", got)
	}
	out, _ = run(nil, 0, "resolve", "--help")
	for _, w := range []string{"--from", "--file", "--sha256", "--object-key", "sha256sum", "111"} {
		if !strings.Contains(out, w) {
			t.Errorf("resolve --help does not explain %q", w)
		}
	}
}
