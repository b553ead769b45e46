//go:build !unit

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/minio/minio-go/v7"
)

// TestDatasetCLI drives publish --dir, read --path, read --out DIR, ls and
// verify of a dataset against real etcd and MinIO: the JSON fields, the
// refusals before anything is acquired, reuse, and a file corrupted in the
// bucket reported by path.
func TestDatasetCLI(t *testing.T) {
	conn, _, m := testenv.CLIStack(t, "dscli")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := func(wantCode int, args ...string) (string, string) {
		t.Helper()
		out, errs, code := publishCLI(t, ctx, "", append(args, conn...)...)
		if code != wantCode {
			t.Fatalf("fencepub %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, wantCode, out, errs)
		}
		return out, errs
	}
	root := t.TempDir()
	write := func(dir, rel, body string) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out1 := filepath.Join(root, "out1")
	write(out1, "part-00000.csv", "a,b\n1,2\n")
	write(out1, "part-00001.csv", "a,b\n3,4\n")
	write(out1, "meta/schema.json", `{"a":"int"}`)
	publish := func(want int, dir, key string, extra ...string) map[string]any {
		t.Helper()
		out, _ := run(want, append([]string{"publish", "--resource", "export", "--owner", "job", "--ttl", "10s", "--dir", dir, "--key", key, "-o", "json"}, extra...)...)
		var r map[string]any
		if out != "" {
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("publish JSON: %v\n%s", err, out)
			}
		}
		return r
	}
	r1 := publish(0, out1, "day-1")
	for field, want := range map[string]any{"outcome": "applied", "files": 3.0, "bytes": 27.0, "uploaded_files": 3.0, "uploaded_bytes": 27.0, "reused_files": 0.0} {
		if r1[field] != want {
			t.Fatalf("publish --dir: %s = %v, want %v (%v)", field, r1[field], want, r1)
		}
	}
	if s, _ := r1["sha256"].(string); len(s) != 64 {
		t.Fatalf("publish --dir: sha256 %v", r1["sha256"])
	}
	if again := publish(0, out1, "day-1"); again["outcome"] != "duplicate" {
		t.Fatalf("retry: %v", again)
	}

	// Incremental: one file changed, one added.
	out2 := filepath.Join(root, "out2")
	write(out2, "part-00000.csv", "a,b\n1,2\n")
	write(out2, "part-00001.csv", "a,b\n3,5\n")
	write(out2, "meta/schema.json", `{"a":"int"}`)
	write(out2, "part-00002.csv", "a,b\n6,7\n")
	r2 := publish(0, out2, "day-2")
	if r2["reused_files"] != 2.0 || r2["uploaded_files"] != 2.0 || r2["files"] != 4.0 {
		t.Fatalf("incremental publish: %v", r2)
	}

	// One file by path; the whole version into a directory.
	got, _ := run(0, "read", "--resource", "export", "--path", "part-00001.csv")
	if got != "a,b\n3,5\n" {
		t.Fatalf("read --path: %q", got)
	}
	copyDir := filepath.Join(root, "copy")
	run(0, "read", "--resource", "export", "--out", copyDir)
	for _, rel := range []string{"part-00000.csv", "part-00001.csv", "part-00002.csv", "meta/schema.json"} {
		want, _ := os.ReadFile(filepath.Join(out2, rel))
		if b, err := os.ReadFile(filepath.Join(copyDir, rel)); err != nil || string(b) != string(want) {
			t.Fatalf("read --out DIR: %s = %q, %v", rel, b, err)
		}
	}
	run(exitcode.Usage, "read", "--resource", "export", "--out", copyDir) // not empty
	// -o json: the file read by path, and a whole version read by its
	// version (its history entry).
	readJSON := func(args ...string) map[string]any {
		t.Helper()
		out, _ := run(0, append([]string{"read", "--resource", "export", "-o", "json"}, args...)...)
		var r map[string]any
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("read -o json: %v\n%s", err, out)
		}
		return r
	}
	oneFile := filepath.Join(root, "one.csv")
	if r := readJSON("--path", "part-00002.csv", "--out", oneFile); r["path"] != "part-00002.csv" || r["bytes"] != 8.0 || r["file"] != oneFile {
		t.Fatalf("read --path -o json: %v", r)
	}
	if b, err := os.ReadFile(oneFile); err != nil || string(b) != "a,b\n6,7\n" {
		t.Fatalf("read --path --out FILE: %q, %v", b, err)
	}
	v1 := r1["version"].(map[string]any)
	day1 := fmt.Sprintf("%v.%v.%v", v1["epoch"], v1["fence"], v1["seq"])
	day1Dir := filepath.Join(root, "day1")
	if r := readJSON("--version", day1, "--out", day1Dir); r["files_read"] != 3.0 || r["bytes"] != 27.0 || r["file"] != day1Dir {
		t.Fatalf("read --version --out DIR -o json: %v", r)
	}
	if b, err := os.ReadFile(filepath.Join(day1Dir, "part-00001.csv")); err != nil || string(b) != "a,b\n3,4\n" {
		t.Fatalf("read --version %s --out DIR: %q, %v", day1, b, err)
	}
	run(exitcode.Usage, "read", "--resource", "export") // a dataset needs --path or --out DIR
	if _, errs := run(exitcode.Usage, "read", "--resource", "export", "--path", "no/such.csv"); !strings.Contains(errs, "no/such.csv") {
		t.Fatalf("read of a path the dataset lacks does not name it: %s", errs)
	}

	// ls lists the manifest.
	lsOut, _ := run(0, "ls", "--resource", "export", "-o", "json")
	var ls struct {
		Resources []struct {
			Kind     string `json:"kind"`
			Files    int64  `json:"files"`
			Manifest []struct {
				Path   string `json:"path"`
				Size   int64  `json:"size"`
				SHA256 string `json:"sha256"`
			} `json:"manifest"`
		} `json:"resources"`
	}
	if err := json.Unmarshal([]byte(lsOut), &ls); err != nil || len(ls.Resources) != 1 {
		t.Fatalf("ls JSON: %v\n%s", err, lsOut)
	}
	if e := ls.Resources[0]; e.Kind != "dataset" || e.Files != 4 || len(e.Manifest) != 4 || e.Manifest[0].Path != "meta/schema.json" || len(e.Manifest[0].SHA256) != 64 {
		t.Fatalf("ls: %+v", ls.Resources[0])
	}
	lsOut, _ = run(0, "ls", "--resource", "export", "--version", day1, "-o", "json")
	if err := json.Unmarshal([]byte(lsOut), &ls); err != nil || len(ls.Resources[0].Manifest) != 3 || ls.Resources[0].Files != 3 {
		t.Fatalf("ls --version %s: %v\n%s", day1, err, lsOut)
	}
	run(exitcode.Usage, "ls", "--resource", "export", "--version", "9.9.9")
	run(0, "verify", "--resource", "export")

	// run --output-dir publishes what CMD wrote under the directory.
	runDir := filepath.Join(root, "run-out")
	runArgs := func(id string) []string {
		a := append([]string{"run", "--resource", "nightly", "--run-id", id, "--output-dir", runDir, "-o", "json"}, conn...)
		return append(a, "--", "sh", "-c", `mkdir -p "$0/p" && printf x > "$0/p/a" && printf yy > "$0/b"`, runDir)
	}
	out, errs, code := publishCLI(t, ctx, "", runArgs("r1")...)
	var ro map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &ro) != nil || ro["outcome"] != "applied" || ro["files"] != 2.0 || ro["bytes"] != 3.0 {
		t.Fatalf("run --output-dir: exit %d\n%s\n%s", code, out, errs)
	}
	if got, _ := run(0, "read", "--resource", "nightly", "--path", "p/a"); got != "x" {
		t.Fatalf("read --path of run's dataset: %q", got)
	}
	if _, errs, code = publishCLI(t, ctx, "", runArgs("r2")...); code != exitcode.Usage || !strings.Contains(errs, "not empty") {
		t.Fatalf("run --output-dir on a directory left by an earlier run: exit %d\n%s", code, errs)
	}

	// Refusals before anything is acquired: a symbolic link, an empty
	// directory; nothing is published.
	bad := filepath.Join(root, "bad")
	write(bad, "ok", "x")
	if err := os.Symlink(filepath.Join(bad, "ok"), filepath.Join(bad, "link")); err != nil {
		t.Fatal(err)
	}
	_, errs = run(exitcode.Usage, "publish", "--resource", "export", "--owner", "job", "--ttl", "10s", "--dir", bad, "--key", "bad")
	if !strings.Contains(errs, "link") {
		t.Fatalf("symlink refusal does not name the path: %s", errs)
	}
	// With -o json, the refusal is the JSON error document.
	var doc struct {
		Command  string `json:"command"`
		Error    string `json:"error"`
		ExitCode int    `json:"exit_code"`
	}
	out, _ = run(exitcode.Usage, "publish", "--resource", "export", "--owner", "job", "--ttl", "10s", "--dir", bad, "--key", "bad", "-o", "json")
	if err := json.Unmarshal([]byte(out), &doc); err != nil || doc.ExitCode != exitcode.Usage || !strings.Contains(doc.Error, "link") || doc.Command == "" {
		t.Fatalf("publish --dir -o json refusal: %+v, %v\n%s", doc, err, out)
	}
	publish(0, bad, "followed", "--follow-symlinks")
	empty := filepath.Join(root, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	run(exitcode.Usage, "publish", "--resource", "export", "--owner", "job", "--ttl", "10s", "--dir", empty, "--key", "empty")

	// A file corrupted in the bucket: read and verify report it by path.
	publish(0, out2, "day-3", "--base", "none")
	ptrOut, _ := run(0, "pointer", "--resource", "export", "-o", "json")
	var ptr struct {
		Object struct{ Key string } `json:"object"`
	}
	if err := json.Unmarshal([]byte(ptrOut), &ptr); err != nil {
		t.Fatal(err)
	}
	key := layout.FileKey(ptr.Object.Key, "part-00002.csv")
	st, err := m.Store()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Client.PutObject(ctx, m.Config.Bucket, key, strings.NewReader("a,b\n6,8\n"), 8, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	_, errs = run(exitcode.Internal, "read", "--resource", "export", "--path", "part-00002.csv")
	if !strings.Contains(errs, "part-00002.csv") {
		t.Fatalf("read of a corrupted file does not name it: %s", errs)
	}
	half := filepath.Join(root, "half")
	run(exitcode.Internal, "read", "--resource", "export", "--out", half)
	if _, err := os.Stat(half); !os.IsNotExist(err) {
		t.Fatalf("a half-read dataset appeared at %s: %v", half, err)
	}
	out, _ = run(exitcode.Internal, "verify", "--resource", "export", "-o", "json")
	if !strings.Contains(out, "part-00002.csv") || strings.Contains(out, "part-00001.csv") {
		t.Fatalf("verify does not name exactly the corrupted file: %s", out)
	}
}
