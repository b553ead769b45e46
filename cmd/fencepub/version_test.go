package main

import (
	"bytes"
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/fencepub/fencepub/internal/cli"
)

// decodeVersion strictly decodes `fencepub version -o json` output.
func decodeVersion(t *testing.T, out string) buildInfo {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	var b struct {
		SchemaVersion int `json:"schema_version"`
		buildInfo
	}
	if err := dec.Decode(&b); err != nil {
		t.Fatalf("version -o json: %v\n%s", err, out)
	}
	if b.SchemaVersion != cli.SchemaVersion {
		t.Fatalf("version -o json: schema_version %d, want %d", b.SchemaVersion, cli.SchemaVersion)
	}
	return b.buildInfo
}

// `fencepub version` and --version print the same line, and -o json carries
// every field with schema_version 1; a release build's ldflags replace the
// module's version and commit in both.
func TestVersionCommand(t *testing.T) {
	for _, release := range []bool{false, true} {
		if release {
			releaseVersion, releaseCommit = "v1.2.3", "0123456789abcdef0123456789abcdef01234567"
			t.Cleanup(func() { releaseVersion, releaseCommit = "", "" })
		}
		flagOut, _, code := runCLI(t, "--version")
		if code != 0 {
			t.Fatalf("--version: exit %d", code)
		}
		cmdOut, _, code := runCLI(t, "version")
		if code != 0 {
			t.Fatalf("version: exit %d", code)
		}
		if flagOut != "fencepub version "+cmdOut {
			t.Fatalf("--version %q and version %q differ", flagOut, cmdOut)
		}
		jsonOut, _, code := runCLI(t, "version", "-o", "json")
		if code != 0 {
			t.Fatalf("version -o json: exit %d", code)
		}
		b := decodeVersion(t, jsonOut)
		want := buildInfo{Version: b.Version, Commit: b.Commit, Modified: b.Modified,
			GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
		if release {
			want.Version, want.Commit, want.Modified = "v1.2.3", releaseCommit, false
		}
		if b != want || b.Version == "" {
			t.Fatalf("version -o json = %+v, want %+v", b, want)
		}
		if strings.TrimSpace(cmdOut) != b.String() {
			t.Fatalf("version %q, JSON says %q", cmdOut, b.String())
		}
		for _, part := range []string{b.Version, runtime.Version(), runtime.GOOS + "/" + runtime.GOARCH} {
			if !strings.Contains(cmdOut, part) {
				t.Fatalf("version %q lacks %q", cmdOut, part)
			}
		}
		if release && !strings.Contains(cmdOut, "commit 0123456789ab,") {
			t.Fatalf("version %q lacks the release commit", cmdOut)
		}
	}
	var raw map[string]any
	out, _, _ := runCLI(t, "version", "-o", "json")
	if err := json.NewDecoder(bytes.NewReader([]byte(out))).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"schema_version", "version", "go_version", "os", "arch"} {
		if _, ok := raw[k]; !ok {
			t.Fatalf("version -o json lacks %q: %s", k, out)
		}
	}
	if _, _, code := runCLI(t, "version", "extra"); code != 2 {
		t.Fatalf("version extra: exit %d, want 2", code)
	}
}
