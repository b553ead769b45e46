//go:build !unit

package termtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

// onTerminal runs bin with args, its stderr (and its stdout when
// stdoutToo) on a pseudo-terminal, and returns what the terminal received
// and the exit code.
func onTerminal(t *testing.T, ctx context.Context, bin string, stdoutToo bool, args ...string) (string, int) {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 24, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stderr = tty
	if stdoutToo {
		cmd.Stdout = tty
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close() // the child holds it: reading ends (EIO) once it exits
	var screen bytes.Buffer
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(&screen, ptmx)
		close(copied)
	}()
	err = cmd.Wait()
	<-copied
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return screen.String(), cmd.ProcessState.ExitCode()
}

// publish and read show a progress bar of the bytes on stderr when it is
// a terminal (a pseudo-terminal here), and nothing but their log lines
// when it is not (a pipe), when they log JSON, or, for read, while the
// bytes themselves go to the terminal.
func TestProgressBars(t *testing.T) {
	bin := buildCLI(t)
	conn, _, _ := testenv.CLIStack(t, "progress")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	file := filepath.Join(dir, "body")
	if err := os.WriteFile(file, bytes.Repeat([]byte("fencepub\n"), 3<<20), 0o644); err != nil { // 27 MiB: several parts
		t.Fatal(err)
	}
	publish := func(key string, extra ...string) []string {
		return append(append([]string{"publish", "--resource", "big", "--owner", "me", "--ttl", "10s", "--key", key, "--file", file}, extra...), conn...)
	}
	read := func(extra ...string) []string {
		return append(append([]string{"read", "--resource", "big"}, extra...), conn...)
	}
	bar := func(what, screen string) bool {
		return strings.Contains(screen, what) && strings.Contains(screen, "%") && strings.Contains(screen, "\r")
	}

	screen, code := onTerminal(t, ctx, bin, false, publish("k1")...)
	if code != 0 || !bar("publish", screen) {
		t.Fatalf("publish on a terminal: exit %d, no progress bar:\n%q", code, screen)
	}
	screen, code = onTerminal(t, ctx, bin, false, read("--out", filepath.Join(dir, "out"))...)
	if code != 0 || !bar("read", screen) {
		t.Fatalf("read --out on a terminal: exit %d, no progress bar:\n%q", code, screen)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "out")); err != nil || len(got) != 27<<20 {
		t.Fatalf("read: %d bytes, %v", len(got), err)
	}
	screen, code = onTerminal(t, ctx, bin, false, publish("k2", "--log-format", "json")...)
	if code != 0 || strings.Contains(screen, "%") || len(testenv.JSONLines(t, "publish --log-format json", strings.ReplaceAll(screen, "\r\n", "\n"))) == 0 {
		t.Fatalf("publish with JSON logs on a terminal: exit %d, want JSON lines only:\n%q", code, screen)
	}
	screen, code = onTerminal(t, ctx, bin, true, read()...)
	if code != 0 || strings.Contains(screen, "%") || !strings.Contains(screen, "fencepub\r\n") {
		t.Fatalf("read to the terminal: exit %d, want the bytes and no bar:\n%.300q", code, screen)
	}

	_, errs, code := child(t, ctx, bin, nil, publish("k3")...)
	if code != 0 || strings.ContainsAny(errs, "\r%") || !strings.Contains(errs, "publish applied") {
		t.Fatalf("publish with stderr on a pipe: exit %d, want its log lines and no bar:\n%q", code, errs)
	}
	_, errs, code = child(t, ctx, bin, nil, read("--out", filepath.Join(dir, "out2"))...)
	if code != 0 || strings.ContainsAny(errs, "\r%") || !strings.Contains(errs, "sha256 verified") {
		t.Fatalf("read with stderr on a pipe: exit %d, want its log lines and no bar:\n%q", code, errs)
	}
}

// publish --dir shows a progress bar of the files and bytes on stderr when
// it is a terminal, counting files as they are published (the bar redraws
// at most a few times a second and is cleared at the end, so its last
// drawn count may be below the total), and none when stderr is a pipe.
func TestPublishDirProgressBar(t *testing.T) {
	bin := buildCLI(t)
	conn, _, _ := testenv.CLIStack(t, "dirprogress")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	const files = 40
	for i := range files {
		p := filepath.Join(dir, "part", fmt.Sprintf("%05d.bin", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, bytes.Repeat([]byte{byte(i)}, 256<<10), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	publish := func(key string) []string {
		return append([]string{"publish", "--resource", "export", "--owner", "me", "--ttl", "10s", "--key", key, "--dir", dir, "--base", "none"}, conn...)
	}
	screen, code := onTerminal(t, ctx, bin, false, publish("k1")...)
	counted := regexp.MustCompile(fmt.Sprintf(`\rpublish [1-9][0-9]*/%d files +[0-9]+%% \|`, files))
	if code != 0 || !counted.MatchString(screen) {
		t.Fatalf("publish --dir on a terminal: exit %d, want a progress bar counting files (%s):\n%q", code, counted, screen)
	}
	_, errs, code := child(t, ctx, bin, nil, publish("k2")...)
	if code != 0 || strings.ContainsAny(errs, "\r%") || strings.Contains(errs, "/40 files") || !strings.Contains(errs, "publish dataset") {
		t.Fatalf("publish --dir with stderr on a pipe: exit %d, want its log lines and no bar:\n%q", code, errs)
	}
}
