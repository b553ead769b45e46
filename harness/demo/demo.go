// Package demo is fencepub's main job end to end on real servers — what
// `make demo` runs and the end-to-end test drives. It starts etcd and MinIO
// on loopback in a temporary directory, the reader service following the
// resource by watch, and three batch-publisher processes competing for its
// lease; pauses the holder with SIGSTOP past its TTL so another replica takes
// over with a larger fence; resumes it and shows that its late publish is
// stale and leaves only an orphan; checks that the reader service served each
// version in order with bytes matching the digests; runs one GC pass that
// removes the orphan; publishes a directory as one dataset version with
// the fencepub CLI, then again with one file added (the others reused), and
// reads one file back by its path; and prints a closing table. Every claim
// it prints is a check it made.
package demo

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/gc"
	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/operator"
	"github.com/fencepub/fencepub/reader"
)

// Resource is the resource the demo publishes.
const Resource = "goroot-src"

// Options configures a run. BinDir is required.
type Options struct {
	// BinDir holds etcd, minio, fencepub, batch-publisher and
	// reader-service (`make demo` builds them into ./bin).
	BinDir string
	// Src is the directory the batch jobs snapshot; default
	// $(go env GOROOT)/src.
	Src string
	// TTL is the workers' lease TTL; default 3 s.
	TTL time.Duration
	// Dir holds the servers' data and logs; default a fresh temp dir,
	// removed after a successful run.
	Dir string
	// Out receives the narration; default os.Stdout.
	Out io.Writer
}

// Check is one verified claim.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// Summary is what a run established.
type Summary struct {
	Published        []string      `json:"published"`         // versions applied, in order
	StaleRejected    int           `json:"stale_rejected"`    // late publishes refused by the fence
	OrphansCollected int64         `json:"orphans_collected"` // objects GC deleted
	ReaderVersions   []string      `json:"reader_versions"`   // versions the reader service served, in order
	ReaderChecks     int           `json:"reader_checks"`     // objects fetched and verified through HTTP
	Checks           []Check       `json:"checks"`
	Wall             time.Duration `json:"wall_ns"`
}

// OK reports whether every check held.
func (s Summary) OK() bool {
	for _, c := range s.Checks {
		if !c.OK {
			return false
		}
	}
	return len(s.Checks) > 0
}

// ErrCheckFailed is returned when the run completed but a check did not hold.
var ErrCheckFailed = errors.New("demo: a check failed")

type run struct {
	o    Options
	out  io.Writer
	dir  string
	cfg  string // config file path
	sum  Summary
	mu   sync.Mutex
	evs  chan event
	proc []*proc
	// failed receives each child that exits with a failure before the
	// demo stops it (buffered for every child, so no exit ever blocks).
	failed chan *proc
}

func (r *run) say(format string, args ...any) { fmt.Fprintf(r.out, format+"\n", args...) }

func (r *run) check(name string, ok bool, format string, args ...any) bool {
	c := Check{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)}
	r.sum.Checks = append(r.sum.Checks, c)
	mark := "ok  "
	if !ok {
		mark = "FAIL"
	}
	r.say("   [%s] %s: %s", mark, name, c.Detail)
	return ok
}

// Run performs the whole demo. It blocks until done or ctx is cancelled
// (Ctrl-C), and always stops every process it started. It returns the
// summary, and ErrCheckFailed when a check failed or another error when the
// demo could not run.
func Run(ctx context.Context, o Options) (Summary, error) {
	start := time.Now()
	if o.Src == "" {
		out, err := exec.CommandContext(ctx, "go", "env", "GOROOT").Output()
		if err != nil {
			return Summary{}, fmt.Errorf("demo: no --src and `go env GOROOT` failed: %w", err)
		}
		o.Src = filepath.Join(strings.TrimSpace(string(out)), "src")
	}
	if o.TTL == 0 {
		o.TTL = 3 * time.Second
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	r := &run{o: o, out: o.Out, evs: make(chan event, 64), failed: make(chan *proc, 4)}
	r.dir = o.Dir
	if r.dir == "" {
		d, err := os.MkdirTemp("", "fencepub-demo-")
		if err != nil {
			return r.sum, err
		}
		r.dir = d
	}
	err := r.main(ctx)
	var wg sync.WaitGroup
	for _, p := range r.proc {
		wg.Go(func() { p.stop(3 * time.Second) })
	}
	wg.Wait()
	r.sum.Wall = time.Since(start)
	if ctx.Err() != nil {
		r.say("\n== interrupted: stopped every process the demo started")
		if o.Dir == "" {
			_ = os.RemoveAll(r.dir)
		}
		return r.sum, fmt.Errorf("demo: interrupted: %w", ctx.Err())
	}
	r.table()
	switch {
	case err == nil && !r.sum.OK():
		err = ErrCheckFailed
	case err != nil:
		err = fmt.Errorf("demo: %w", err)
	}
	if err == nil && o.Dir == "" {
		_ = os.RemoveAll(r.dir)
	} else if err != nil {
		r.say("logs and data kept in %s", r.dir)
	}
	return r.sum, err
}

func (r *run) main(ctx context.Context) error {
	// The servers come from BinDir for this run only (devstack reads
	// FENCEPUB_BIN_DIR); children never see it (childEnv).
	prev, had := os.LookupEnv("FENCEPUB_BIN_DIR")
	if err := os.Setenv("FENCEPUB_BIN_DIR", r.o.BinDir); err != nil {
		return err
	}
	defer func() {
		if had {
			_ = os.Setenv("FENCEPUB_BIN_DIR", prev)
		} else {
			_ = os.Unsetenv("FENCEPUB_BIN_DIR")
		}
	}()
	for _, b := range []string{"fencepub", "batch-publisher", "reader-service"} {
		if _, err := devstack.Binary(b); err != nil {
			return fmt.Errorf("%w (make demo builds it)", err)
		}
	}
	r.say("== 0. starting real etcd and MinIO on loopback in %s", r.dir)
	e, err := devstack.StartEtcd(ctx, filepath.Join(r.dir, "etcd"), devstack.EtcdOptions{})
	if err != nil {
		return err
	}
	defer e.Stop()
	m, err := devstack.StartMinIO(ctx, filepath.Join(r.dir, "minio"), devstack.MinIOOptions{})
	if err != nil {
		return err
	}
	defer m.Stop()
	r.say("   etcd %s, MinIO %s (bucket %q)", e.Members[0].ClientURL, m.Config.Endpoint, m.Config.Bucket)
	r.cfg = filepath.Join(r.dir, "fencepub.yaml")
	ns, err := layout.NewNamespace("fencepub", "demo")
	if err != nil {
		return err
	}
	if err := os.WriteFile(r.cfg, []byte(fmt.Sprintf(
		"etcd:\n  endpoints: [%q]\ns3:\n  endpoint: %q\n  access_key: %q\n  secret_key: %q\n  bucket: %q\nnamespace:\n  prefix: %s\n  domain: %s\n",
		e.Members[0].ClientURL, m.Config.Endpoint, m.Config.AccessKey, m.Config.SecretKey, m.Config.Bucket, ns.Prefix, ns.Domain)), 0o600); err != nil {
		return err
	}
	cli, err := e.Client()
	if err != nil {
		return err
	}
	defer cli.Close()
	store, err := m.Store()
	if err != nil {
		return err
	}

	// The reader service, and a client of it that fetches every version it
	// announces and verifies the bytes against the announced digest.
	port, err := devstack.FreePort()
	if err != nil {
		return err
	}
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	rs, err := startProc("reader-service", r.dir, filepath.Join(r.o.BinDir, "reader-service"),
		[]string{"--config", r.cfg, "--resource", Resource, "--listen", "127.0.0.1:" + strconv.Itoa(port), "--cache-bytes", "0"}, nil, r.failed)
	if err != nil {
		return err
	}
	r.proc = append(r.proc, rs)
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	var watchWG sync.WaitGroup
	watchWG.Add(1)
	go func() { defer watchWG.Done(); r.followService(watchCtx, base) }()

	r.say("== 1. three batch-publisher replicas compete for the lease on %q (TTL %s)", Resource, r.o.TTL)
	r.say("      each snapshots %s (deterministic tar.gz + manifest) and publishes it", r.o.Src)
	for _, w := range []string{"w1", "w2", "w3"} {
		p, err := startProc(w, r.dir, filepath.Join(r.o.BinDir, "batch-publisher"), []string{
			"--config", r.cfg, "--resource", Resource, "--owner", w, "--ttl", r.o.TTL.String(), "--max-wait", "2m",
			"--src", r.o.Src, "--key", "demo-run-" + w, "--hold", "1500ms", "--unsafe-ignore-lease-loss",
		}, func(line string) {
			if ev, ok := parseEvent(w, line); ok {
				r.evs <- ev
			}
		}, r.failed)
		if err != nil {
			return err
		}
		r.proc = append(r.proc, p)
	}
	procOf := func(w string) *proc {
		for _, p := range r.proc {
			if p.name == w {
				return p
			}
		}
		return nil
	}

	first, err := r.await(ctx, func(e event) bool { return e.Name == "granted" })
	if err != nil {
		return err
	}
	r.say("   %s holds the lease with fence %d", first.Worker, first.Fence)
	pub1, err := r.await(ctx, func(e event) bool { return e.Name == "published" && e.Worker == first.Worker })
	if err != nil {
		return err
	}
	if r.check("first publish applied", pub1.Outcome == "applied", "%s published %s: %s", pub1.Worker, pub1.Version, pub1.Outcome) {
		r.sum.Published = append(r.sum.Published, pub1.Version.String())
	}

	r.say("== 2. the next holder is paused with SIGSTOP past its TTL; another replica takes over")
	second, err := r.await(ctx, func(e event) bool { return e.Name == "granted" && e.Worker != first.Worker })
	if err != nil {
		return err
	}
	r.check("fence grows", second.Fence > first.Fence, "%s got fence %d > %d", second.Worker, second.Fence, first.Fence)
	if _, err := r.await(ctx, func(e event) bool { return e.Name == "holding" && e.Worker == second.Worker }); err != nil {
		return err
	}
	paused := procOf(second.Worker)
	if err := paused.p.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	pausedAt := time.Now()
	r.say("   %s (fence %d) computed its result and is now STOPPED before publishing", second.Worker, second.Fence)
	third, err := r.await(ctx, func(e event) bool { return e.Name == "granted" })
	if err != nil {
		return err
	}
	r.check("takeover while the holder is stopped", stopped(paused) && third.Fence > second.Fence,
		"%s got fence %d %.1fs after SIGSTOP: %s never released; etcd expired its lease", third.Worker, third.Fence, time.Since(pausedAt).Seconds(), second.Worker)
	pub3, err := r.await(ctx, func(e event) bool { return e.Name == "published" && e.Worker == third.Worker })
	if err != nil {
		return err
	}
	if r.check("takeover publish applied", pub3.Outcome == "applied", "%s published %s: %s", pub3.Worker, pub3.Version, pub3.Outcome) {
		r.sum.Published = append(r.sum.Published, pub3.Version.String())
	}

	r.say("== 3. the paused holder is resumed (SIGCONT) and publishes anyway, as a worker paused")
	r.say("      between its last lease check and its send would")
	if err := paused.p.Signal(syscall.SIGCONT); err != nil {
		return err
	}
	late, err := r.await(ctx, func(e event) bool { return e.Name == "published" && e.Worker == second.Worker })
	if err != nil {
		return err
	}
	if r.check("late publish stale", late.Outcome == "stale", "%s's %s: %s (reason %s)", late.Worker, late.Version, late.Outcome, late.Reason) {
		r.sum.StaleRejected++
	}
	rd, err := reader.New(reader.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(ns), Etcd: cli, Store: store}}, Resource)
	if err != nil {
		return err
	}
	ptr, err := rd.Current(ctx)
	if err != nil {
		return err
	}
	r.check("pointer unchanged", ptr.Version.String() == pub3.Version.String(), "pointer is %s (%s's)", ptr.Version, third.Worker)
	orphan, _ := late.Object["key"].(string)
	_, statErr := store.Stat(ctx, orphan)
	r.check("orphan left behind", orphan != "" && statErr == nil, "%s's object %s exists, unreferenced", late.Worker, filepath.Base(orphan))

	r.say("== 4. the reader service followed the pointer by watch")
	time.Sleep(300 * time.Millisecond) // let the follower fetch the last version it was told about
	stopWatch()
	watchWG.Wait()
	r.mu.Lock()
	seen := append([]string(nil), r.sum.ReaderVersions...)
	r.mu.Unlock()
	r.check("reader saw each version in order", slices.Equal(seen, r.sum.Published), "served %v; published %v", seen, r.sum.Published)
	r.check("reader never served the stale version", !slices.Contains(seen, late.Version.String()), "never %s", late.Version)
	r.check("reader bytes matched digests", r.sum.ReaderChecks >= len(seen) && len(seen) > 0, "%d objects fetched over HTTP, sha256 verified", r.sum.ReaderChecks)

	r.say("== 5. one GC pass")
	auth, err := authority.New(authority.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(ns), Etcd: cli, Store: store}})
	if err != nil {
		return err
	}
	col, err := gc.New(gc.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(ns), Etcd: cli, Store: store}, Authority: auth})
	if err != nil {
		return err
	}
	rep, err := operator.RunGC(ctx, col, gc.RunOptions{Resources: []string{Resource}}, true)
	if err != nil {
		return err
	}
	for _, d := range rep.Decisions {
		r.say("   %-13s %s  (%s)", d.Kind, filepath.Base(d.Key), d.Reason)
	}
	r.sum.OrphansCollected = rep.Deleted
	_, statErr = store.Stat(ctx, orphan)
	r.check("orphan collected", rep.Deleted == 1 && errors.Is(statErr, objstore.ErrNotFound), "deleted %d object(s); the stale one is gone", rep.Deleted)
	r.check("published and retained kept", rep.Kept.Published == 1 && rep.Kept.Retained == 1,
		"kept published %d, retained %d (the superseded version stays for the reader grace period)", rep.Kept.Published, rep.Kept.Retained)
	body, err := rd.Open(ctx)
	if err == nil {
		_, err = io.Copy(io.Discard, body)
		body.Close()
	}
	r.check("published object intact", err == nil, "current object read and verified after GC (%v)", errString(err))
	return r.dataset(ctx)
}

// DatasetResource is the resource the demo publishes a directory to.
const DatasetResource = "nightly-export"

// dataset is step 6: a directory published as one dataset version with
// the fencepub CLI, then again with one file added (the others reused, not
// uploaded), then one file read back by its path.
func (r *run) dataset(ctx context.Context) error {
	r.say("== 6. a directory as one dataset version (fencepub publish --dir, then read --path)")
	dir := filepath.Join(r.dir, "export")
	files := map[string]string{"part/00000.csv": "a,b\n1,2\n", "part/00001.csv": "a,b\n3,4\n", "schema.json": `{"a":"int","b":"int"}` + "\n"}
	write := func(files map[string]string) error {
		for p, c := range files {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644); err != nil {
				return err
			}
		}
		return nil
	}
	type published struct {
		Outcome       string `json:"outcome"`
		Files         int64  `json:"files"`
		UploadedFiles int64  `json:"uploaded_files"`
		ReusedFiles   int64  `json:"reused_files"`
	}
	publish := func(key string) (published, error) {
		var p published
		out, err := r.fencepub(ctx, "publish", "--resource", DatasetResource, "--owner", "demo", "--ttl", "10s", "--dir", dir, "--key", key, "-o", "json")
		if err == nil {
			err = json.Unmarshal(out, &p)
		}
		return p, err
	}
	if err := write(files); err != nil {
		return err
	}
	p1, err := publish("export-1")
	if err != nil {
		return err
	}
	r.check("dataset published", p1.Outcome == "applied" && p1.Files == 3 && p1.UploadedFiles == 3,
		"%s: %d files, %d uploaded", p1.Outcome, p1.Files, p1.UploadedFiles)
	files["part/00002.csv"] = "a,b\n5,6\n"
	if err := write(files); err != nil {
		return err
	}
	p2, err := publish("export-2")
	if err != nil {
		return err
	}
	r.check("dataset republished incrementally", p2.Outcome == "applied" && p2.Files == 4 && p2.UploadedFiles == 1 && p2.ReusedFiles == 3,
		"%s: %d files, %d uploaded, %d reused from the previous version", p2.Outcome, p2.Files, p2.UploadedFiles, p2.ReusedFiles)
	got, err := r.fencepub(ctx, "read", "--resource", DatasetResource, "--path", "part/00001.csv")
	r.check("dataset file read by path", err == nil && string(got) == files["part/00001.csv"],
		"read --path part/00001.csv: %q, verified against its manifest entry (%v)", got, errString(err))
	return nil
}

// fencepub runs the fencepub CLI with the demo's config and args, and
// returns its stdout; a failure carries its stderr.
func (r *run) fencepub(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(r.o.BinDir, "fencepub"), append([]string{"--config", r.cfg}, args...)...)
	cmd.Env, cmd.Dir = childEnv(), r.dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("fencepub %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}

// await returns the next worker event matching want, keeping the others
// for later awaits. A child that fails ends the wait at once with its exit
// status and stderr, unless the event was already sent (a child's events
// are all queued before its exit is reported).
func (r *run) await(ctx context.Context, want func(event) bool) (event, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var skipped []event
	defer func() {
		for _, e := range skipped {
			r.evs <- e
		}
	}()
	take := func(e event) bool {
		if e.Name == "lease_lost" { // narrated once, never awaited
			r.say("   %s noticed its lease is gone (%s) but publishes anyway", e.Worker, e.Err)
			return false
		}
		if want(e) {
			return true
		}
		skipped = append(skipped, e)
		return false
	}
	for {
		select {
		case e := <-r.evs:
			if take(e) {
				return e, nil
			}
		case p := <-r.failed:
			for len(r.evs) > 0 {
				if e := <-r.evs; take(e) {
					r.failed <- p // still failed: the next await reports it
					return e, nil
				}
			}
			return event{}, p.failure()
		case <-ctx.Done():
			return event{}, fmt.Errorf("demo: waiting for a worker event: %w", ctx.Err())
		}
	}
}

// followService polls the reader service's pointer and fetches every new
// version over HTTP, checking the bytes against the served digest and the
// ETag against the version.
func (r *run) followService(ctx context.Context, base string) {
	last := ""
	for ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
		resp, err := http.Get(base + "/v1/resources/" + Resource)
		if err != nil {
			continue
		}
		ver := resp.Header.Get("X-Fencepub-Version")
		if resp.StatusCode != http.StatusOK || ver == last {
			resp.Body.Close()
			continue
		}
		h := sha256.New()
		_, err = io.Copy(h, resp.Body)
		resp.Body.Close()
		ok := err == nil && hex.EncodeToString(h.Sum(nil)) == resp.Header.Get("X-Fencepub-Sha256") && resp.Header.Get("ETag") == `"`+ver+`"`
		r.mu.Lock()
		if ok {
			r.sum.ReaderVersions = append(r.sum.ReaderVersions, ver)
			r.sum.ReaderChecks++
			last = ver
		} else {
			r.sum.Checks = append(r.sum.Checks, Check{Name: "reader bytes", OK: false, Detail: "version " + ver + " did not verify"})
		}
		r.mu.Unlock()
	}
}

func (r *run) table() {
	s := r.sum
	r.say("\n== 7. summary")
	r.say("   %-34s %v", "versions published", s.Published)
	r.say("   %-34s %d", "stale attempts rejected", s.StaleRejected)
	r.say("   %-34s %d", "orphans collected", s.OrphansCollected)
	r.say("   %-34s %v (%d verified fetches)", "reader service served", s.ReaderVersions, s.ReaderChecks)
	passed := 0
	for _, c := range s.Checks {
		if c.OK {
			passed++
		}
	}
	r.say("   %-34s %d/%d", "checks passed", passed, len(s.Checks))
	r.say("   %-34s %.1fs", "wall time", s.Wall.Seconds())
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}
