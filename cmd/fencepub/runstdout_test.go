//go:build !unit

package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

// `fencepub run` streams CMD's stdout into the store while CMD runs
// (README "fencepub run"): a failing CMD whose output already spans
// several multipart parts leaves nothing in the bucket, not even an
// incomplete upload; and a process that CMD leaves behind outside its
// process group, holding stdout open, neither holds the run nor adds to
// the result.
func TestRunStdoutStreams(t *testing.T) {
	conn, _, m := testenv.CLIStack(t, "stream")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := func(want int, args ...string) runOutput {
		t.Helper()
		dash := 0
		for dash < len(args) && args[dash] != "--" {
			dash++
		}
		all := append(append(append([]string{"run", "--ttl", "5s", "-o", "json"}, args[:dash]...), conn...), args[dash:]...)
		stdout, stderr, code := publishCLI(t, ctx, "", all...)
		var o runOutput
		if code != want || json.Unmarshal([]byte(stdout), &o) != nil {
			t.Fatalf("fencepub %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(all, " "), code, want, stdout, stderr)
		}
		return o
	}

	// 40 MiB, then failure: three 16 MiB parts were under way.
	o := run(5, "--resource", "failing", "--", "sh", "-c", "head -c 41943040 /dev/zero; exit 5")
	if o.CommandExit != 5 || o.Outcome != "not_published" {
		t.Fatalf("failing command: %+v", o)
	}
	st, err := m.Store()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range bucketKeys(t, m) {
		if strings.HasPrefix(k, "stream/d1/failing/") { // the resource's objects (not the authority's markers)
			t.Fatalf("a failed command left object %s", k)
		}
	}
	for u, err := range st.ListUploads(ctx, "") {
		if err != nil {
			t.Fatal(err)
		}
		t.Fatalf("a failed command left the incomplete upload %s of %s", u.UploadID, u.Key)
	}

	// A daemon CMD starts in a session of its own keeps stdout open for a
	// minute: the run ends with CMD and publishes what CMD wrote.
	pidFile := filepath.Join(t.TempDir(), "daemon.pid")
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	start := time.Now()
	o = run(0, "--resource", "daemon", "--", "sh", "-c",
		`setsid sh -c 'echo $$ > `+pidFile+`; exec sleep 60' & echo first; sleep 0.2; echo second`)
	if took := time.Since(start); o.Outcome != "applied" || took > 30*time.Second {
		t.Fatalf("run with a daemon holding stdout: %+v after %s", o, took)
	}
	out := filepath.Join(t.TempDir(), "read")
	if stdout, stderr, code := publishCLI(t, ctx, "", append([]string{"read", "--resource", "daemon", "--out", out}, conn...)...); code != 0 {
		t.Fatalf("read: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if got := readFile(t, out); got != "first\nsecond\n" {
		t.Fatalf("published %q, want what CMD wrote", got)
	}
}

// commandOutput, the body of a streamed run, on a real pipe without
// servers: it ends (io.EOF) only once settled with CMD's success, fails
// for a failed CMD, a lost lease and an empty output, lets a writer that
// nobody reads any more finish (drain), and ends with what the pipe holds
// when a process outside CMD's group keeps the pipe open.
func TestCommandOutput(t *testing.T) {
	held := func() error { return nil }
	cases := []struct {
		name       string
		write      string
		cmdErr     error
		held       func() error
		allowEmpty bool
		want       string // the error's text; "": the output, then io.EOF
	}{
		{"success", "result\n", nil, held, false, ""},
		{"command failed", "partial", errors.New("exit 3"), held, false, errCommandFailed.Error()},
		{"lease lost", "result\n", nil, func() error { return errors.New("lease lost") }, false, "lease lost"},
		{"empty", "", nil, held, false, "is empty"},
		{"empty allowed", "", nil, held, true, ""},
	}
	for _, tc := range cases {
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		o := newCommandOutput(pr, tc.allowEmpty, tc.held)
		go func() {
			_, _ = pw.Write([]byte(tc.write))
			pw.Close()
			o.settle(tc.cmdErr)
		}()
		got, err := io.ReadAll(o)
		pr.Close()
		switch {
		case tc.want == "" && (err != nil || string(got) != tc.write):
			t.Fatalf("%s: read %q, %v; want %q and io.EOF", tc.name, got, err, tc.write)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Fatalf("%s: %v; want an error saying %q", tc.name, err, tc.want)
		}
	}

	// The publisher stopped reading: drain lets the writer finish 4 MiB,
	// far more than a pipe holds.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	o := newCommandOutput(pr, false, held)
	wrote := make(chan error, 1)
	go func() {
		_, err := pw.Write(make([]byte, 4<<20))
		pw.Close()
		o.settle(nil)
		wrote <- err
	}()
	o.drain()
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	pr.Close()

	// A writer outside CMD's group holds the pipe open: the output ends
	// with what the pipe held at settle.
	pr, pw, err = os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	o = newCommandOutput(pr, false, held)
	if _, err := pw.Write([]byte("before the end\n")); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var got []byte
	go func() {
		got, err = io.ReadAll(o)
		close(done)
	}()
	o.settle(nil) // before or while ReadAll waits on the pipe: either ends it
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the output did not end while another writer holds the pipe")
	}
	if err != nil || string(got) != "before the end\n" {
		t.Fatalf("read %q, %v", got, err)
	}
	pr.Close()
}
