package suite

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/gc"
	"github.com/fencepub/fencepub/harness/bench"
	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/operator"
	"github.com/fencepub/fencepub/publisher"
	"github.com/fencepub/fencepub/reader"
)

// datasetParallel is the upload concurrency of every side of the dataset
// rows: publish --dir's default.
const datasetParallel = publisher.DefaultParallel

// datasetWorkload is workload 11: dataset versions (publish throughput vs
// the floor and rclone, incremental publish, reading one file, GC of a
// superseded version, and the memory of the publisher, reader and GC
// processes at two file counts).
func (s *runner) datasetWorkload(ctx context.Context) error {
	st, err := s.newStack(ctx, s.env.Target, WorkloadDataset)
	if err != nil {
		return err
	}
	defer s.cleanup(ctx, st.Target)
	dir, err := os.MkdirTemp("", "fencepub-bench-dataset-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	small := s.n(10_000, 200)
	bigSize := 64 << 20
	if s.opts.Quick {
		bigSize = 1 << 20
	}
	for _, shape := range []struct{ files, size int }{{small, 16 << 10}, {s.n(16, 4), bigSize}} {
		if err := s.datasetThroughput(ctx, st, filepath.Join(dir, "tp"), shape.files, shape.size); err != nil {
			return err
		}
	}
	if err := s.datasetIncremental(ctx, st, filepath.Join(dir, "inc"), small); err != nil {
		return err
	}
	if err := s.datasetGC(ctx, st, small); err != nil {
		return err
	}
	return s.datasetScale(ctx, st, filepath.Join(dir, "scale"))
}

// datasetPath is the path of the i-th generated file: 1000 files a
// directory, so the order of a directory walk is the index order.
func datasetPath(i int) string { return fmt.Sprintf("d%04d/f%07d.bin", i/1000, i) }

// writeDataset writes n files of size bytes under dir (made fresh):
// body(size) with the file's index and gen in its first 16 bytes, so every
// file and every generation differs.
func writeDataset(dir string, n, size int, gen uint64) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	b := body(max(size, 16))[:size]
	for i := range n {
		if err := writeDatasetFile(dir, i, b, gen); err != nil {
			return err
		}
	}
	return nil
}

// writeDatasetFile writes file i of a generated dataset (writeDataset) with
// content b stamped with i and gen.
func writeDatasetFile(dir string, i int, b []byte, gen uint64) error {
	p := filepath.Join(dir, filepath.FromSlash(datasetPath(i)))
	if i%1000 == 0 {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
	}
	c := slices.Clone(b)
	var stamp [16]byte
	binary.LittleEndian.PutUint64(stamp[:8], uint64(i))
	binary.LittleEndian.PutUint64(stamp[8:], gen)
	copy(c, stamp[:])
	return os.WriteFile(p, c, 0o644)
}

// publishDir publishes dir as one dataset version of res with base, and
// returns the result; an outcome other than applied is an error.
func publishDir(ctx context.Context, p *publisher.Publisher, dir, key string, base publisher.Base) (publisher.DatasetResult, error) {
	r, err := p.PublishDataset(ctx, publisher.Dataset{IdempotencyKey: key, Files: publisher.DirFiles(dir, publisher.DirOptions{}),
		Base: base, Parallel: datasetParallel})
	if err == nil && r.Outcome != publisher.Applied {
		err = fmt.Errorf("dataset publish %s: outcome %s", key, r.Outcome)
	}
	return r, err
}

// floorDataset is the floor of a dataset publish: every file under dir
// (listed beforehand) read from disk and sent with sha256 teed into ONE
// create-only PUT under prefix, datasetParallel at a time, then ONE bare
// etcd compare-and-put (bench.Target.FloorCommit) on res.
func floorDataset(ctx context.Context, st *stack, dir string, paths []string, prefix, res string, seq uint64) error {
	var next atomic.Int64
	errs := make([]error, datasetParallel)
	var wg sync.WaitGroup
	for w := range datasetParallel {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(paths) && errs[w] == nil; i = int(next.Add(1) - 1) {
				errs[w] = floorFile(ctx, st, filepath.Join(dir, filepath.FromSlash(paths[i])), prefix+paths[i])
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return st.FloorCommit(ctx, res, seq, "manifest")
}

// floorFile sends one file as a create-only PUT at key, hashing it.
func floorFile(ctx context.Context, st *stack, path, key string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	h := sha256.New()
	_, err = st.Store.PutCreateOnly(ctx, key, io.TeeReader(f, h), fi.Size(), objstore.PutOptions{ContentType: "application/octet-stream"})
	return err
}

// rclone copies dir to prefix of the bucket with `rclone copy` at
// datasetParallel transfers, configured through environment variables
// only (a remote named "bench" of type s3).
func (s *runner) rclone(ctx context.Context, bin, dir, prefix string) error {
	c := s.env.Config.S3
	scheme := "http://"
	if c.Secure {
		scheme = "https://"
	}
	cmd := exec.CommandContext(ctx, bin, "copy", dir, "bench:"+c.Bucket+"/"+prefix,
		"--transfers", strconv.Itoa(datasetParallel), "--checkers", strconv.Itoa(datasetParallel), "--s3-no-check-bucket")
	// The remote is configured whole here; AWS_* variables of this
	// process's environment (a CA bundle for another endpoint) would
	// apply to it too.
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "AWS_") })
	cmd.Env = append(env, "RCLONE_CONFIG=/dev/null",
		"RCLONE_CONFIG_BENCH_TYPE=s3", "RCLONE_CONFIG_BENCH_PROVIDER=Minio",
		"RCLONE_CONFIG_BENCH_ENDPOINT="+scheme+c.Endpoint, "RCLONE_CONFIG_BENCH_REGION="+c.Region,
		"RCLONE_CONFIG_BENCH_ACCESS_KEY_ID="+c.AccessKey, "RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY="+c.SecretKey)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("rclone copy: %w: %s", err, out)
	}
	return nil
}

// timed runs f and returns how long it took.
func timed(f func() error) (time.Duration, error) {
	t0 := time.Now()
	err := f()
	return time.Since(t0), err
}

// sideStats summarises one side of a dataset row: every round one
// operation of took[i], and throughput as units (files or bytes) per
// second of their sum.
func sideStats(took []time.Duration, units float64) bench.Stats {
	var rec bench.Recorder
	var wall time.Duration
	for _, d := range took {
		rec.Add(d, nil)
		wall += d
	}
	st := rec.Stats(wall)
	st.Throughput = units * float64(len(took)) / wall.Seconds()
	return st
}

// datasetThroughput adds the publish throughput rows of n files of size
// bytes: `publisher.PublishDataset` of a directory vs the floor and vs
// rclone copy, interleaved in rounds, each side's objects deleted between
// rounds (untimed).
func (s *runner) datasetThroughput(ctx context.Context, st *stack, dir string, n, size int) error {
	config := fmt.Sprintf("%d files of %s, %d at once", n, sizeName(size), datasetParallel)
	rcloneBin, lookErr := exec.LookPath("rclone")
	if err := writeDataset(dir, n, size, 0); err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	paths := make([]string, n)
	for i := range paths {
		paths[i] = datasetPath(i)
	}
	res := fmt.Sprintf("tp-%d-%d", n, size)
	p, g, err := st.bind(ctx, res)
	if err != nil {
		return err
	}
	defer st.releaseAll(ctx, []authority.Grant{g})
	if err := st.InitFloor(ctx, res); err != nil {
		return err
	}
	var took [3][]time.Duration
	rounds := min(s.slowRounds(), 2)
	var roundErr error
	sides := []func(r int) error{
		func(r int) error {
			d, err := timed(func() error { _, err := publishDir(ctx, p, dir, "r"+strconv.Itoa(r), publisher.BaseNone); return err })
			took[0] = append(took[0], d)
			return errors.Join(err, removePrefix(ctx, st.Target, st.NS.ObjectsPrefix(res), deleteParallel))
		},
		func(r int) error {
			prefix := st.NS.Root() + "floor/" + res + "/" + strconv.Itoa(r) + "/"
			d, err := timed(func() error { return floorDataset(ctx, st, dir, paths, prefix, res, uint64(r+1)) })
			took[1] = append(took[1], d)
			return errors.Join(err, removePrefix(ctx, st.Target, prefix, deleteParallel))
		},
		func(r int) error {
			if lookErr != nil {
				return nil
			}
			prefix := st.NS.Root() + "rclone/" + res + "/" + strconv.Itoa(r) + "/"
			d, err := timed(func() error { return s.rclone(ctx, rcloneBin, dir, prefix) })
			took[2] = append(took[2], d)
			return errors.Join(err, removePrefix(ctx, st.Target, prefix, deleteParallel))
		},
	}
	for r := range rounds {
		for k := range sides {
			if roundErr = sides[(r+k)%len(sides)](r); roundErr != nil {
				return roundErr
			}
		}
	}
	units, unit := float64(n), "files/s"
	if size >= 1<<20 {
		units, unit = float64(n)*float64(size)/(1<<20), "MiB/s"
	}
	sub, floor := sideStats(took[0], units), sideStats(took[1], units)
	row := bench.NewRow(WorkloadDataset, "publish, "+config, size, datasetParallel, sub,
		"floor: the same files as create-only PUTs with sha256 at the same concurrency + ONE bare etcd compare-and-put", floor)
	row.Unit = unit
	s.add(row.WithTarget("throughput >= 0.9x", func(x bench.Row) bool { return x.RatioThroughput >= 0.9 }).
		WithNote(fmt.Sprintf("%d rounds; one publish (walk, upload, manifest, transaction) per round and side", rounds)))
	if lookErr != nil {
		s.add(bench.SkippedRow(WorkloadDataset, "publish vs rclone, "+config, "rclone copy", "throughput >= 1.0x",
			"rclone not installed (Debian package rclone; `make bench` installs it)"))
		return nil
	}
	row = bench.NewRow(WorkloadDataset, "publish vs rclone, "+config, size, datasetParallel, sub,
		fmt.Sprintf("rclone copy --transfers %d --checkers %d to an empty prefix", datasetParallel, datasetParallel), sideStats(took[2], units))
	row.Unit = unit
	s.add(row.WithTarget("throughput >= 1.0x", func(x bench.Row) bool { return x.RatioThroughput >= 1.0 }))
	return nil
}

// manifestBytes returns the size of a dataset version's manifest: its
// index object plus its pages.
func manifestBytes(ctx context.Context, st *stack, index layout.Object) (int64, error) {
	n := index.Size
	for o, err := range st.Store.List(ctx, index.Key+layout.PagesSep, objstore.ListOptions{}) {
		if err != nil {
			return 0, err
		}
		n += o.Size
	}
	return n, nil
}

// datasetIncremental adds the incremental rows: n files of 16 KiB
// published whole (base none), then 1% of them changed and published with
// the base current, in rounds; then the read rows on the result.
func (s *runner) datasetIncremental(ctx context.Context, st *stack, dir string, n int) error {
	const size = 16 << 10
	if err := writeDataset(dir, n, size, 0); err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	res := "inc"
	p, g, err := st.bind(ctx, res)
	if err != nil {
		return err
	}
	defer st.releaseAll(ctx, []authority.Grant{g})
	b := body(size)
	changed := max(n/100, 1)
	var full, inc []time.Duration
	var uploaded, manifest, dataset int64
	var last publisher.DatasetResult
	for r := range min(s.slowRounds(), 2) {
		d, err := timed(func() error {
			_, err := publishDir(ctx, p, dir, fmt.Sprintf("full-%d", r), publisher.BaseNone)
			return err
		})
		if err != nil {
			return err
		}
		full = append(full, d)
		for k := range changed {
			if err := writeDatasetFile(dir, k*(n/changed), b, uint64(r+1)); err != nil {
				return err
			}
		}
		d, err = timed(func() error {
			last, err = publishDir(ctx, p, dir, fmt.Sprintf("inc-%d", r), publisher.BaseCurrent)
			return err
		})
		if err != nil {
			return err
		}
		inc = append(inc, d)
		m, err := manifestBytes(ctx, st, last.Object)
		if err != nil {
			return err
		}
		uploaded, manifest, dataset = last.UploadedBytes, m, last.Bytes
		if last.UploadedFiles != int64(changed) || last.ReusedFiles != int64(n-changed) {
			return fmt.Errorf("incremental publish uploaded %d and reused %d files, want %d and %d", last.UploadedFiles, last.ReusedFiles, changed, n-changed)
		}
	}
	config := fmt.Sprintf("%d of %d files of 16 KiB changed", changed, n)
	row := bench.NewRow(WorkloadDataset, "incremental publish wall time, "+config, size, datasetParallel,
		sideStats(inc, float64(n)), "a full publish of the same directory (base none), same rounds", sideStats(full, float64(n)))
	row.Unit = "files/s"
	s.add(row.WithTarget("p50 <= 0.10x", func(x bench.Row) bool { return x.RatioP50 <= 0.10 }).
		WithNote("the incremental publish reads and hashes every local file once and reads the base manifest; it uploads only the changed files"))
	row = bench.NewRow(WorkloadDataset, "incremental publish bytes sent, "+config, size, 1,
		bench.Stats{Ops: 1, Throughput: float64(uploaded + manifest)}, "the dataset's bytes", bench.Stats{Ops: 1, Throughput: float64(dataset)})
	row.Unit = "bytes"
	limit := 0.011*float64(dataset) + float64(manifest)
	s.add(row.WithTarget("files + manifest <= 1.1% of the dataset + manifest", func(x bench.Row) bool { return x.Subject.Throughput <= limit }).
		WithNote(fmt.Sprintf("files %d bytes, manifest %d bytes (%.1f bytes per entry)", uploaded, manifest, float64(manifest)/float64(n))))
	return s.datasetRead(ctx, st, res, last, datasetPath(0))
}

// datasetRead adds the rows of reading one file (path, changed by the last
// publish, so stored under the version's own key) of res's current
// version with the manifest cached.
func (s *runner) datasetRead(ctx context.Context, st *stack, res string, ver publisher.DatasetResult, path string) error {
	rd, err := reader.New(reader.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(st.NS), Etcd: st.Etcd, Store: st.Store}}, res)
	if err != nil {
		return err
	}
	ptr, err := rd.Current(ctx)
	if err != nil {
		return err
	}
	if ptr.Version != ver.Version {
		return fmt.Errorf("read: pointer at %s, want %s", ptr.Version, ver.Version)
	}
	var sha string
	for fi, err := range rd.Files(ctx, ptr) {
		if err != nil {
			return err
		}
		if fi.Path == path {
			sha = fi.SHA256
			break
		}
	}
	key := layout.FileKey(ptr.Object.Key, path)
	readAll := func(b *reader.Body, err error) error {
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, b)
		return errors.Join(err, b.Close())
	}
	if err := readAll(rd.OpenFile(ctx, path)); err != nil { // caches the manifest
		return err
	}
	ops := s.n(1000, 20)
	verifying := func(ctx context.Context, _, _ int) error { _, err := st.VerifyingGet(ctx, key, sha); return err }
	sub, base := bench.Compare(ctx, s.opts.Rounds, ops, 1, func(ctx context.Context, _, _ int) error {
		return readAll(rd.OpenPointerFile(ctx, ptr, path))
	}, verifying)
	s.add(bench.NewRow(WorkloadDataset, "read one 16 KiB file, manifest cached, watched pointer (OpenPointerFile)", 16<<10, 1, sub,
		"a verifying GET of the same object (sha256 checked)", base).
		WithTarget("p50 <= 1.10x", func(x bench.Row) bool { return x.RatioP50 <= 1.10 }))
	sub, base = bench.Compare(ctx, s.opts.Rounds, ops, 1, func(ctx context.Context, _, _ int) error {
		return readAll(rd.OpenFile(ctx, path))
	}, func(ctx context.Context, w, i int) error {
		if _, err := st.Etcd.Get(ctx, st.NS.PointerKey(res)); err != nil {
			return err
		}
		return verifying(ctx, w, i)
	})
	s.add(bench.NewRow(WorkloadDataset, "read one 16 KiB file, manifest cached, pointer read (OpenFile)", 16<<10, 1, sub,
		"a linearizable etcd read of the pointer, then a verifying GET of the same object", base))
	return nil
}

// datasetGCPolicy keeps only the current version and no grace beyond the
// domain clock's step, so a superseded version is collected by the next
// pass a few seconds later.
var datasetGCPolicy = gc.Policy{Retain: 1, Grace: time.Millisecond, ClockSkew: time.Millisecond}

// datasetGC adds the row of collecting a superseded version of n files
// (its files, pages and index) vs a bare listing and RemoveObjects of as
// many keys, in units alternating which side goes first.
func (s *runner) datasetGC(ctx context.Context, st *stack, n int) error {
	units := min(s.slowRounds(), 2)
	coll, err := gc.New(gc.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(st.NS), Etcd: st.Etcd, Store: st.Store}, Authority: st.auth, Policy: datasetGCPolicy})
	if err != nil {
		return err
	}
	tick, err := s.clockTick(ctx, st, coll)
	if err != nil {
		return err
	}
	res := names("gcds", units)
	want := make([]int64, units)
	for u, r := range res {
		p, g, err := st.bind(ctx, r)
		if err != nil {
			return err
		}
		v1, err := p.PublishDataset(ctx, publisher.Dataset{IdempotencyKey: "v1", Base: publisher.BaseNone, Parallel: datasetParallel,
			Files: generated(n, 16)})
		if err != nil {
			st.releaseAll(ctx, []authority.Grant{g})
			return err
		}
		pages := 0
		for _, lerr := range st.Store.List(ctx, v1.Object.Key+layout.PagesSep, objstore.ListOptions{}) {
			if lerr != nil {
				return lerr
			}
			pages++
		}
		want[u] = int64(n + pages + 1)
		_, err = p.PublishDataset(ctx, publisher.Dataset{IdempotencyKey: "v2", Base: publisher.BaseNone, Files: generated(1, 16)})
		st.releaseAll(ctx, []authority.Grant{g})
		if err != nil {
			return err
		}
		if err := st.fill(ctx, int(want[u]), func(i int) string { return fmt.Sprintf("%sbare-ds-%d/%d", st.NS.Root(), u, i) }); err != nil {
			return err
		}
	}
	if err := tick(); err != nil {
		return err
	}
	var gcTook, bareTook []time.Duration
	for u, r := range res {
		sides := []func() error{
			func() error {
				d, err := timed(func() error {
					rep, err := coll.Run(ctx, gc.RunOptions{Resources: []string{r}})
					if err == nil && rep.Deleted != want[u] {
						err = fmt.Errorf("gc pass over %s deleted %d objects, want %d", r, rep.Deleted, want[u])
					}
					return err
				})
				gcTook = append(gcTook, d)
				return err
			},
			func() error {
				d, err := timed(func() error {
					return removePrefix(ctx, st.Target, fmt.Sprintf("%sbare-ds-%d/", st.NS.Root(), u), deleteParallel)
				})
				bareTook = append(bareTook, d)
				return err
			},
		}
		if u%2 == 1 {
			slices.Reverse(sides)
		}
		for _, side := range sides {
			if err := side(); err != nil {
				return err
			}
		}
	}
	row := bench.NewRow(WorkloadDataset, fmt.Sprintf("GC of a superseded version of %d files (+ its manifest), real pass", n), 0, 1,
		sideStats(gcTook, float64(want[0])), fmt.Sprintf("bare ListObjects → RemoveObjects ×%d of as many keys", deleteParallel), sideStats(bareTook, float64(want[0])))
	row.Unit = "objects/s"
	s.add(row.WithTarget("throughput >= 0.8x", func(x bench.Row) bool { return x.RatioThroughput >= 0.8 }).
		WithNote(fmt.Sprintf("%d units a side, alternating; the pass reads the pointer's manifest, lists, classifies and deletes", units)))
	return nil
}

// clockTick returns a function that advances the domain clock until
// datasetGCPolicy's grace cutoff lies above every write made before it
// was called: real GC passes over a resource of its own (the clock is the
// domain's), 500 ms apart, for at most a minute. GC measures a version's
// supersession on that clock (DESIGN.md "Ages come from one clock"), so a
// version superseded before the call is then collectable by a pass with
// that policy.
func (s *runner) clockTick(ctx context.Context, st *stack, coll *gc.Collector) (func() error, error) {
	const res = "clock"
	p, g, err := st.bind(ctx, res)
	if err != nil {
		return nil, err
	}
	_, err = p.Publish(ctx, publisher.Operation{IdempotencyKey: "tick", Body: bytes.NewReader(body(16))})
	st.releaseAll(ctx, []authority.Grant{g})
	if err != nil {
		return nil, err
	}
	return func() error {
		now, err := st.Etcd.Get(ctx, st.NS.PointerKey(res))
		if err != nil {
			return err
		}
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
			rep, err := operator.RunGC(ctx, coll, gc.RunOptions{Resources: []string{res}}, false)
			switch {
			case err != nil:
				return err
			case rep.Clock != nil && rep.Clock.GraceCutoff > now.Header.Revision:
				return nil
			case time.Now().After(deadline):
				return fmt.Errorf("the domain clock's grace cutoff stayed at or below revision %d for a minute", now.Header.Revision)
			}
		}
	}, nil
}

// generated yields n files of size bytes named datasetPath(i), generated
// on the fly (nothing held but the file in flight).
func generated(n, size int) func(yield func(publisher.File, error) bool) {
	return func(yield func(publisher.File, error) bool) {
		for i := range n {
			b := make([]byte, size)
			binary.LittleEndian.PutUint64(b, uint64(i))
			if !yield(publisher.BytesFile(datasetPath(i), b, ""), nil) {
				return
			}
		}
	}
}

// childRun is one run of a child process: its wall time, peak RSS and
// stdout.
type childRun struct {
	wall   time.Duration
	maxRSS int64 // bytes
	stdout []byte
}

// child runs bin with args and returns its wall time and peak RSS: the
// highest VmHWM (the kernel's resident high-water mark) read from
// /proc/<pid>/status every 2 ms while it runs. Its rusage maxrss cannot
// serve: Go starts a child with vfork, so the child's maxrss starts at this
// process's own high-water mark (the kernel records the mm it replaced at
// exec), tens of MiB above a small child's.
func child(ctx context.Context, bin string, args ...string) (childRun, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return childRun{}, err
	}
	var hwm atomic.Int64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		pid := strconv.Itoa(cmd.Process.Pid)
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			if kb := pidStatusKB(pid, "VmHWM"); kb<<10 > hwm.Load() {
				hwm.Store(kb << 10)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	err := cmd.Wait()
	close(stop)
	<-done
	run := childRun{wall: time.Since(t0), stdout: out.Bytes(), maxRSS: hwm.Load()}
	if err != nil {
		return run, fmt.Errorf("%s %v: %w: %s", filepath.Base(bin), args, err, bytes.TrimSpace(errb.Bytes()))
	}
	return run, nil
}

// maxRSSSlope is the scale rows' target: a process whose peak RSS grows by
// more bytes per file than this between the two counts grows linearly
// with the file count (a million files would add more than 64 MB).
const maxRSSSlope = 64

// scalePoint is what the scale steps measured at one file count.
type scalePoint struct {
	files                              int
	publish, read, reusedGC, collectGC childRun
	incremental                        childRun
	manifestBytes                      int64
}

// datasetScale publishes, reads and collects one version of many small
// generated files at two file counts through the fencepub CLI, each step a
// child process whose peak RSS is read from its rusage.
func (s *runner) datasetScale(ctx context.Context, st *stack, dir string) error {
	bin := s.opts.Fencepub
	if bin == "" {
		var err error
		if bin, err = devstack.Binary("fencepub"); err != nil {
			for _, c := range []string{"publisher", "reader", "GC"} {
				s.add(bench.SkippedRow(WorkloadDataset, "scale: peak RSS of the "+c, "", "", "fencepub binary not found (run `make build`, or pass its path)"))
			}
			return nil
		}
	}
	cfg, err := s.writeConfig(dir+"-config", st.NS)
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir + "-config")
	coll, err := gc.New(gc.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(st.NS), Etcd: st.Etcd, Store: st.Store}, Authority: st.auth, Policy: datasetGCPolicy})
	if err != nil {
		return err
	}
	tick, err := s.clockTick(ctx, st, coll)
	if err != nil {
		return err
	}
	counts := s.opts.ScaleFiles
	if len(counts) == 0 {
		counts = []int{s.n(100_000, 300), s.n(300_000, 900)}
	}
	var pts []scalePoint
	for _, n := range counts {
		pt, err := s.scalePoint(ctx, st, bin, cfg, dir, n, tick)
		if err != nil {
			return err
		}
		pts = append(pts, pt)
		s.log.Info("bench: dataset scale", "files", n, "publish_s", pt.publish.wall.Seconds(), "publish_rss", pt.publish.maxRSS,
			"read_rss", pt.read.maxRSS, "incremental_rss", pt.incremental.maxRSS, "gc_reused_rss", pt.reusedGC.maxRSS, "gc_rss", pt.collectGC.maxRSS)
	}
	lo, hi := pts[0], pts[len(pts)-1]
	for _, c := range []struct {
		name string
		rss  func(scalePoint) childRun
	}{
		{"publisher (publish --dir, base none)", func(p scalePoint) childRun { return p.publish }},
		{"publisher (publish --dir, all but one file reused)", func(p scalePoint) childRun { return p.incremental }},
		{"reader (read --path)", func(p scalePoint) childRun { return p.read }},
		{"GC (the superseded version's files named by the current one)", func(p scalePoint) childRun { return p.reusedGC }},
		{"GC (collecting the superseded version)", func(p scalePoint) childRun { return p.collectGC }},
	} {
		a, b := c.rss(hi), c.rss(lo)
		row := bench.NewRow(WorkloadDataset, fmt.Sprintf("scale: peak RSS of the %s, %d vs %d files", c.name, hi.files, lo.files), 0, 1,
			bench.Stats{Ops: hi.files, Wall: a.wall, Throughput: float64(a.maxRSS), PeakRSS: a.maxRSS},
			fmt.Sprintf("the same at %d files", lo.files),
			bench.Stats{Ops: lo.files, Wall: b.wall, Throughput: float64(b.maxRSS), PeakRSS: b.maxRSS})
		row.Unit = "bytes"
		slope := float64(a.maxRSS-b.maxRSS) / float64(hi.files-lo.files)
		s.add(row.WithTarget(fmt.Sprintf("peak RSS slope <= %d bytes per file (not linear in the file count)", maxRSSSlope),
			func(bench.Row) bool { return slope <= maxRSSSlope }).
			WithNote(fmt.Sprintf("slope %.0f bytes per file; wall %.1f s vs %.1f s", slope, a.wall.Seconds(), b.wall.Seconds())))
	}
	row := bench.NewRow(WorkloadDataset, fmt.Sprintf("scale: manifest bytes per entry, %d vs %d files", hi.files, lo.files), 0, 1,
		bench.Stats{Ops: hi.files, Throughput: float64(hi.manifestBytes) / float64(hi.files)}, fmt.Sprintf("the same at %d files", lo.files),
		bench.Stats{Ops: lo.files, Throughput: float64(lo.manifestBytes) / float64(lo.files)})
	row.Unit = "bytes/entry"
	s.add(row)
	row = bench.NewRow(WorkloadDataset, fmt.Sprintf("scale: publish --dir throughput, %d vs %d files", hi.files, lo.files), 0, datasetParallel,
		bench.Stats{Ops: hi.files, Wall: hi.publish.wall, Throughput: float64(hi.files) / hi.publish.wall.Seconds()}, fmt.Sprintf("the same at %d files", lo.files),
		bench.Stats{Ops: lo.files, Wall: lo.publish.wall, Throughput: float64(lo.files) / lo.publish.wall.Seconds()})
	row.Unit = "files/s"
	s.add(row)
	return nil
}

// scalePoint measures the scale steps at n files of 32 bytes on a fresh
// resource: publish (base none), read one file, publish again with one
// file added (every other reused), GC with the first version superseded
// (its files named by the current one), then a one-file version with base
// none and GC collecting everything else.
func (s *runner) scalePoint(ctx context.Context, st *stack, bin, cfg, dir string, n int, tick func() error) (scalePoint, error) {
	pt := scalePoint{files: n}
	if err := writeDataset(dir, n, 32, 0); err != nil {
		return pt, err
	}
	defer os.RemoveAll(dir)
	res := "scale-" + strconv.Itoa(n)
	ns := []string{"--config", cfg}
	// An hour, and 10 ms a file beyond 100,000 (this machine sends about
	// 270 small files a second to one MinIO drive).
	timeout := (time.Hour + time.Duration(max(0, n-100_000))*10*time.Millisecond).String()
	publish := func(key, base string) (childRun, publisher.DatasetResult, error) {
		run, err := child(ctx, bin, append(ns, "publish", "--resource", res, "--owner", "bench", "--ttl", "10m", "--timeout", timeout, "--dir", dir,
			"--key", key, "--base", base, "-o", "json")...)
		var r struct {
			Object layout.Object `json:"object"`
			publisher.DatasetStats
		}
		if err == nil {
			err = json.Unmarshal(run.stdout, &r)
		}
		return run, publisher.DatasetResult{DatasetStats: r.DatasetStats, Result: publisher.Result{Object: r.Object}}, err
	}
	gcPass := func(want func(int64) bool) (childRun, error) {
		run, err := child(ctx, bin, append(ns, "gc", "run", "--resource", res, "--retain", "1", "--grace", "1ms", "--clock-skew", "1ms", "-o", "json")...)
		var rep struct {
			Deleted int64 `json:"deleted"`
		}
		if err == nil {
			err = json.Unmarshal(run.stdout, &rep)
		}
		if err == nil && !want(rep.Deleted) {
			err = fmt.Errorf("gc over %s deleted %d objects: %s", res, rep.Deleted, run.stdout)
		}
		return run, err
	}
	var (
		v1  publisher.DatasetResult
		err error
	)
	if pt.publish, v1, err = publish("v1", "none"); err != nil {
		return pt, err
	}
	if pt.manifestBytes, err = manifestBytes(ctx, st, v1.Object); err != nil {
		return pt, err
	}
	path := datasetPath(n / 2)
	if pt.read, err = child(ctx, bin, append(ns, "read", "--resource", res, "--path", path)...); err != nil {
		return pt, err
	}
	if len(pt.read.stdout) != 32 {
		return pt, fmt.Errorf("read --path %s: %d bytes, want 32", path, len(pt.read.stdout))
	}
	if err := writeDatasetFile(dir, n, make([]byte, 32), 1); err != nil {
		return pt, err
	}
	var v2 publisher.DatasetResult
	if pt.incremental, v2, err = publish("v2", "current"); err != nil {
		return pt, err
	}
	if v2.ReusedFiles != int64(n) {
		return pt, fmt.Errorf("second publish reused %d files, want %d", v2.ReusedFiles, n)
	}
	if err := tick(); err != nil {
		return pt, err
	}
	// v1's index and pages go; its files stay, named by v2's manifest.
	if pt.reusedGC, err = gcPass(func(d int64) bool { return d >= 1 && d <= int64(n/1000+2) }); err != nil {
		return pt, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return pt, err
	}
	if err := writeDataset(dir, 1, 32, 2); err != nil {
		return pt, err
	}
	if _, _, err := publish("v3", "none"); err != nil {
		return pt, err
	}
	if err := tick(); err != nil {
		return pt, err
	}
	pt.collectGC, err = gcPass(func(d int64) bool { return d >= int64(n) })
	return pt, err
}
