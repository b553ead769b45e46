//go:build release

package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"debug/macho"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/fencepub/fencepub/internal/devstack"
)

// releasePlatforms are the os/arch pairs .goreleaser.yaml builds.
var releasePlatforms = []struct{ os, arch string }{
	{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "amd64"}, {"darwin", "arm64"},
}

// archivedDocs are files every release archive carries as they are in the
// checkout: the license, the front page, the changelog, a manual and the
// deploy files (.goreleaser.yaml `archives.files`).
var archivedDocs = []string{
	"LICENSE", "README.md", "CHANGELOG.md", "docs/operations.md",
	"deploy/kubernetes/gc-daemon.yaml", "deploy/systemd/fencepub-gc.service",
}

// `make release-snapshot` (goreleaser, offline: GOPROXY=off) builds one
// archive per platform, each with a static fencepub binary of its os/arch,
// the files of archivedDocs; checksums.txt lists exactly those archives with
// their sha256; the host's binary reports the snapshot version and the
// checkout's commit through --version and `version -o json`. It runs into
// its own dist directory (a copy of the config with dist: set), so the
// checkout's ./dist is never touched. A packaging check, built with the
// release tag: `make release-check` runs it (and `make test` runs that).
func TestReleaseSnapshot(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	bin, err := devstack.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := devstack.Binary("goreleaser"); err != nil {
		t.Fatalf("%v (build it with `make goreleaser`; `make test` does)", err)
	}
	cfg, err := os.ReadFile(filepath.Join(root, ".goreleaser.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	dist := filepath.Join(tmp, "dist")
	cfgPath := filepath.Join(tmp, "goreleaser.yaml")
	if err := os.WriteFile(cfgPath, fmt.Appendf(cfg, "\ndist: %s\n", dist), 0o644); err != nil {
		t.Fatal(err)
	}
	mk := exec.Command("make", "-C", root, "--no-print-directory", "release-snapshot", "BIN="+bin, "GORELEASER_CONFIG="+cfgPath)
	mk.Env = append(os.Environ(), "GOPROXY=off")
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make release-snapshot: %v\n%s", err, out)
	}

	var meta struct {
		Version string `json:"version"`
		Commit  string `json:"commit"`
	}
	readJSONFile(t, filepath.Join(dist, "metadata.json"), &meta)
	sums := readChecksums(t, filepath.Join(dist, "checksums.txt"))
	if len(sums) != len(releasePlatforms) {
		t.Fatalf("checksums.txt lists %d files, want the %d archives: %v", len(sums), len(releasePlatforms), sums)
	}
	var hostArchive string
	for _, p := range releasePlatforms {
		name := fmt.Sprintf("fencepub_%s_%s_%s.tar.gz", meta.Version, p.os, p.arch)
		want, ok := sums[name]
		if !ok {
			t.Fatalf("checksums.txt lacks %s: %v", name, sums)
		}
		path := filepath.Join(dist, name)
		body, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := sha256.Sum256(body); hex.EncodeToString(got[:]) != want {
			t.Fatalf("%s: sha256 %x, checksums.txt says %s", name, got, want)
		}
		files := untar(t, body)
		for _, f := range archivedDocs {
			want, err := os.ReadFile(filepath.Join(root, f))
			if err != nil {
				t.Fatal(err)
			}
			got, ok := files[f]
			if !ok {
				t.Fatalf("%s lacks %s", name, f)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s: %s differs from the checkout's", name, f)
			}
		}
		checkBinary(t, name, files["fencepub"], p.os, p.arch)
		if p.os == runtime.GOOS && p.arch == runtime.GOARCH {
			hostArchive = name
			exe := filepath.Join(tmp, "fencepub")
			if err := os.WriteFile(exe, files["fencepub"], 0o755); err != nil {
				t.Fatal(err)
			}
			checkReleaseVersion(t, exe, "v"+meta.Version, meta.Commit)
		}
	}
	if hostArchive == "" {
		t.Fatalf("no archive for the host's %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	if meta.Commit != strings.TrimSpace(string(head)) {
		t.Fatalf("goreleaser built commit %q, the checkout is at %s", meta.Commit, head)
	}
}

func readJSONFile(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// readChecksums parses a checksums.txt ("<sha256 hex>  <name>" lines) into
// name → hex.
func readChecksums(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok || len(sum) != 64 || name == "" {
			t.Fatalf("checksums.txt: bad line %q", sc.Text())
		}
		sums[name] = sum
	}
	return sums
}

// untar returns the regular files of a .tar.gz by path.
func untar(t *testing.T, tgz []byte) map[string][]byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = b
		}
	}
}

// checkBinary checks that b is an executable for goos/goarch and, on
// Linux, statically linked (no program interpreter: CGO_ENABLED=0).
func checkBinary(t *testing.T, archive string, b []byte, goos, goarch string) {
	t.Helper()
	if len(b) == 0 {
		t.Fatalf("%s has no fencepub binary", archive)
	}
	switch goos {
	case "linux":
		f, err := elf.NewFile(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", archive, err)
		}
		want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[goarch]
		if f.Machine != want || f.Type != elf.ET_EXEC {
			t.Fatalf("%s: ELF %v %v, want an executable for %v", archive, f.Type, f.Machine, want)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Fatalf("%s: dynamically linked (has an interpreter)", archive)
			}
		}
	case "darwin":
		f, err := macho.NewFile(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", archive, err)
		}
		want := map[string]macho.Cpu{"amd64": macho.CpuAmd64, "arm64": macho.CpuArm64}[goarch]
		if f.Cpu != want || f.Type != macho.TypeExec {
			t.Fatalf("%s: Mach-O %v %v, want an executable for %v", archive, f.Type, f.Cpu, want)
		}
	}
}

// checkReleaseVersion runs exe --version and `version -o json` and checks
// they name version and commit.
func checkReleaseVersion(t *testing.T, exe, version, commit string) {
	t.Helper()
	flag, err := exec.Command(exe, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", exe, err)
	}
	out, err := exec.Command(exe, "version", "-o", "json").Output()
	if err != nil {
		t.Fatalf("%s version -o json: %v", exe, err)
	}
	b := decodeVersion(t, string(out))
	want := buildInfo{Version: version, Commit: commit, GoVersion: b.GoVersion, OS: runtime.GOOS, Arch: runtime.GOARCH}
	if b != want {
		t.Fatalf("release binary: version -o json = %+v, want %+v", b, want)
	}
	if got := string(flag); got != "fencepub version "+b.String()+"\n" {
		t.Fatalf("release binary: --version %q, want the version line of %+v", got, b)
	}
}
