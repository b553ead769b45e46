//go:build !unit

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/testkit/faultproxy"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// killStage is where TestDatasetPublishKilled kills a `publish --dir`
// process: after the files-th file upload was stored, after the manifest
// index was stored (before the transaction), or once the transaction
// applied (before the answer).
type killStage struct {
	name  string
	files int  // kill when the store answers this file upload (0: not)
	index bool // kill when the store answers the manifest index's upload
	txn   bool // kill when the pointer moves
	base  bool // publish over a base (reusing its unchanged files)
	// cut: when the store answers the index's upload, cut etcd off
	// instead of killing: the transaction never arrives, the answer is
	// unknown (exit 112), and resolve settles it.
	cut bool
}

// killer is an S3 reverse proxy to the store that SIGKILLs the publish
// process at a killStage, before the store's answer reaches it.
type killer struct {
	ns    layout.Namespace
	res   string
	stage killStage
	etcd  *faultproxy.Proxy // in front of etcd, for stage.cut

	mu     sync.Mutex
	proc   *os.Process
	files  int
	killed atomic.Bool
}

// kill kills the process once, returning whether this call killed it.
func (k *killer) kill() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.proc == nil || k.killed.Load() {
		return false
	}
	k.killed.Store(true)
	_ = k.proc.Kill()
	return true
}

// answered is called with every answer of the store, before the process
// gets it; it returns true when the process was killed for this answer.
func (k *killer) answered(r *http.Request, status int) bool {
	if r.Method != http.MethodPut || status/100 != 2 {
		return false
	}
	path := strings.TrimPrefix(r.URL.Path, "/")
	_, key, _ := strings.Cut(path, "/") // path-style: bucket/key
	_, own, ok := k.ns.ParseVersionKey(k.res, key)
	if !ok {
		return false
	}
	switch {
	case strings.Contains(key, layout.FilesSep):
		k.mu.Lock()
		k.files++
		n := k.files
		k.mu.Unlock()
		return n == k.stage.files && k.kill()
	case key == own && k.stage.cut:
		k.etcd.Set(faultproxy.Faults{DropUpstream: true})
	case key == own:
		return k.stage.index && k.kill()
	}
	return false
}

// A `fencepub publish --dir` process killed (SIGKILL) at every stage of a
// dataset publish — after some file uploads, after the last one, after the
// manifest index, after the transaction before its answer — with and
// without a base, leaves either the earlier version or the whole new one
// under the pointer, never a torn one; a rerun with the same key is applied
// (the killed attempt never applied) or duplicate (it had), and the
// version then read back is exactly the directory published. A publish
// whose transaction goes unanswered (etcd cut off after the index) is
// unknown (112) with JSON that `resolve --from -` settles as stale.
func TestDatasetPublishKilled(t *testing.T) {
	bin := buildCLI(t)
	conn, e, m := testenv.CLIStack(t, "dskill")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cli, err := e.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ns, err := layout.NewNamespace("dskill", "d1")
	if err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse("http://" + m.Config.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	var current atomic.Pointer[killer]
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = func(resp *http.Response) error {
		if k := current.Load(); k != nil && k.answered(resp.Request, resp.StatusCode) {
			return fmt.Errorf("the publisher was killed")
		}
		return nil
	}
	px := httptest.NewServer(rp)
	defer px.Close()
	epx, err := faultproxy.Start(strings.TrimPrefix(e.Members[0].ClientURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer epx.Close()
	proxied := append([]string{}, conn...)
	for i, a := range proxied {
		switch a {
		case "--s3-endpoint":
			proxied[i+1] = strings.TrimPrefix(px.URL, "http://")
		case "--etcd-endpoints":
			proxied[i+1] = epx.URL()
		}
	}
	root := t.TempDir()
	writeDir := func(name string, files map[string]string) string {
		t.Helper()
		dir := filepath.Join(root, name)
		for rel, body := range files {
			p := filepath.Join(dir, rel)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	publishArgs := func(res, dir, key string, ttl string) []string {
		timeout := "60s"
		if ttl == "unknown" { // the transaction goes unanswered: a short deadline
			ttl, timeout = "3s", "8s"
		}
		return []string{"publish", "--resource", res, "--owner", "job", "--ttl", ttl, "--max-wait", "30s", "--timeout", timeout,
			"--dir", dir, "--key", key, "--parallel", "1", "-o", "json"}
	}
	// readBack reads the current version of res into a new directory and
	// returns its files; nil when nothing is published.
	readBack := func(res string) map[string]string {
		t.Helper()
		out := filepath.Join(root, fmt.Sprintf("read-%s-%d", res, time.Now().UnixNano()))
		_, errs, code := publishCLI(t, ctx, "", append([]string{"read", "--resource", res, "--out", out}, conn...)...)
		if code == exitcode.NotFound && strings.Contains(errs, "nothing published") {
			return nil
		}
		if code != 0 {
			t.Fatalf("read --out of %s: exit %d\n%s", res, code, errs)
		}
		got := map[string]string{}
		err := filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(p)
			rel, _ := filepath.Rel(out, p)
			got[filepath.ToSlash(rel)] = string(b)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	same := func(a, b map[string]string) bool {
		if len(a) != len(b) || a == nil != (b == nil) {
			return false
		}
		for k, v := range a {
			if b[k] != v {
				return false
			}
		}
		return true
	}
	baseFiles := map[string]string{"a.csv": "1\n", "b.csv": "2\n", "c.csv": "3\n", "d/e.csv": "4\n", "d/f.csv": "5\n", "g.csv": "6\n"}

	for i, st := range []killStage{
		{name: "after 1 of 3 uploads", files: 1, base: true},
		{name: "after the last upload", files: 3, base: true},
		{name: "after the index", index: true, base: true},
		{name: "after the transaction", txn: true, base: true},
		{name: "first version, after 2 uploads", files: 2},
		{name: "first version, after the index", index: true},
		{name: "first version, after the transaction", txn: true},
		{name: "transaction unanswered, resolved", cut: true, base: true},
	} {
		t.Run(st.name, func(t *testing.T) {
			res := fmt.Sprintf("ds%d", i)
			var before map[string]string
			if st.base {
				before = baseFiles
				dir := writeDir(res+"-base", baseFiles)
				if out, errs, code := child(t, ctx, bin, nil, append(publishArgs(res, dir, "base", "10s"), conn...)...); code != 0 {
					t.Fatalf("base publish: exit %d\n%s\n%s", code, out, errs)
				}
			}
			// Three files to upload over a base: one changed, one new, one
			// changed under a directory; the others are reused.
			next := map[string]string{}
			for k, v := range baseFiles {
				next[k] = v
			}
			next["b.csv"], next["d/f.csv"], next["h.csv"] = "2 "+res+"\n", "5 "+res+"\n", "7 "+res+"\n"
			dir := writeDir(res+"-next", next)

			k := &killer{ns: ns, res: res, stage: st, etcd: epx}
			current.Store(k)
			defer current.Store(nil)
			defer epx.Set(faultproxy.Faults{})
			ttl := "3s"
			if st.cut {
				ttl = "unknown"
			}
			cmd := exec.CommandContext(ctx, bin, append(publishArgs(res, dir, "next", ttl), proxied...)...)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			wctx, stopWatch := context.WithCancel(ctx)
			defer stopWatch()
			var watched sync.WaitGroup
			if st.txn {
				w := cli.Watch(wctx, ns.PointerKey(res), clientv3.WithFilterDelete())
				watched.Go(func() {
					for resp := range w {
						for _, ev := range resp.Events {
							if p, err := layout.DecodePointer(ev.Kv.Value); err == nil && p.IsDataset() && p.Files == int64(len(next)) {
								k.kill()
								return
							}
						}
					}
				})
			}
			k.mu.Lock()
			err := cmd.Start()
			k.proc = cmd.Process
			k.mu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			werr := cmd.Wait()
			stopWatch()
			watched.Wait()
			epx.Set(faultproxy.Faults{})
			if st.cut {
				// Unknown, naming its attempt; resolve settles it as never
				// applied (stale, reason seal).
				code := 0
				if ee, ok := werr.(*exec.ExitError); ok {
					code = ee.ExitCode()
				}
				if code != exitcode.Unknown || !strings.Contains(stdout.String(), `"unknown"`) {
					t.Fatalf("publish with its transaction unanswered: exit %d (%v), want %d\nstdout: %s\nstderr: %s", code, werr, exitcode.Unknown, stdout.String(), stderr.String())
				}
				out, errs, code := publishCLI(t, ctx, stdout.String(), append([]string{"resolve", "--from", "-", "-o", "json"}, conn...)...)
				if code != exitcode.Stale || !strings.Contains(out, `"stale"`) {
					t.Fatalf("resolve of the unknown dataset publish: exit %d, want %d\n%s\n%s", code, exitcode.Stale, out, errs)
				}
			} else if !k.killed.Load() {
				t.Fatalf("the publish ended (%v) before the stage was reached\nstdout: %s\nstderr: %s", werr, stdout.String(), stderr.String())
			}
			if stdout.Len() > 0 && !st.txn && !st.cut {
				t.Fatalf("the killed publish printed an answer: %s", stdout.String())
			}

			// Never torn: the earlier version or the whole new one.
			got := readBack(res)
			switch {
			case st.txn && !same(got, next):
				t.Fatalf("after a kill past the transaction the version read is %v; want %v", got, next)
			case !st.txn && !same(got, before):
				t.Fatalf("after a kill before the transaction the version read is %v; want the earlier %v", got, before)
			}

			// A rerun with the same key settles it.
			out, errs, code := child(t, ctx, bin, nil, append(publishArgs(res, dir, "next", "10s"), conn...)...)
			var r struct {
				Outcome     string `json:"outcome"`
				ReusedFiles int64  `json:"reused_files"`
			}
			if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
				t.Fatalf("rerun: exit %d\n%s\n%s", code, out, errs)
			}
			want := "applied"
			if st.txn {
				want = "duplicate"
			}
			if r.Outcome != want {
				t.Fatalf("rerun: outcome %q, want %q\n%s", r.Outcome, want, out)
			}
			if got := readBack(res); !same(got, next) {
				t.Fatalf("after the rerun the version read is %v; want %v", got, next)
			}
			if _, errs, code := publishCLI(t, ctx, "", append([]string{"verify", "--resource", res}, conn...)...); code != 0 {
				t.Fatalf("verify after the rerun: exit %d\n%s", code, errs)
			}
		})
	}
}
