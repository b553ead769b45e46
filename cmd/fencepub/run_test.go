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
	"syscall"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestRunCLI drives `fencepub run` against real etcd and MinIO: stdout and
// --file capture, a retried run (duplicate), changed output under the same
// key (conflict), a failing command (its exit code, nothing published) and a
// lease lost while the command runs (terminated, nothing published, 114).
func TestRunCLI(t *testing.T) {
	conn, e, _ := testenv.CLIStack(t, "runtest")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	type out struct {
		Outcome     string `json:"outcome"`
		Reason      string `json:"reason"`
		CommandExit int    `json:"command_exit"`
		Fence       uint64 `json:"fence"`
		Key         string `json:"key"`
		Version     struct{ Epoch, Fence, Seq uint64 }
	}
	fp := func(wantCode int, args ...string) out {
		t.Helper()
		flags, cmdline := args, []string(nil)
		for i, a := range args {
			if a == "--" {
				flags, cmdline = args[:i], args[i:]
				break
			}
		}
		all := append(append(append([]string{}, flags...), conn...), cmdline...)
		stdout, stderr, code := publishCLI(t, ctx, "", all...)
		if code != wantCode {
			t.Fatalf("fencepub %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, wantCode, stdout, stderr)
		}
		var o out
		if strings.HasPrefix(stdout, "{") {
			if err := json.Unmarshal([]byte(stdout), &o); err != nil {
				t.Fatalf("JSON: %v\n%s", err, stdout)
			}
		}
		return o
	}
	read := func(res string) string {
		t.Helper()
		p := filepath.Join(dir, "read-"+res)
		stdout, stderr, code := publishCLI(t, ctx, "", append([]string{"read", "--resource", res, "--out", p}, conn...)...)
		if code != 0 {
			t.Fatalf("read: %d %s %s", code, stdout, stderr)
		}
		b, _ := os.ReadFile(p)
		return string(b)
	}

	// stdout capture; the grant reaches the command's environment.
	o := fp(0, "run", "--resource", "job", "--ttl", "2s", "--run-id", "r1", "-o", "json", "--", "sh", "-c", `echo "fence=$FENCEPUB_FENCE resource=$FENCEPUB_RESOURCE"`)
	if o.Outcome != "applied" || o.CommandExit != 0 || o.Fence != 1 {
		t.Fatalf("first run %+v", o)
	}
	if got := read("job"); got != "fence=1 resource=job\n" {
		t.Fatalf("published %q", got)
	}
	// The same run again with the same output: duplicate, pointer unchanged.
	o = fp(0, "run", "--resource", "job2", "--ttl", "2s", "--run-id", "r1", "-o", "json", "--", "echo", "same")
	again := fp(0, "run", "--resource", "job2", "--ttl", "2s", "--run-id", "r1", "-o", "json", "--", "echo", "same")
	if o.Outcome != "applied" || again.Outcome != "duplicate" || again.Version != o.Version || again.Key != o.Key {
		t.Fatalf("retry: first %+v, again %+v", o, again)
	}
	// Same key, different output: conflict.
	fp(exitcode.Conflict, "run", "--resource", "job2", "--ttl", "2s", "--key", o.Key, "--", "echo", "different")
	// The re-run and the conflicting run each left an object above the
	// pointer; the end of each run sealed its term, so one GC pass (default
	// policy) deletes both and a second one finds only the published object.
	gcPass := func(extra ...string) (scanned, deleted int64) {
		t.Helper()
		args := append(append([]string{"gc", "run", "--resource", "job2", "-o", "json"}, extra...), conn...)
		stdout, stderr, code := publishCLI(t, ctx, "", args...)
		var rep struct{ Scanned, Deleted int64 }
		if code != 0 || json.Unmarshal([]byte(stdout), &rep) != nil {
			t.Fatalf("gc run: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
		}
		return rep.Scanned, rep.Deleted
	}
	if scanned, deleted := gcPass(); scanned != 3 || deleted != 2 {
		t.Fatalf("gc pass after a duplicate and a conflicting re-run: scanned %d, deleted %d; want 3, 2", scanned, deleted)
	}
	if scanned, deleted := gcPass("--dry-run"); scanned != 1 || deleted != 0 {
		t.Fatalf("orphans left after one gc pass: scanned %d, deleted %d; want only the published object", scanned, deleted)
	}

	// --file capture.
	res := filepath.Join(dir, "result.txt")
	o = fp(0, "run", "--resource", "job3", "--ttl", "2s", "--file", res, "-o", "json", "--", "sh", "-c", "echo from-file > "+res)
	if o.Outcome != "applied" || read("job3") != "from-file\n" {
		t.Fatalf("--file run %+v", o)
	}

	// An existing --file is set aside while CMD runs, so only what CMD
	// writes in this run is published: it comes back when CMD fails or
	// writes nothing (or only an empty file), and is removed once a new
	// result is published. An append publishes only what this run wrote.
	kept := filepath.Join(dir, "kept.txt")
	saved := kept + ".fencepub-prev"
	if err := os.WriteFile(kept, []byte("important\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	intact := func(when string) {
		t.Helper()
		if b, err := os.ReadFile(kept); err != nil || string(b) != "important\n" || exists(saved) {
			t.Fatalf("--file %s: %q, %v (saved copy left: %v)", when, b, err, exists(saved))
		}
	}
	fp(1, "run", "--resource", "job7", "--file", kept, "--", "false")
	intact("after a failed command")
	fp(exitcode.Usage, "run", "--resource", "job7", "--file", kept, "--", "true")
	intact("after a command that wrote nothing")
	fp(exitcode.Usage, "run", "--resource", "job7", "--file", kept, "--", "touch", kept)
	intact("after a command that only touched it")
	// A command that fails after writing: the previous file is back, what
	// it wrote is kept aside, and the next run is not blocked.
	failed := kept + ".fencepub-failed"
	fp(3, "run", "--resource", "job7", "--file", kept, "--", "sh", "-c", "echo partial > "+kept+"; exit 3")
	intact("after a command that failed after writing")
	if b, err := os.ReadFile(failed); err != nil || string(b) != "partial\n" {
		t.Fatalf("the failed run's output: %q, %v", b, err)
	}
	// Whatever a failed run left at FILE.fencepub-failed (here a directory)
	// is replaced by the next failure's, never blocking a later run.
	fp(exitcode.Usage, "run", "--resource", "job7", "--file", kept, "--", "mkdir", kept)
	fp(4, "run", "--resource", "job7", "--file", kept, "--", "sh", "-c", "echo again > "+kept+"; exit 4")
	intact("after two failed runs")
	if b, err := os.ReadFile(failed); err != nil || string(b) != "again\n" {
		t.Fatalf("the second failed run's output: %q, %v", b, err)
	}
	// With --file, CMD's stdout goes to stderr: -o json stays parseable.
	if o = fp(0, "run", "--resource", "job7", "--file", kept, "-o", "json", "--", "sh", "-c", "echo chatter; echo more >> "+kept); o.Outcome != "applied" {
		t.Fatalf("-o json with a chatty command: %+v", o)
	}
	if got := read("job7"); got != "more\n" || exists(saved) || !exists(failed) {
		t.Fatalf("appended --file published %q (saved copy left: %v)", got, exists(saved))
	}
	// A FIFO (or any non-regular file) is refused before the lease.
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	fp(exitcode.Usage, "run", "--resource", "job7", "--file", fifo, "--", "true")
	// ... and so is a symlink (a rename would leave its target behind) ...
	sym := filepath.Join(dir, "sym")
	if err := os.Symlink(kept, sym); err != nil {
		t.Fatal(err)
	}
	fp(exitcode.Usage, "run", "--resource", "job7", "--file", sym, "--", "true")
	// ... and so is one that CMD leaves (opening it would block).
	made := filepath.Join(dir, "made-fifo")
	fp(exitcode.Usage, "run", "--resource", "job7", "--file", made, "--", "mkfifo", made)
	// Background children are killed when CMD exits: one that would empty
	// the result after CMD's end changes nothing. (It must not hold CMD's
	// stdout and stderr, which are pipes here, not the terminal: Wait
	// returns only once they close.)
	// CMD exits once the child has written its pid; the child, if it
	// survived, would empty the file 0.3 s later.
	bg, bgPid := filepath.Join(dir, "bg.txt"), filepath.Join(dir, "bg.pid")
	fp(0, "run", "--resource", "job7", "--file", bg, "--", "sh", "-c", "echo good > "+bg+
		"; sh -c 'echo $$ > "+bgPid+"; sleep 0.3; : > "+bg+"' >/dev/null 2>&1 & while [ ! -s "+bgPid+" ]; do sleep 0.01; done")
	pidText, err := os.ReadFile(bgPid)
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(string(pidText)))
	if err != nil {
		t.Fatalf("background child pid %q: %v", pidText, err)
	}
	testenv.Eventually(t, fmt.Sprintf("the background child %d is gone", child), 10*time.Second, func() bool { return !processAlive(child) })
	if got := read("job7"); got != "good\n" {
		t.Fatalf("with a background child: published %q", got)
	}
	if b, _ := os.ReadFile(bg); string(b) != "good\n" {
		t.Fatalf("a background child outlived the command and wrote %q", b)
	}
	fp(exitcode.Usage, "run", "--resource", "job8", "--", "true")
	if o = fp(0, "run", "--resource", "job8", "--allow-empty", "-o", "json", "--", "true"); o.Outcome != "applied" || read("job8") != "" {
		t.Fatalf("--allow-empty run %+v", o)
	}

	// Two runs of one resource and one --file, the second waiting for
	// the lease: it runs after the first, not refused because of the
	// first's FILE.fencepub-prev.
	shared := filepath.Join(dir, "shared.txt")
	if err := os.WriteFile(shared, []byte("v0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	type done struct {
		stdout string
		code   int
	}
	first := make(chan done, 1)
	go func() { // fp would call t.Fatal off the test goroutine
		stdout, _, code := publishCLI(t, ctx, "", append(append([]string{"run", "--resource", "job10", "--run-id", "a", "--file", shared, "-o", "json"}, conn...),
			"--", "sh", "-c", "sleep 1; echo a > "+shared)...)
		first <- done{stdout, code}
	}()
	for !exists(shared + ".fencepub-prev") {
		time.Sleep(10 * time.Millisecond)
	}
	second := fp(0, "run", "--resource", "job10", "--run-id", "b", "--max-wait", "30s", "--file", shared, "-o", "json", "--", "sh", "-c", "echo b > "+shared)
	f := <-first
	var fo out
	if err := json.Unmarshal([]byte(f.stdout), &fo); err != nil || f.code != 0 || fo.Outcome != "applied" ||
		second.Outcome != "applied" || second.Fence != fo.Fence+1 || read("job10") != "b\n" {
		t.Fatalf("overlapping runs: first exit %d %s (%v), second %+v", f.code, f.stdout, err, second)
	}

	// A lease still held when the wait ends is 113 naming the holder, from
	// run --max-wait and publish --max-wait alike; so with the deprecated
	// spellings run --wait D and publish --wait (until --timeout), which
	// warn.
	fp(0, "authority", "acquire", "--resource", "job9", "--owner", "alice", "--ttl", "30s")
	for _, args := range [][]string{
		append(append([]string{"run", "--resource", "job9", "--max-wait", "1s"}, conn...), "--", "echo", "hi"),
		append([]string{"publish", "--resource", "job9", "--owner", "bob", "--ttl", "5s", "--max-wait", "1s", "--key", "q", "--file", bg}, conn...),
		append(append([]string{"run", "--resource", "job9", "--wait", "1s"}, conn...), "--", "echo", "hi"),
		append([]string{"publish", "--resource", "job9", "--owner", "bob", "--ttl", "5s", "--wait", "--key", "q", "--file", bg, "--timeout", "1s"}, conn...),
	} {
		_, stderr, code := publishCLI(t, ctx, "", args...)
		if code != exitcode.Held || !strings.Contains(stderr, `"alice"`) {
			t.Fatalf("%q on a held lease: exit %d, stderr %q; want 113 naming alice", args, code, stderr)
		}
		if deprecated := slices.Contains(args, "--wait"); deprecated != strings.Contains(stderr, "flag=--wait") {
			t.Fatalf("%q: stderr %q; want a deprecation warning exactly for --wait", args, stderr)
		}
	}

	// A failing command: its own exit code, nothing published.
	o = fp(7, "run", "--resource", "job4", "--ttl", "2s", "-o", "json", "--", "sh", "-c", "echo partial; exit 7")
	if o.CommandExit != 7 || o.Outcome != "not_published" {
		t.Fatalf("failing command %+v", o)
	}
	if stdout, _, _ := publishCLI(t, ctx, "", append([]string{"pointer", "--resource", "job4", "-o", "json"}, conn...)...); !strings.Contains(stdout, `"published": false`) {
		t.Fatalf("pointer after a failed command: %s", stdout)
	}

	// Lease lost while the command runs: revoke the holder's lease from
	// outside; the command is terminated and nothing is published.
	ready, finished := filepath.Join(dir, "ready"), filepath.Join(dir, "finished")
	type result struct {
		o    out
		took time.Duration
	}
	resc := make(chan result, 1)
	go func() {
		start := time.Now()
		stdout, _, code := publishCLI(t, ctx, "", append(append([]string{"run", "--resource", "job5", "--ttl", "3s", "--grace", "2s", "-o", "json"}, conn...),
			"--", "sh", "-c", "touch "+ready+"; sleep 30; touch "+finished)...)
		var o out
		_ = json.Unmarshal([]byte(stdout), &o)
		o.CommandExit = code // reuse the field to carry fencepub's exit code
		resc <- result{o, time.Since(start)}
	}()
	cli := testenv.EtcdClient(t, e)
	for {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("command never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	hk, err := cli.Get(ctx, "runtest/d1/authority/job5/holder")
	if err != nil || len(hk.Kvs) != 1 || hk.Kvs[0].Lease == 0 {
		t.Fatalf("holder key: %v %v", hk, err)
	}
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(hk.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	r := <-resc
	if r.o.CommandExit != exitcode.LeaseLost || r.o.Outcome != "not_published" || r.took > 20*time.Second {
		t.Fatalf("lease lost mid-command: %+v after %s", r.o, r.took)
	}
	if _, err := os.Stat(finished); err == nil {
		t.Fatal("the command ran to completion after the lease was lost")
	}
	if stdout, _, _ := publishCLI(t, ctx, "", append([]string{"pointer", "--resource", "job5", "-o", "json"}, conn...)...); !strings.Contains(stdout, `"published": false`) {
		t.Fatalf("pointer after lease loss: %s", stdout)
	}

	// Ctrl-C while a command that ignores SIGTERM runs: it is killed after
	// --grace (fencepub does not wait for it for ever), and fencepub exits
	// 130 with nothing published.
	pidFile := filepath.Join(dir, "pid")
	ictx, interrupt := context.WithCancel(ctx)
	defer interrupt()
	codes := make(chan int, 1)
	go func() {
		_, _, code := publishCLI(t, ictx, "", append(append([]string{"run", "--resource", "job11", "--ttl", "2s", "--grace", "1s"}, conn...),
			"--", "sh", "-c", "trap '' TERM; echo $$ > "+pidFile+"; sleep 30")...)
		codes <- code
	}()
	for !exists(pidFile) || readFile(t, pidFile) == "" {
		time.Sleep(10 * time.Millisecond)
	}
	pid := strings.TrimSpace(readFile(t, pidFile))
	interrupt()
	select {
	case code := <-codes:
		if code != 130 {
			t.Fatalf("interrupted run: exit %d, want 130", code)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("an interrupted run waited for a command that ignores SIGTERM")
	}
	if exists("/proc/" + pid) {
		t.Fatalf("the interrupted command (pid %s) is still running", pid)
	}

	// Usage: no command.
	fp(exitcode.Usage, "run", "--resource", "job6")
}

// processAlive reports whether process pid exists and is not a zombie (a
// zombie runs no code; its parent may be slow to reap it).
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// "pid (comm) state ...": the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// TestRunRequestID: run --request-id names the acquire, as publish's and
// authority acquire's do, so running the same command again after an
// unconfirmed grant gets that grant back rather than minting another. Here
// the first run ends normally (its grant released), so the retry gets the
// same generation back, no longer live: exit 114 and nothing run; a run
// without the id mints the next generation.
func TestRunRequestID(t *testing.T) {
	conn, _, _ := testenv.CLIStack(t, "runreqid")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	marker := filepath.Join(t.TempDir(), "ran")
	run := func(want int, extra ...string) runOutput {
		t.Helper()
		args := append(append(append([]string{"run", "--resource", "job", "--ttl", "5s", "-o", "json"}, extra...), conn...), "--", "sh", "-c", "echo x; echo run >> "+marker)
		out, errs, code := publishCLI(t, ctx, "", args...)
		if code != want {
			t.Fatalf("run %q: exit %d, want %d\nstdout: %s\nstderr: %s", extra, code, want, out, errs)
		}
		var o runOutput
		if err := json.Unmarshal([]byte(out), &o); err != nil {
			t.Fatalf("run %q: %v\n%s", extra, err, out)
		}
		return o
	}
	first := run(0, "--request-id", "job-slot-1")
	again := run(exitcode.LeaseLost, "--request-id", "job-slot-1", "--key", "other")
	if again.Fence != 0 && again.Fence != first.Fence {
		t.Fatalf("a retry with the request id got fence %d, want the original %d (or none)", again.Fence, first.Fence)
	}
	if b, _ := os.ReadFile(marker); string(b) != "run\n" {
		t.Fatalf("the command ran %q times; want once (not under the retried, expired grant)", b)
	}
	if next := run(0, "--key", "third"); next.Fence != first.Fence+1 {
		t.Fatalf("a run without the id got fence %d, want %d", next.Fence, first.Fence+1)
	}
}
