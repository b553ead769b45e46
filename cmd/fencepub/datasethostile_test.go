//go:build !unit

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/manifest"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/minio/minio-go/v7"
)

// hostileLine is the canonical JSON line of v (what the manifest decoder
// re-encodes a line to), for forging manifests.
func hostileLine(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

// Hostile manifests in the bucket: someone with write access to the bucket
// overwrites a dataset's manifest, or (with etcd access too) makes the
// pointer name a manifest of their own whose sha256 it states (one that
// names another resource's file included). `read
// --path`, `read --out DIR` and `verify` refuse each one with an error
// naming what is wrong (the path the manifest gives, or the manifest's
// key), write nothing (no --out directory, nothing outside it), and a GC
// pass fails rather than act on it.
func TestDatasetHostileManifests(t *testing.T) {
	conn, e, m := testenv.CLIStack(t, "dshostile")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cli, err := e.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	st, err := m.Store()
	if err != nil {
		t.Fatal(err)
	}
	ns, err := layout.NewNamespace("dshostile", "d1")
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, string, int) {
		t.Helper()
		return publishCLI(t, ctx, "", append(args, conn...)...)
	}
	root := t.TempDir()
	src := filepath.Join(root, "src")
	for rel, body := range map[string]string{"a.txt": "alpha", "dir/b.txt": "beta"} {
		p := filepath.Join(src, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// published publishes src as res and returns its pointer.
	published := func(res string) layout.Pointer {
		t.Helper()
		if out, errs, code := run("publish", "--resource", res, "--owner", "job", "--ttl", "10s", "--dir", src, "--key", "k"); code != 0 {
			t.Fatalf("publish: exit %d\n%s\n%s", code, out, errs)
		}
		kv, err := cli.Get(ctx, ns.PointerKey(res))
		if err != nil || len(kv.Kvs) != 1 {
			t.Fatalf("pointer: %v", err)
		}
		p, err := layout.DecodePointer(kv.Kvs[0].Value)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	put := func(key string, body []byte) string {
		t.Helper()
		info, err := st.Client.PutObject(ctx, m.Config.Bucket, key, bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return info.ETag
	}
	// forge writes body as a manifest of res at a key of its own and
	// makes the pointer name it, with body's sha256.
	// forgedKey is where forge writes a manifest of the resource under
	// test: a key of the pointer's version with another nonce.
	var forgedKey string
	forge := func(res string, ptr layout.Pointer, body []byte) {
		t.Helper()
		key := forgedKey
		sum := sha256.Sum256(body)
		ptr.Object = layout.Object{Bucket: ptr.Object.Bucket, Key: key, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(body)), ETag: put(key, body)}
		val, err := layout.EncodePointer(ptr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(ctx, ns.PointerKey(res), val); err != nil {
			t.Fatal(err)
		}
	}
	header := func(files, bytes int64) string {
		return hostileLine(t, manifest.Header{Format: manifest.Format, Files: files, Bytes: bytes})
	}
	entry := func(ptr layout.Pointer, path string, size int64, body string) string {
		sum := sha256.Sum256([]byte(body))
		return hostileLine(t, manifest.Entry{Path: path, Size: size, SHA256: hex.EncodeToString(sum[:]),
			Key: layout.FileKey(ptr.Object.Key, "a.txt"), ContentType: "application/octet-stream"})
	}
	huge := strings.Repeat("a", 2<<20)
	for i, c := range []struct {
		name  string
		spoil func(res string, ptr layout.Pointer)
		names string // what the error must name
		// fileBad: the manifest is sound, a file's bytes are not its
		// entry's; GC has nothing to refuse and keeps the file.
		fileBad bool
	}{
		{"index overwritten with a path escaping the directory", func(res string, ptr layout.Pointer) {
			put(ptr.Object.Key, []byte(header(1, 5)+entry(ptr, "../escape", 5, "alpha")))
		}, ptr0Key, false},
		{"index truncated", func(res string, ptr layout.Pointer) {
			body := []byte(header(2, 9) + entry(ptr, "a.txt", 5, "alpha"))
			put(ptr.Object.Key, body[:len(body)/2])
		}, ptr0Key, false},
		{"forged: a path escaping the directory", func(res string, ptr layout.Pointer) {
			forge(res, ptr, []byte(header(1, 5)+entry(ptr, "../escape", 5, "alpha")))
		}, "../escape", false},
		{"forged: an absolute path", func(res string, ptr layout.Pointer) {
			forge(res, ptr, []byte(header(1, 5)+entry(ptr, "/etc/escape", 5, "alpha")))
		}, "/etc/escape", false},
		{"forged: a path given twice", func(res string, ptr layout.Pointer) {
			forge(res, ptr, []byte(header(2, 10)+entry(ptr, "a.txt", 5, "alpha")+entry(ptr, "a.txt", 5, "alpha")))
		}, "a.txt", false},
		{"forged: a file inside a file", func(res string, ptr layout.Pointer) {
			forge(res, ptr, []byte(header(2, 10)+entry(ptr, "a.txt", 5, "alpha")+entry(ptr, "a.txt/x", 5, "alpha")))
		}, "a.txt/x", false},
		{"forged: a huge line", func(res string, ptr layout.Pointer) {
			forge(res, ptr, []byte(header(1, 5)+entry(ptr, huge, 5, "alpha")))
		}, "aaaa", false},
		{"forged: deep nesting", func(res string, ptr layout.Pointer) {
			forge(res, ptr, []byte(header(1, 5)+`{"path":`+strings.Repeat("[", 100000)+strings.Repeat("]", 100000)+"}\n"))
		}, "entry 0", false},
		{"forged: a wrong sha256 for the file", func(res string, ptr layout.Pointer) {
			forge(res, ptr, []byte(header(1, 5)+entry(ptr, "a.txt", 5, "ALPHA")))
		}, "a.txt", true},
		{"forged: a file of another resource", func(res string, ptr layout.Pointer) {
			sum := sha256.Sum256([]byte("alpha"))
			foreign := layout.FileKey(ns.ObjectKey("other", ptr.Version, layout.NewNonce()), "a.txt")
			forge(res, ptr, []byte(header(1, 5)+hostileLine(t, manifest.Entry{Path: "a.txt", Size: 5, SHA256: hex.EncodeToString(sum[:]),
				Key: foreign, ContentType: "application/octet-stream"})))
		}, "/other/", false},
		{"forged: a truncated page", func(res string, ptr layout.Pointer) {
			page := []byte(entry(ptr, "a.txt", 5, "alpha"))
			page = page[:len(page)-10]
			pkey := layout.PageKey(forgedKey, 0)
			etag := put(pkey, page)
			sum := sha256.Sum256(page)
			ref := manifest.PageRef{First: "a.txt", Last: "a.txt", Files: 1, Bytes: 5, Key: pkey, SHA256: hex.EncodeToString(sum[:]), ETag: etag, Size: int64(len(page))}
			forge(res, ptr, []byte(hostileLine(t, manifest.Header{Format: manifest.Format, Files: 1, Bytes: 5, Pages: 1})+hostileLine(t, ref)))
		}, "page", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := fmt.Sprintf("victim%d", i)
			ptr := published(res)
			forgedKey = ns.ObjectKey(res, ptr.Version, layout.NewNonce())
			c.spoil(res, ptr)
			names := c.names
			if names == ptr0Key {
				names = ptr.Object.Key
			}
			_, errs, code := run("read", "--resource", res, "--path", "a.txt")
			if code == 0 || !strings.Contains(errs, names) {
				t.Fatalf("read --path: exit %d; want a failure naming %.80q\n%.2000s", code, names, errs)
			}
			// A forged manifest has the sha256 its pointer names: it is
			// refused for what it holds, not called a digest mismatch.
			if forged := c.names != ptr0Key && !c.fileBad; forged && (strings.Contains(errs, "do not match") || !strings.Contains(errs, forgedKey)) {
				t.Fatalf("read --path of a forged manifest: want it refused by name, not as a digest mismatch\n%.2000s", errs)
			}
			parent := filepath.Join(root, res)
			if err := os.Mkdir(parent, 0o755); err != nil {
				t.Fatal(err)
			}
			_, errs, code = run("read", "--resource", res, "--out", filepath.Join(parent, "copy"))
			if code == 0 || !strings.Contains(errs, names) {
				t.Fatalf("read --out: exit %d; want a failure naming %.80q\n%.2000s", code, names, errs)
			}
			if left, _ := os.ReadDir(parent); len(left) != 0 {
				t.Fatalf("read --out left %v beside its target", left)
			}
			if _, err := os.Stat(filepath.Join(root, "escape")); !os.IsNotExist(err) {
				t.Fatalf("read --out wrote outside its directory: %v", err)
			}
			out, errs, code := run("verify", "--resource", res)
			if code == 0 || !strings.Contains(out+errs, names) {
				t.Fatalf("verify: exit %d; want a failure naming %.80q\n%.2000s\n%.2000s", code, names, out, errs)
			}
			_, errs, code = run("gc", "run", "--resource", res, "--grace", "1s", "--retain", "1")
			if c.fileBad {
				if _, err := st.Client.StatObject(ctx, m.Config.Bucket, layout.FileKey(ptr.Object.Key, "a.txt"), minio.StatObjectOptions{}); code != 0 || err != nil {
					t.Fatalf("gc run: exit %d, the file the manifest names: %v\n%.4000s", code, err, errs)
				}
				return
			}
			if code == 0 || code == exitcode.Usage || !strings.Contains(errs, "manifest") {
				t.Fatalf("gc run: exit %d; want the pass failed on the manifest\n%.4000s", code, errs)
			}
		})
	}
}

// ptr0Key stands for the spoiled resource's own manifest key in
// TestDatasetHostileManifests.
const ptr0Key = "<the manifest's key>"
