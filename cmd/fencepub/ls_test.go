//go:build !unit

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/minio/minio-go/v7"
)

// opsCLI runs fencepub in-process against one CLIStack.
type opsCLI struct {
	t    *testing.T
	ctx  context.Context
	conn []string
	e    *devstack.Etcd
	m    *devstack.MinIO
	dir  string
}

func newOpsCLI(t *testing.T, prefix string) *opsCLI {
	t.Helper()
	conn, e, m := testenv.CLIStack(t, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return &opsCLI{t: t, ctx: ctx, conn: conn, e: e, m: m, dir: t.TempDir()}
}

// run runs fencepub with args and the stack's flags, fails the test unless
// it exits want, and returns stdout and stderr.
func (o *opsCLI) run(want int, args ...string) (string, string) {
	o.t.Helper()
	out, errs, code := publishCLI(o.t, o.ctx, "", append(args, o.conn...)...)
	if code != want {
		o.t.Fatalf("fencepub %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, want, out, errs)
	}
	return out, errs
}

// publish publishes body as res under a fresh grant of owner (each call
// takes the next fence) and returns the printed pointer.
func (o *opsCLI) publish(res, owner, key, body string) layout.Pointer {
	o.t.Helper()
	f := filepath.Join(o.dir, key)
	if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
		o.t.Fatal(err)
	}
	out, _ := o.run(0, "publish", "--resource", res, "--owner", owner, "--ttl", "10s", "--key", key, "--file", f, "-o", "json")
	var r struct {
		Outcome string          `json:"outcome"`
		Pointer *layout.Pointer `json:"pointer"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Outcome != "applied" || r.Pointer == nil {
		o.t.Fatalf("publish %s: %v\n%s", key, err, out)
	}
	return *r.Pointer
}

// decode decodes one JSON document of the CLI into v.
func decode[T any](t *testing.T, out string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	return v
}

// generation returns res's generation counter ("" when never granted).
func (o *opsCLI) generation(res string) string {
	o.t.Helper()
	ns, err := layout.NewNamespace(o.conn[slices.Index(o.conn, "--prefix")+1], o.conn[slices.Index(o.conn, "--domain")+1])
	if err != nil {
		o.t.Fatal(err)
	}
	cli := testenv.EtcdClient(o.t, o.e)
	resp, err := cli.Get(o.ctx, ns.GenerationKey(res))
	if err != nil {
		o.t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

// TestLsHistoryReadVersion lists the domain and a resource's retained
// versions, reads old versions verified like the current one, and refuses
// (exit 2) a version that is not retained — in read and in rollback, which
// then names the retained ones and acquires nothing.
func TestLsHistoryReadVersion(t *testing.T) {
	o := newOpsCLI(t, "lstest")
	if out, _ := o.run(0, "ls"); !strings.Contains(out, `no resources in domain "d1"`) {
		t.Fatalf("ls of an empty domain: %q", out)
	}
	var pub []layout.Pointer
	for i, body := range []string{"v1", "v2 longer", "v3"} {
		pub = append(pub, o.publish("report", fmt.Sprintf("w%d", i), fmt.Sprintf("k%d", i), body))
	}
	job := o.publish("job", "w", "kj", "job body")
	o.run(0, "authority", "acquire", "--resource", "acquired", "--owner", "a", "--ttl", "30s")

	type entry struct {
		layout.Pointer
		Resource       string `json:"resource"`
		Published      bool   `json:"published"`
		NeverGranted   bool   `json:"never_granted"`
		Decommissioned bool   `json:"decommissioned"`
	}
	type listing struct {
		Domain    string  `json:"domain"`
		Resources []entry `json:"resources"`
	}
	out, _ := o.run(0, "ls", "-o", "json")
	l := decode[listing](t, out)
	if l.Domain != "d1" || len(l.Resources) != 2 || l.Resources[0].Resource != "job" || l.Resources[1].Resource != "report" {
		t.Fatalf("ls: %s", out)
	}
	for i, want := range []layout.Pointer{job, pub[2]} {
		got := l.Resources[i]
		if !got.Published || got.Version != want.Version || got.Object != want.Object || got.CommittedAt.IsZero() || got.Decommissioned || got.NeverGranted {
			t.Fatalf("ls entry %d: %+v; want %+v", i, got, want)
		}
	}
	out, _ = o.run(0, "ls")
	if !regexp.MustCompile(`(?m)^RESOURCE +VERSION +SIZE +COMMITTED_AT +STATE$`).MatchString(out) ||
		!regexp.MustCompile(fmt.Sprintf(`(?m)^report +%s +%d +\S+ +published$`, regexp.QuoteMeta(pub[2].Version.String()), pub[2].Object.Size)).MatchString(out) {
		t.Fatalf("ls text:\n%s", out)
	}
	// Acquired, nothing bound yet: shown by --resource, not published.
	out, _ = o.run(0, "ls", "--resource", "acquired", "-o", "json")
	if l := decode[listing](t, out); len(l.Resources) != 1 || l.Resources[0].Published || l.Resources[0].NeverGranted || l.Resources[0].Resource != "acquired" {
		t.Fatalf("ls --resource of an acquired resource: %s", out)
	}
	_, errs := o.run(exitcode.NotFound, "ls", "--resource", "reprot")
	if !strings.Contains(errs, "never granted") {
		t.Fatalf("ls --resource of a misspelt name: %s", errs)
	}
	out, _ = o.run(0, "ls", "--resource", "reprot", "--allow-missing", "-o", "json")
	if l := decode[listing](t, out); len(l.Resources) != 1 || !l.Resources[0].NeverGranted {
		t.Fatalf("ls --resource --allow-missing of a misspelt name: %s", out)
	}

	// history: every retained version, oldest first, as publish printed it.
	out, _ = o.run(0, "history", "--resource", "report", "-o", "json")
	h := decode[struct {
		Resource string           `json:"resource"`
		Versions []layout.Pointer `json:"versions"`
	}](t, out)
	if h.Resource != "report" || len(h.Versions) != len(pub) {
		t.Fatalf("history: %s", out)
	}
	for i, p := range h.Versions {
		if p.Version != pub[i].Version || p.Object != pub[i].Object || p.Owner != pub[i].Owner || p.IdempotencyKey != pub[i].IdempotencyKey || len(p.Digest) != 64 {
			t.Fatalf("history entry %d: %+v; want %+v", i, p, pub[i])
		}
	}
	out, _ = o.run(0, "history", "--resource", "report")
	for _, p := range pub {
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^%s +%d +%s +%s +%s +\S+$`, regexp.QuoteMeta(p.Version.String()), p.Object.Size, p.Object.SHA256, p.Owner, p.IdempotencyKey)).MatchString(out) {
			t.Fatalf("history text lacks %s:\n%s", p.Version, out)
		}
	}

	// read --version: any retained version, to stdout or a file.
	for i, body := range []string{"v1", "v2 longer"} {
		if out, _ := o.run(0, "read", "--resource", "report", "--version", pub[i].Version.String()); out != body {
			t.Fatalf("read --version %s: %q, want %q", pub[i].Version, out, body)
		}
	}
	dst := filepath.Join(o.dir, "old")
	o.run(0, "read", "--resource", "report", "--version", pub[0].Version.String(), "--out", dst)
	if b, err := os.ReadFile(dst); err != nil || string(b) != "v1" {
		t.Fatalf("read --version --out: %q, %v", b, err)
	}
	if out, _ := o.run(0, "read", "--resource", "report"); out != "v3" {
		t.Fatalf("read after reading old versions: %q", out)
	}
	o.run(exitcode.Usage, "read", "--resource", "report", "--version", "1.x.1")
	retained := fmt.Sprintf("retained: %s, %s, %s", pub[0].Version, pub[1].Version, pub[2].Version)
	_, errs = o.run(exitcode.Usage, "read", "--resource", "report", "--version", "1.99.1")
	if !strings.Contains(errs, "not retained") || !strings.Contains(errs, retained) {
		t.Fatalf("read --version of a version never published: %s; want it to say %q", errs, retained)
	}
	// rollback --to a version that is not retained: exit 2, the retained
	// ones named, no generation minted.
	gen := o.generation("report")
	_, errs = o.run(exitcode.Usage, "rollback", "--resource", "report", "--to", "1.99.1", "--owner", "ops", "--ttl", "10s")
	if !strings.Contains(errs, retained) {
		t.Fatalf("rollback --to a version never published: %s; want it to say %q", errs, retained)
	}
	if g := o.generation("report"); g != gen {
		t.Fatalf("the refused rollback minted a generation: %s -> %s", gen, g)
	}
	_, errs = o.run(exitcode.Usage, "rollback", "--resource", "reprot", "--to", "1.1.1", "--owner", "ops", "--ttl", "10s")
	if !strings.Contains(errs, "never granted") || o.generation("reprot") != "" {
		t.Fatalf("rollback of a misspelt resource: %s", errs)
	}

	// The old version's bytes are checked: other bytes under its key (a
	// store that ignored create-only) are refused, not served.
	st, err := o.m.Store()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Client.PutObject(o.ctx, pub[0].Object.Bucket, pub[0].Object.Key, strings.NewReader("v!"), 2, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	_, errs = o.run(exitcode.Internal, "read", "--resource", "report", "--version", pub[0].Version.String())
	if !strings.Contains(errs, "changed") {
		t.Fatalf("read --version of an overwritten object: %s", errs)
	}
}

// TestMissingResource tells a resource never granted (a misspelt name:
// exit 1 unless --allow-missing, and watch does not wait for it) from one
// granted and not yet published (pointer: "published": false, exit 0;
// watch waits, saying so).
func TestMissingResource(t *testing.T) {
	o := newOpsCLI(t, "missing")
	o.publish("report", "w", "k1", "body")

	_, errs := o.run(exitcode.NotFound, "pointer", "--resource", "nothing-here")
	if !strings.Contains(errs, `"nothing-here" has no pointer and was never granted in domain "d1"`) {
		t.Fatalf("pointer of a misspelt name: %s", errs)
	}
	out, _ := o.run(0, "pointer", "--resource", "nothing-here", "--allow-missing", "-o", "json")
	if p := decode[pointerOutput](t, out); p.Published || !p.NeverGranted {
		t.Fatalf("pointer --allow-missing of a misspelt name: %s", out)
	}
	if out, _ := o.run(0, "pointer", "--resource", "nothing-here", "--allow-missing"); out != "nothing-here: never granted or published\n" {
		t.Fatalf("pointer --allow-missing text: %q", out)
	}
	_, errs = o.run(exitcode.NotFound, "read", "--resource", "nothing-here")
	if !strings.Contains(errs, "never granted") {
		t.Fatalf("read of a misspelt name: %s", errs)
	}
	o.run(exitcode.NotFound, "history", "--resource", "nothing-here")
	out, _ = o.run(0, "history", "--resource", "nothing-here", "--allow-missing", "-o", "json")
	if h := decode[historyOutput](t, out); !h.NeverGranted || len(h.Versions) != 0 {
		t.Fatalf("history --allow-missing of a misspelt name: %s", out)
	}

	// watch fails at once on a misspelt name.
	start := time.Now()
	_, errs = o.run(exitcode.NotFound, "watch", "--resource", "nothing-here")
	if !strings.Contains(errs, "never granted") || time.Since(start) > 20*time.Second {
		t.Fatalf("watch of a misspelt name: %s after %s", errs, time.Since(start))
	}

	// Granted, not yet published.
	g := decode[struct {
		Epoch      uint64 `json:"epoch"`
		Generation uint64 `json:"generation"`
	}](t, first(o.run(0, "authority", "acquire", "--resource", "pending", "--owner", "p", "--ttl", "60s", "-o", "json")))
	out, _ = o.run(0, "pointer", "--resource", "pending", "-o", "json")
	if p := decode[pointerOutput](t, out); p.Published || p.NeverGranted {
		t.Fatalf("pointer of a granted resource: %s", out)
	}
	if out, _ := o.run(0, "pointer", "--resource", "pending"); out != "pending: granted, nothing published yet\n" {
		t.Fatalf("pointer text of a granted resource: %q", out)
	}

	// watch waits for a granted resource's first publish, and with
	// --allow-missing for a name never granted, saying so; each prints the
	// version published once it waits.
	watch := func(res string, extra ...string) *cliRun {
		return startRun(t, o.ctx, append(append([]string{"watch", "--resource", res, "--count", "1"}, extra...), o.conn...)...)
	}
	pending, later := watch("pending"), watch("later", "--allow-missing")
	pending.waitStderr(t, `waiting for the first publish resource=pending state="granted, nothing published yet"`, 30*time.Second)
	later.waitStderr(t, `waiting for the first publish resource=later state="never granted or published"`, 30*time.Second)
	body := filepath.Join(o.dir, "b")
	if err := os.WriteFile(body, []byte("first"), 0o644); err != nil {
		t.Fatal(err)
	}
	o.run(0, "publish", "--resource", "pending", "--owner", "p", "--epoch", fmt.Sprint(g.Epoch), "--fence", fmt.Sprint(g.Generation), "--seq", "1", "--key", "k1", "--file", body)
	o.publish("later", "w", "k-later", "later body")
	for name, w := range map[string]*cliRun{"pending": pending, "later": later} {
		select {
		case <-w.done:
		case <-o.ctx.Done():
			t.Fatalf("watch %s printed nothing:\n%s", name, w.stderr.String())
		}
		p := decode[pointerOutput](t, strings.TrimSpace(w.stdout))
		if w.code != 0 || !p.Published || p.Resource != name || p.Version.Seq != 1 {
			t.Fatalf("watch %s: exit %d\nstdout: %s\nstderr: %s", name, w.code, w.stdout, w.stderr.String())
		}
	}
}

// first returns its first argument.
func first(a, _ string) string { return a }

// TestReadmeRollback runs the commands of the docs' "Rollback" section, as
// written, on a resource with three retained versions.
func TestReadmeRollback(t *testing.T) {
	lines := docSection(t, "## Rollback")
	o := newOpsCLI(t, "readme")
	t.Chdir(o.dir)
	bodies := []string{"one", "two", "three"}
	for i, b := range bodies {
		o.publish("report", "w", fmt.Sprintf("k%d", i), b)
	}
	for _, line := range lines {
		args := strings.Fields(line)
		if len(args) < 2 || args[0] != "fencepub" {
			t.Fatalf("the Rollback section shows %q, not a fencepub command", line)
		}
		o.run(0, args[1:]...)
	}
	// The section reads 1.2.1 into a file, then rolls back to it.
	if b, err := os.ReadFile(filepath.Join(o.dir, "report-1.2.1")); err != nil || string(b) != bodies[1] {
		t.Fatalf("report-1.2.1: %q, %v", b, err)
	}
	if out, _ := o.run(0, "read", "--resource", "report"); out != bodies[1] {
		t.Fatalf("after the rollback the pointer's content is %q, want %q", out, bodies[1])
	}
}

// docSection returns the command lines (comments removed) of the sh
// block under heading in README.md or a page of docs/, wherever the
// section is.
func docSection(t *testing.T, heading string) []string {
	t.Helper()
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range append([]string{"../../README.md"}, files...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		_, rest, ok := strings.Cut(string(b), "\n"+heading+"\n")
		if !ok {
			continue
		}
		_, block, ok := strings.Cut(rest, "```sh\n")
		if !ok {
			t.Fatalf("%s: %q has no sh block", f, heading)
		}
		block, _, _ = strings.Cut(block, "```")
		var lines []string
		sc := bufio.NewScanner(strings.NewReader(block))
		for sc.Scan() {
			line, _, _ := strings.Cut(sc.Text(), "#")
			if line = strings.TrimSpace(line); line != "" {
				lines = append(lines, line)
			}
		}
		if len(lines) == 0 {
			t.Fatalf("%s: %q shows no command", f, heading)
		}
		return lines
	}
	t.Fatalf("no %q section in README.md or docs/", heading)
	return nil
}
