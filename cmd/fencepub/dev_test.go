//go:build !unit

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/cli/config"
	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/objstore/s3store"
)

// TestDevUpDown starts the persistent local stack, checks that the config it
// wrote reaches a working etcd and bucket, and stops it again.
func TestDevUpDown(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dev")
	cfgPath := filepath.Join(t.TempDir(), "fencepub.yaml")
	// A --write-config that cannot be written is refused before anything
	// starts: no servers left running that dev down could not find.
	for _, bad := range []string{t.TempDir(), filepath.Join(t.TempDir(), "missing", "x.yaml")} {
		if _, errs, code := runCLI(t, "dev", "up", "--dir", dir, "--write-config", bad); code != 2 || !strings.Contains(errs, "--write-config") {
			t.Fatalf("dev up --write-config %s: exit %d, %q; want 2 naming the flag", bad, code, errs)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("dev up with a bad --write-config created %s (%v)", dir, err)
		}
	}
	start := time.Now()
	_, errs, code := runCLI(t, "dev", "up", "--dir", dir, "--write-config", cfgPath)
	if code != 0 {
		t.Fatalf("dev up: exit %d: %s", code, errs)
	}
	t.Cleanup(func() { runCLI(t, "dev", "down", "--dir", dir) })
	if d := time.Since(start); d > time.Minute {
		t.Errorf("dev up took %s, want under a minute", d)
	}
	out, errs, code := runCLI(t, "dev", "status", "--dir", dir, "-o", "json")
	if code != 0 {
		t.Fatalf("dev status: exit %d: %s", code, errs)
	}
	var st struct {
		E struct{ Running bool } `json:"etcd"`
		M struct{ Running bool } `json:"minio"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || !st.E.Running || !st.M.Running {
		t.Fatalf("status %s (%v): want both running", out, err)
	}

	v := config.NewViper()
	if _, err := config.ReadFile(v, cfgPath); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(v)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := devstack.NewEtcdClient(cfg.Etcd.Endpoints)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Put(ctx, "dev-probe", "1"); err != nil {
		t.Fatalf("etcd from the written config: %v", err)
	}
	store, err := s3store.New(cfg.S3)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.CheckBucket(ctx); err != nil {
		t.Fatalf("bucket from the written config: %v", err)
	}

	// On a running stack, --write-config writes its config there too; a
	// bad one is refused without touching the stack.
	other := filepath.Join(t.TempDir(), "other.yaml")
	if _, errs, code := runCLI(t, "dev", "up", "--dir", dir, "--write-config", other); code != 0 {
		t.Fatalf("dev up --write-config on a running stack: exit %d: %s", code, errs)
	}
	if a, b := readFile(t, cfgPath), readFile(t, other); a != b {
		t.Fatalf("config written for the running stack differs:\n%s\n%s", a, b)
	}
	if _, errs, code := runCLI(t, "dev", "up", "--dir", dir, "--write-config", filepath.Join(t.TempDir(), "missing", "x.yaml")); code != 2 {
		t.Fatalf("dev up with a bad --write-config on a running stack: exit %d: %s", code, errs)
	}
	out, _, _ = runCLI(t, "dev", "status", "--dir", dir, "-o", "json")
	if err := json.Unmarshal([]byte(out), &st); err != nil || !st.E.Running || !st.M.Running {
		t.Fatalf("after a refused dev up: %s", out)
	}

	if _, errs, code := runCLI(t, "dev", "down", "--dir", dir); code != 0 {
		t.Fatalf("dev down: exit %d: %s", code, errs)
	}
	out, _, _ = runCLI(t, "dev", "status", "--dir", dir, "-o", "json")
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.E.Running || st.M.Running {
		t.Fatalf("after down: %s", out)
	}
}

// TestDevUpTogether starts two stacks at once in two directories: each
// must get its own ports. Both see 9000 free before either binds it, so
// without the port lock the second MinIO cannot bind, passes its readiness
// check against the first one's, and both configs name one bucket.
func TestDevUpTogether(t *testing.T) {
	var dirs, cfgs [2]string
	var errs [2]string
	var codes [2]int
	var wg sync.WaitGroup
	for i := range dirs {
		dirs[i], cfgs[i] = filepath.Join(t.TempDir(), "dev"), filepath.Join(t.TempDir(), "fencepub.yaml")
		t.Cleanup(func() { runCLI(t, "dev", "down", "--dir", dirs[i]) })
		wg.Go(func() { _, errs[i], codes[i] = runCLI(t, "dev", "up", "--dir", dirs[i], "--write-config", cfgs[i]) })
	}
	wg.Wait()
	var s3, etcd [2]string
	for i := range dirs {
		if codes[i] != 0 {
			t.Fatalf("dev up %d: exit %d: %s", i, codes[i], errs[i])
		}
		v := config.NewViper()
		if _, err := config.ReadFile(v, cfgs[i]); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(v)
		if err != nil {
			t.Fatal(err)
		}
		s3[i], etcd[i] = cfg.S3.Endpoint, strings.Join(cfg.Etcd.Endpoints, ",")
	}
	if s3[0] == s3[1] || etcd[0] == etcd[1] {
		t.Fatalf("two dev ups share servers: object store %q and %q, etcd %q and %q", s3[0], s3[1], etcd[0], etcd[1])
	}
}

// running accepts a live process only if its command line names the
// stack's directory, so a PID reused by an unrelated process is never
// signalled by `dev down`.
func TestDevRunningChecksTheCommandLine(t *testing.T) {
	self := os.Getpid()
	if !running(self, filepath.Dir(os.Args[0])) {
		t.Fatalf("this process (pid %d) not recognised by a path in its own command line %q", self, os.Args[0])
	}
	if running(self, filepath.Join(t.TempDir(), "some-other-stack")) {
		t.Fatal("a live process whose command line does not name the stack's directory counted as the stack's")
	}
	if running(0, "/") || running(-1, "/") {
		t.Fatal("a non-positive pid counted as running")
	}
}

// devStatus decodes `dev status -o json` of the stack in dir into v.
func devStatus(t *testing.T, dir string, v any) {
	t.Helper()
	out, _, _ := runCLI(t, "dev", "status", "--dir", dir, "-o", "json")
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("status %s: %v", out, err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDevUpCluster starts the local stack as a 3-member etcd and a 4-node
// distributed MinIO: status lists every process, the written config names
// every etcd member, every MinIO node serves the bucket, and dev down stops
// them all. Topologies out of range are refused before anything starts.
func TestDevUpCluster(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dev")
	cfgPath := filepath.Join(t.TempDir(), "fencepub.yaml")
	for _, bad := range [][]string{{"--etcd-members", "0"}, {"--etcd-members", "9"}, {"--minio-nodes", "0"}, {"--minio-nodes", "20"}} {
		if _, errs, code := runCLI(t, append([]string{"dev", "up", "--dir", dir, "--write-config", cfgPath}, bad...)...); code != 2 || !strings.Contains(errs, bad[0]) {
			t.Fatalf("dev up %v: exit %d, %q; want 2 naming the flag", bad, code, errs)
		}
	}
	if _, errs, code := runCLI(t, "dev", "up", "--dir", dir, "--write-config", cfgPath, "--etcd-members", "3", "--minio-nodes", "4"); code != 0 {
		t.Fatalf("dev up: exit %d: %s", code, errs)
	}
	t.Cleanup(func() { runCLI(t, "dev", "down", "--dir", dir) })
	type group struct {
		Running   bool
		Processes []struct {
			Endpoint string
			Running  bool
		}
	}
	var st struct {
		E group `json:"etcd"`
		M group `json:"minio"`
	}
	status := func() { t.Helper(); devStatus(t, dir, &st) }
	status()
	if !st.E.Running || !st.M.Running || len(st.E.Processes) != 3 || len(st.M.Processes) != 4 {
		t.Fatalf("status: %+v; want 3 etcd members and 4 minio nodes running", st)
	}

	v := config.NewViper()
	if _, err := config.ReadFile(v, cfgPath); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(v)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Etcd.Endpoints) != 3 {
		t.Fatalf("written config names %d etcd endpoints, want 3: %v", len(cfg.Etcd.Endpoints), cfg.Etcd.Endpoints)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, ep := range cfg.Etcd.Endpoints {
		c, err := devstack.NewEtcdClient([]string{ep})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Put(ctx, "dev-probe", ep)
		c.Close()
		if err != nil {
			t.Fatalf("etcd member %s: %v", ep, err)
		}
	}
	for _, p := range st.M.Processes {
		s3 := cfg.S3
		s3.Endpoint = p.Endpoint
		store, err := s3store.New(s3)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.CheckBucket(ctx); err != nil {
			t.Fatalf("bucket through minio node %s: %v", p.Endpoint, err)
		}
	}

	if _, errs, code := runCLI(t, "dev", "down", "--dir", dir); code != 0 {
		t.Fatalf("dev down: exit %d: %s", code, errs)
	}
	status()
	for _, g := range []group{st.E, st.M} {
		for _, p := range g.Processes {
			if p.Running {
				t.Fatalf("after down: %+v", st)
			}
		}
	}
}

// TestDevUpSeaweedFS starts the local stack with SeaweedFS as its object
// store: status reports it under "seaweedfs", a publish and a read through
// the written config (the same shape as MinIO's) work, and dev down stops
// every process. --minio-nodes above 1 with it is refused before anything
// starts.
func TestDevUpSeaweedFS(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dev")
	cfgPath := filepath.Join(t.TempDir(), "fencepub.yaml")
	if _, errs, code := runCLI(t, "dev", "up", "--dir", dir, "--write-config", cfgPath, "--store", "seaweedfs", "--minio-nodes", "4"); code != 2 || !strings.Contains(errs, "--minio-nodes") {
		t.Fatalf("dev up --store seaweedfs --minio-nodes 4: exit %d, %q; want 2 naming the flag", code, errs)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("a refused dev up created %s (%v)", dir, err)
	}
	if _, errs, code := runCLI(t, "dev", "up", "--dir", dir, "--write-config", cfgPath, "--store", "seaweedfs"); code != 0 {
		t.Fatalf("dev up --store seaweedfs: exit %d: %s", code, errs)
	}
	t.Cleanup(func() { runCLI(t, "dev", "down", "--dir", dir) })
	var st struct {
		Store string
		E     struct{ Running bool } `json:"etcd"`
		W     struct {
			Running   bool
			Processes []struct{ Running bool }
		} `json:"seaweedfs"`
	}
	status := func() { t.Helper(); devStatus(t, dir, &st) }
	status()
	if st.Store != "seaweedfs" || !st.E.Running || !st.W.Running || len(st.W.Processes) != 1 {
		t.Fatalf("status: %+v; want etcd and one seaweedfs process running", st)
	}

	body := filepath.Join(t.TempDir(), "body")
	if err := os.WriteFile(body, []byte("on seaweedfs"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errs, code := runCLI(t, "publish", "--config", cfgPath, "--resource", "demo", "--owner", "me", "--ttl", "10s", "--key", "k1", "--file", body); code != 0 {
		t.Fatalf("publish through the written config: exit %d: %s", code, errs)
	}
	if out, errs, code := runCLI(t, "read", "--config", cfgPath, "--resource", "demo"); code != 0 || out != "on seaweedfs" {
		t.Fatalf("read through the written config: exit %d, %q: %s", code, out, errs)
	}

	if _, errs, code := runCLI(t, "dev", "down", "--dir", dir); code != 0 {
		t.Fatalf("dev down: exit %d: %s", code, errs)
	}
	status()
	if st.W.Running || st.E.Running || len(st.W.Processes) != 1 || st.W.Processes[0].Running {
		t.Fatalf("after down: %+v", st)
	}
}
