package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestSnapshotDeterministicAndComplete(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{"b/x.go": "package x\n", "a.txt": "hello", "b/c/d": "deep"}
	for p, body := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("a.txt", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	var one, two bytes.Buffer
	m, err := writeSnapshot(&one, root)
	if err != nil {
		t.Fatal(err)
	}
	// Touch a file's mtime: the bytes must not change.
	if err := os.Chtimes(filepath.Join(root, "a.txt"), epochTime, epochTime); err != nil {
		t.Fatal(err)
	}
	if _, err := writeSnapshot(&two, root); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(one.Bytes(), two.Bytes()) {
		t.Fatal("two snapshots of the same tree differ")
	}
	if len(m.Files) != 3 || m.Files[0].Path != "a.txt" || m.Files[2].Path != "b/x.go" {
		t.Fatalf("manifest %+v", m.Files)
	}
	gz, err := gzip.NewReader(&one)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Name == "MANIFEST.json" {
			var got Manifest
			if err := json.NewDecoder(tr).Decode(&got); err != nil || got.Bytes != int64(len("hello")+len("package x\n")+len("deep")) {
				t.Fatalf("manifest in archive: %+v %v", got, err)
			}
		}
	}
	base := filepath.Base(root)
	want := []string{"MANIFEST.json", base + "/a.txt", base + "/b/c/d", base + "/b/x.go"}
	if len(names) != len(want) {
		t.Fatalf("entries %v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("entries %v, want %v", names, want)
		}
	}
}
