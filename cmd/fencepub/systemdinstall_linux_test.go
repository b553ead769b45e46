//go:build !unit

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

// systemdInstallBlock returns the sh block of the docs (README.md or a page
// of docs/) that installs the systemd units.
func systemdInstallBlock(t *testing.T) string {
	t.Helper()
	root := repoRoot(t)
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)```sh\n(.*?)```")
	for _, p := range append([]string{filepath.Join(root, "README.md")}, pages...) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range block.FindAllSubmatch(b, -1) {
			if bytes.Contains(m[1], []byte("deploy/systemd/fencepub-gc.service")) {
				return string(m[1])
			}
		}
	}
	t.Fatal("no sh block of the docs installs deploy/systemd/fencepub-gc.service")
	return ""
}

// The docs' systemd install steps, run as written from a checkout (as
// root, in a mount namespace whose /etc and /usr/local/bin are empty
// tmpfs; systemctl, which needs a running systemd, only records its
// arguments), install the binary, fencepub.yaml, a credentials.env of
// mode 0600 holding both S3 keys, the units and the job, and enable units
// that exist.
func TestDeploySystemdInstallSteps(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("running the install steps needs root (a mount namespace); CI runs as root")
	}
	steps := systemdInstallBlock(t)
	work := t.TempDir()
	if err := os.CopyFS(filepath.Join(work, "deploy", "systemd"), os.DirFS(filepath.Join(repoRoot(t), "deploy", "systemd"))); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"fencepub", "my-report"} {
		if err := os.WriteFile(filepath.Join(work, f), []byte("#!/bin/sh\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(work, "installed")
	script := `set -eu
mkdir -p "$OUT"
mount -t tmpfs local-bin /usr/local/bin
mount -t tmpfs etc /etc
mkdir -p /etc/systemd/system
systemctl() { echo "$*" >> "$OUT/systemctl"; }
cd "$WORK"
` + steps + `
cp -a /etc /usr/local/bin "$OUT/"
`
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "WORK=" + work, "OUT=" + out, "ACCESS_KEY=ak-test", "SECRET_KEY=sk-test"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	if stdout, stderr, code := testenv.RunCmd(t, cmd); code != 0 {
		t.Fatalf("install steps: exit %d\n%s\n%s\nsteps:\n%s", code, stdout, stderr, steps)
	}

	mode := func(rel string, want os.FileMode) []byte {
		t.Helper()
		p := filepath.Join(out, rel)
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != want {
			t.Fatalf("%s: %v, mode %v; want %v", rel, err, fi.Mode().Perm(), want)
		}
		b, _ := os.ReadFile(p)
		return b
	}
	mode("bin/fencepub", 0o755)
	mode("etc/fencepub/jobs/nightly-report", 0o755)
	if cfg := mode("etc/fencepub/fencepub.yaml", 0o644); !bytes.Equal(cfg, deployFile(t, "systemd/fencepub.yaml")) {
		t.Fatal("etc/fencepub/fencepub.yaml is not deploy/systemd/fencepub.yaml")
	}
	if env := string(mode("etc/fencepub/credentials.env", 0o600)); env != "FENCEPUB_S3_ACCESS_KEY=ak-test\nFENCEPUB_S3_SECRET_KEY=sk-test\n" {
		t.Fatalf("credentials.env: %q", env)
	}
	units, err := os.ReadDir(filepath.Join(out, "etc", "systemd", "system"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, u := range units {
		names = append(names, u.Name())
		mode("etc/systemd/system/"+u.Name(), 0o644)
	}
	for _, want := range []string{"fencepub-gc.service", "fencepub-run@.service", "fencepub-run@.timer"} {
		if !slices.Contains(names, want) {
			t.Fatalf("installed units %v lack %s", names, want)
		}
	}
	calls, err := os.ReadFile(filepath.Join(out, "systemctl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, call := range strings.Split(strings.TrimSpace(string(calls)), "\n") {
		args := strings.Fields(call)
		if args[0] == "daemon-reload" {
			continue
		}
		if len(args) != 3 || args[0] != "enable" || args[1] != "--now" {
			t.Fatalf("systemctl %s: not enable --now UNIT", call)
		}
		unit := regexp.MustCompile(`@[^.]+\.`).ReplaceAllString(args[2], "@.") // an instance of its template
		if !slices.Contains(names, unit) {
			t.Fatalf("systemctl %s: no unit %s installed (%v)", call, unit, names)
		}
	}
}
