//go:build !unit

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/fencepub/fencepub/publisher"
)

// TestGCCLI drives `gc run`, `gc daemon` and `resource delete` against real
// etcd and MinIO: the report's JSON shape, the table, the exit codes, the
// daemon's endpoint and its graceful stop.
func TestGCCLI(t *testing.T) {
	conn, e, m := testenv.CLIStack(t, "clitest")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// run returns stdout, or stdout and stderr when the exit code is not 0.
	run := func(wantCode int, args ...string) string {
		t.Helper()
		out, errs, code := publishCLI(t, ctx, "", append(args, conn...)...)
		if code != wantCode {
			t.Fatalf("fencepub %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, wantCode, out, errs)
		}
		if code != 0 {
			return out + errs
		}
		return out
	}

	// A stale worker's orphan, made with the library.
	cli, err := devstack.NewEtcdClient(e.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	st, err := m.Store()
	if err != nil {
		t.Fatal(err)
	}
	ns, _ := layout.NewNamespace("clitest", "d1")
	auth, err := authority.New(authority.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(ns), Etcd: cli, Store: st}})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := publisher.New(publisher.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(ns), Etcd: cli, Store: st}})
	if err != nil {
		t.Fatal(err)
	}
	publish := func(g authority.Grant, key string) publisher.Result {
		t.Helper()
		p, err := pub.Bind(ctx, publisher.GrantTerm(g, false))
		if err != nil {
			t.Fatal(err)
		}
		r, _ := p.Publish(ctx, publisher.Operation{IdempotencyKey: key, Body: strings.NewReader(key)})
		return r
	}
	acquire := func(owner string) authority.Grant {
		t.Helper()
		g, err := auth.Acquire(ctx, authority.AcquireRequest{Resource: "job", Owner: owner, TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	a := acquire("a")
	publish(a, "1")
	if err := auth.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	b := acquire("b")
	publish(b, "2")
	if r := publish(a, "3"); r.Outcome != publisher.Stale {
		t.Fatalf("stale publish: %+v", r)
	}

	run(exitcode.Usage, "gc", "run")
	run(exitcode.Usage, "gc", "run", "--all", "--resource", "job")
	run(exitcode.Usage, "gc", "run", "--resource", "Bad/Name")
	table := run(0, "gc", "run", "--all", "--dry-run")
	if !strings.Contains(table, "dry run") || !strings.Contains(table, "kept") || !strings.Contains(table, "deleted      1") {
		t.Fatalf("dry-run table:\n%s", table)
	}
	out := run(0, "gc", "run", "--resource", "job", "-o", "json", "--verbose")
	var rep struct {
		Scanned, Deleted, Sealed *int64
		Kept                     map[string]int64
		Errors                   []string
		Decisions                []map[string]any
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if rep.Scanned == nil || *rep.Scanned != 3 || rep.Deleted == nil || *rep.Deleted != 1 || rep.Sealed == nil || rep.Errors == nil || len(rep.Decisions) != 3 {
		t.Fatalf("report JSON: %s", out)
	}
	for _, k := range []string{"published", "retained", "in_flight", "quarantined", "foreign"} {
		if _, ok := rep.Kept[k]; !ok {
			t.Fatalf("kept lacks %q: %s", k, out)
		}
	}
	for _, k := range []string{"key", "decision", "reason", "action"} {
		if _, ok := rep.Decisions[0][k]; !ok {
			t.Fatalf("decision lacks %q: %s", k, out)
		}
	}

	// resource delete: refused while b holds the lease; forced; idempotent.
	if msg := run(exitcode.Held, "resource", "delete", "job"); !strings.Contains(msg, `"b"`) {
		t.Fatalf("held message: %s", msg)
	}
	var d struct {
		Seal    layout.Version `json:"seal"`
		Already bool           `json:"already"`
	}
	if err := json.Unmarshal([]byte(run(0, "resource", "delete", "job", "--force", "-o", "json")), &d); err != nil || d.Seal.Seq != layout.MaxNumber || d.Seal.Fence != b.Generation || d.Already {
		t.Fatalf("resource delete: %+v %v", d, err)
	}
	if msg := run(0, "resource", "delete", "job", "--force"); !strings.Contains(msg, "already sealed") {
		t.Fatalf("second delete: %s", msg)
	}
	run(exitcode.Usage, "resource", "delete", "_gc")

	// The daemon: serves /healthz and /metrics, acts, stops on cancel.
	get, stop := gcDaemon(t, ctx, append([]string{"--grace", "1ms"}, conn...)...)
	if _, metrics := get("/metrics"); !strings.Contains(metrics, `fencepub_gc_kept_objects{decision="published"}`) || !strings.Contains(metrics, "fencepub_gc_leader 1") || !strings.Contains(metrics, "go_goroutines") {
		t.Fatalf("/metrics:\n%s", metrics)
	}
	if out, code := stop(); code != 0 {
		t.Fatalf("daemon exit %d: %s", code, out)
	}
	if _, held, err := auth.Holder(ctx, "_gc"); err != nil || held {
		t.Fatalf("GC lease still held after the daemon stopped (%v)", err)
	}
}

// The gc.* configuration keys set `gc run` (and `gc daemon`): flag >
// FENCEPUB_GC_* > config file > default, seen in what a dry-run pass would
// delete of three published versions; a bad value is exit 2 naming the key
// and its flag.
func TestGCConfigKeys(t *testing.T) {
	conn, _, _ := testenv.CLIStack(t, "gccfg")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	body := filepath.Join(dir, "body")
	for i := range 3 {
		if err := os.WriteFile(body, []byte(strconv.Itoa(i)), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, errs, code := publishCLI(t, ctx, "", append([]string{"publish", "--resource", "cfg", "--owner", "o", "--ttl", "5s", "--key", strconv.Itoa(i), "--file", body}, conn...)...); code != 0 {
			t.Fatalf("publish %d: exit %d: %s", i, code, errs)
		}
	}
	// A real pass starts the domain clock after the publishes; ages are
	// measured on it, so the 1ms grace below is past only once it has run
	// for a second or two by etcd's lease timer.
	if _, errs, code := publishCLI(t, ctx, "", append([]string{"gc", "run", "--resource", "cfg"}, conn...)...); code != 0 {
		t.Fatalf("gc run: exit %d: %s", code, errs)
	}
	cfgFile := filepath.Join(dir, "fencepub.yaml")
	writeCfg := func(yaml string) {
		if err := os.WriteFile(cfgFile, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// deletes returns how many objects a dry-run pass would delete.
	deletes := func(extra ...string) int64 {
		t.Helper()
		out, errs, code := publishCLI(t, ctx, "", append(append([]string{"gc", "run", "--resource", "cfg", "--dry-run", "-o", "json", "--config", cfgFile}, extra...), conn...)...)
		if code != 0 {
			t.Fatalf("gc run %v: exit %d: %s", extra, code, errs)
		}
		var rep struct{ Deleted int64 }
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out)
		}
		return rep.Deleted
	}
	writeCfg("gc: {}\n")
	if n := deletes(); n != 0 {
		t.Fatalf("defaults (10m grace): %d deletions, want 0", n)
	}
	writeCfg("gc:\n  retain: 1\n  grace: 1ms\n  clock_skew: 0s\n")
	for deadline := time.Now().Add(20 * time.Second); ; {
		n := deletes()
		if n == 2 {
			break
		}
		if n != 0 || time.Now().After(deadline) {
			t.Fatalf("file gc.retain 1, gc.grace 1ms: %d deletions, want 2", n)
		}
	}
	if n := deletes("--retain", "2"); n != 1 {
		t.Fatalf("--retain 2 over the file: %d deletions, want 1", n)
	}
	t.Setenv("FENCEPUB_GC_RETAIN", "3")
	if n := deletes(); n != 0 {
		t.Fatalf("FENCEPUB_GC_RETAIN=3 over the file: %d deletions, want 0", n)
	}
	if n := deletes("--retain", "1"); n != 2 {
		t.Fatalf("--retain 1 over FENCEPUB_GC_RETAIN: %d deletions, want 2", n)
	}
	writeCfg("gc:\n  retain: 0\n")
	if _, errs, code := publishCLI(t, ctx, "", append([]string{"gc", "run", "--resource", "cfg", "--retain", "0", "--config", cfgFile}, conn...)...); code != exitcode.Usage || !strings.Contains(errs, "gc.retain (--retain)") {
		t.Fatalf("retain 0: exit %d, %q; want 2 naming gc.retain and --retain", code, errs)
	}
}
