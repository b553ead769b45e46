package chaos

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/manifest"
	"github.com/fencepub/fencepub/internal/pubhook"
	"github.com/fencepub/fencepub/internal/wait"
	"github.com/fencepub/fencepub/publisher"
	"github.com/fencepub/fencepub/reader"
)

// The dataset workload (DESIGN.md "Dataset versions"): dataset workers
// publish versions of a few small files to the dataset resources of each
// window, with and without reuse of the current version's files, beside
// the single-object workload; dataset readers read files by path and list
// manifests; at the end a sweep reads every file of every retained version.

// datasetPaths is every path a dataset version may hold: files at the top,
// in a directory and in a subdirectory, so that the manifest's order
// (segment-wise) differs from plain byte order ("dir/sub/d.bin" before
// "dir-x.bin").
var datasetPaths = []string{"a.bin", "dir/b.bin", "dir/c.json", "dir/sub/d.bin", "dir-x.bin", "z.txt"}

// datasetGens is the number of contents each path can have on a resource.
const datasetGens = 6

// datasetFileSpec is one file of a dataset publish: its path and which of
// its datasetGens contents it holds.
type datasetFileSpec struct {
	path string
	gen  int
}

// datasetBody returns the bytes of path in generation gen on res: 1 to
// 2,048 bytes, the same in every process, so a worker can recognise a
// file of the current manifest by its sha256 without downloading it.
func datasetBody(res, path string, gen int) []byte {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%s\x00%d", res, path, gen)))
	return randomBytes(binary.LittleEndian.Uint64(sum[:8]), 1+int(binary.LittleEndian.Uint16(sum[8:]))%2048)
}

// randomFiles returns a random non-empty subset of datasetPaths with random
// generations.
func randomFiles(rng *rand.Rand) []datasetFileSpec {
	var out []datasetFileSpec
	for _, p := range datasetPaths {
		if rng.IntN(2) == 0 {
			out = append(out, datasetFileSpec{p, rng.IntN(datasetGens)})
		}
	}
	if len(out) == 0 {
		out = append(out, datasetFileSpec{datasetPaths[rng.IntN(len(datasetPaths))], rng.IntN(datasetGens)})
	}
	return out
}

// datasetOperation returns the idempotency key, base and files of the
// worker's next dataset publish on res. A share uses one of a few keys
// shared by every worker of the resource, with files chosen by the key
// (a retry of the same job: duplicate once applied) or other files
// (conflict); a share is a fresh version, uploaded whole (BaseNone) or
// reusing what matches (BaseCurrent); the rest change one or two files of
// the current version (add, replace or drop) and reuse the others.
func (w *worker) datasetOperation(res string) (key string, base publisher.Base, files []datasetFileSpec) {
	key, base = fmt.Sprintf("%s-%d", w.id, w.n), publisher.BaseCurrent
	switch u := w.rng.Float64(); {
	case u < 0.15:
		key = fmt.Sprintf("dshared-%d", w.rng.IntN(3))
		variant := 0
		if w.rng.Float64() < 0.25 {
			variant = 1
		}
		sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%s\x00%d", res, key, variant)))
		return key, base, randomFiles(rand.New(rand.NewPCG(binary.LittleEndian.Uint64(sum[:8]), 0)))
	case u < 0.45:
		if w.rng.IntN(2) == 0 {
			base = publisher.BaseNone
		}
		return key, base, randomFiles(w.rng)
	}
	files = w.currentFiles(res)
	if len(files) == 0 {
		return key, base, randomFiles(w.rng)
	}
	for range 1 + w.rng.IntN(2) {
		p := datasetPaths[w.rng.IntN(len(datasetPaths))]
		switch i := slices.IndexFunc(files, func(f datasetFileSpec) bool { return f.path == p }); {
		case i < 0:
			files = append(files, datasetFileSpec{p, w.rng.IntN(datasetGens)})
		case len(files) > 1 && w.rng.IntN(5) == 0:
			files = slices.Delete(files, i, i+1)
		default:
			files[i].gen = (files[i].gen + 1 + w.rng.IntN(datasetGens-1)) % datasetGens
		}
	}
	return key, base, files
}

// currentFiles returns the files of res's current version that the
// workload could have written (recognised by sha256), or nil when the
// version is no dataset or cannot be read now.
func (w *worker) currentFiles(res string) []datasetFileSpec {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rd, err := reader.New(w.rcfg, res)
	if err != nil {
		return nil
	}
	ptr, err := rd.Current(ctx)
	if err != nil || !ptr.IsDataset() {
		return nil
	}
	var out []datasetFileSpec
	for f, err := range rd.Files(ctx, ptr) {
		if err != nil {
			return nil
		}
		for gen := range datasetGens {
			if sum := sha256.Sum256(datasetBody(res, f.Path, gen)); hex.EncodeToString(sum[:]) == f.SHA256 {
				out = append(out, datasetFileSpec{f.Path, gen})
				break
			}
		}
	}
	return out
}

// publishDataset publishes the worker's next dataset operation with p
// (bound to g's term, strict if strict) as a dataset version, logging it
// as publish does, with its manifest's entries and the base it reused
// files from. It reports whether the term may go on.
func (w *worker) publishDataset(p *publisher.Publisher, g authority.Grant, strict bool) bool {
	w.n++
	key, base, specs := w.datasetOperation(g.Resource)
	return w.publishFiles(p, g, strict, key, base, specs)
}

// publishFiles publishes specs as a dataset version under key with base,
// with p (bound to g's term, strict if strict), and logs it (publishDataset).
func (w *worker) publishFiles(p *publisher.Publisher, g authority.Grant, strict bool, key string, base publisher.Base, specs []datasetFileSpec) bool {
	files := make([]publisher.File, len(specs))
	entries := make([]FileEntry, len(specs))
	for i, f := range specs {
		b := datasetBody(g.Resource, f.path, f.gen)
		sum := sha256.Sum256(b)
		files[i] = publisher.BytesFile(f.path, b, "")
		if open, hook := files[i].Open, w.beforeOpen; hook != nil {
			files[i].Open = func() (io.ReadCloser, error) { hook(); return open() }
		}
		entries[i] = FileEntry{Path: f.path, Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}
	}
	slices.SortFunc(entries, func(a, b FileEntry) int { return manifest.ComparePaths(a.Path, b.Path) })
	op := PublishOp{
		ID: fmt.Sprintf("%s/%d", w.id, w.n), Client: w.id, Resource: g.Resource, Key: key, Owner: g.Owner,
		Version: layout.Version{Epoch: g.Epoch, Fence: g.Generation, Seq: pubhook.NextSeq(p)}, Strict: strict,
		Call: w.clock.Now(), Files: entries,
	}
	w.out.Invoke(op)
	ctx, cancel := context.WithTimeout(context.Background(), w.wl.PublishTimeout)
	r, err := p.PublishDataset(ctx, publisher.Dataset{IdempotencyKey: key, Files: publisher.FileList(files), Base: base})
	cancel()
	reported(&op, r.Result, err)
	op.RequestDigest, op.Digest, op.Base, op.Reused = r.Digest, r.SHA256, r.Base, r.ReusedFiles
	if r.Attempt != nil && r.Attempt.Version != op.Version {
		w.anomaly("publish "+op.ID, fmt.Errorf("chaos: the dataset publish took version %s, not the next seq %s", r.Attempt.Version, op.Version))
	}
	return w.complete(&op, err)
}

// datasetReadLoop reads the dataset resources of the current window until
// stop closes: a file by path of the current version (through
// OpenPointerFile on the pointer Current returned, or OpenFile), a file of
// a retained version from History, or the current manifest's listing. It
// logs each read whose version it knows.
type datasetReadLoop struct {
	id    string
	clock Clock
	cfg   reader.Config
	wl    Workload
	rng   *rand.Rand
	rec   *Recorder
	stop  <-chan struct{}
}

func (l *datasetReadLoop) run() {
	readers := map[string]*reader.Reader{}
	for sleepStop(l.stop, time.Duration(40+l.rng.IntN(80))*time.Millisecond) {
		// Most reads go to the window before, whose resources have
		// versions (the current window's often have none yet).
		now := l.clock.Now()
		if l.rng.IntN(4) != 0 && now >= int64(l.wl.Window) {
			now -= int64(l.wl.Window)
		}
		res := l.wl.pickDataset(now, l.rng)
		rd, ok := readers[res]
		if !ok {
			if len(readers) > 4*l.wl.Datasets {
				clear(readers)
			}
			var err error
			if rd, err = reader.New(l.cfg, res); err != nil {
				l.rec.Anomaly(Anomaly{Client: l.id, Time: l.clock.Now(), What: "reader.New", Err: err.Error()})
				return
			}
			readers[res] = rd
		}
		if !l.read(res, rd) {
			delete(readers, res) // its pointer went back (a restore): start afresh
		}
	}
}

// read makes one read of res with rd and logs it. It reports false when
// rd must be dropped (reader.ErrWentBack).
func (l *datasetReadLoop) read(res string, rd *reader.Reader) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	op := DatasetRead{Client: l.id, Resource: res, Call: l.clock.Now(), Path: datasetPaths[l.rng.IntN(len(datasetPaths))]}
	var err error
	switch u := l.rng.Float64(); {
	case u < 0.25:
		// OpenFile: only its own pointer says which version it read.
		var b *reader.Body
		if b, err = rd.OpenFile(ctx, op.Path); err == nil {
			op.Version = b.Pointer.Version
			err = readAll(b, &op)
		} else if !errors.Is(err, reader.ErrDigestMismatch) && !errors.Is(err, reader.ErrObjectChanged) {
			// Which version answered is unknown: judged by the other reads.
			l.unjudged(op, err)
			return !errors.Is(err, reader.ErrWentBack)
		}
	case u < 0.45:
		var hist []fencepub.Pointer
		if hist, err = rd.History(ctx); err == nil {
			hist = slices.DeleteFunc(hist, func(p fencepub.Pointer) bool { return !p.IsDataset() })
			if len(hist) == 0 {
				return true
			}
			ptr := hist[l.rng.IntN(len(hist))]
			op.Version, op.Retained = ptr.Version, true
			err = openFile(ctx, rd, ptr, &op)
		}
	default:
		var ptr fencepub.Pointer
		if ptr, err = rd.Current(ctx); err == nil {
			op.Version = ptr.Version
			if ptr.Version.IsZero() {
				return true
			}
			if l.rng.IntN(3) == 0 {
				op.Path = ""
				err = listFiles(ctx, rd, ptr, &op)
			} else {
				err = openFile(ctx, rd, ptr, &op)
			}
		}
	}
	op.Return = l.clock.Now()
	l.rec.Attempt(newAttempt(l.clock, l.id, "read", op.Call, errors.Is(err, fencepub.ErrUnavailable), err))
	if op.Problem, op.Err = datasetProblem(err); op.Problem == "" && err != nil {
		l.unjudged(op, err)
		return !errors.Is(err, reader.ErrWentBack)
	}
	l.rec.DatasetRead(op)
	return true
}

// unjudged counts a dataset read that failed in a way the checker does not
// judge (a server that did not answer, a pointer that went back, a path or
// kind of a version OpenFile does not name), or logs an anomaly. The
// reader's answers about a version (ErrNoSuchFile, ErrNotDataset) are
// fencepub.ErrInvalid too, yet no anomaly.
func (l *datasetReadLoop) unjudged(op DatasetRead, err error) {
	answer := errors.Is(err, reader.ErrDigestMismatch) || errors.Is(err, reader.ErrNoSuchFile) || errors.Is(err, reader.ErrNotDataset)
	if isAnomaly(err) && !answer {
		l.rec.Anomaly(Anomaly{Client: l.id, Time: l.clock.Now(), What: "read " + op.Resource + " file " + op.Path, Err: err.Error()})
		return
	}
	switch {
	case errors.Is(err, reader.ErrNotPublished), errors.Is(err, reader.ErrUnknownResource):
		l.rec.Count(countDatasetUnpublished, 1)
	default:
		l.rec.Count(countDatasetUnjudged, 1)
	}
}

// Counters of the dataset reads the checker does not judge: of a resource
// with nothing published yet, and those that failed otherwise (a server
// that did not answer, a pointer that went back).
const (
	countDatasetUnpublished = "dataset_read_unpublished"
	countDatasetUnjudged    = "dataset_read_unjudged"
)

// datasetProblem returns the DatasetRead.Problem of err and its text; ""
// for nil and for errors the checker does not judge.
func datasetProblem(err error) (problem, text string) {
	for _, p := range []struct {
		target  error
		problem string
	}{
		{reader.ErrDigestMismatch, ReadDigest}, {reader.ErrObjectChanged, ReadChanged},
		{reader.ErrObjectMissing, ReadMissing}, {reader.ErrNoSuchFile, ReadNoSuchFile},
		{reader.ErrNotDataset, ReadNotDataset},
	} {
		if errors.Is(err, p.target) {
			return p.problem, err.Error()
		}
	}
	return "", ""
}

// openFile reads op.Path of ptr's dataset version with rd into op.
func openFile(ctx context.Context, rd *reader.Reader, ptr fencepub.Pointer, op *DatasetRead) error {
	b, err := rd.OpenPointerFile(ctx, ptr, op.Path)
	if err != nil {
		return err
	}
	return readAll(b, op)
}

// readAll reads b to the end and closes it, filling op's SHA and Size.
// Errors: b's (its verification).
func readAll(b *reader.Body, op *DatasetRead) error {
	defer func() { _ = b.Close() }()
	h := sha256.New()
	n, err := io.Copy(h, b)
	op.SHA, op.Size = hex.EncodeToString(h.Sum(nil)), n
	return err
}

// listFiles lists ptr's manifest with rd into op.Listing.
func listFiles(ctx context.Context, rd *reader.Reader, ptr fencepub.Pointer, op *DatasetRead) error {
	for f, err := range rd.Files(ctx, ptr) {
		if err != nil {
			return err
		}
		op.Listing = append(op.Listing, FileEntry{Path: f.Path, Size: f.Size, SHA256: f.SHA256})
	}
	return nil
}

// sweepDatasets reads, once the run is over, the manifest and every file of
// every version that the history of each dataset resource of rec's run
// retains (reader.History), and logs each read as a DatasetRead of
// DatasetSweep. A read that a server does not serve is tried again a few
// times (the cluster is healed by then); a missing file too, so that only
// a file that stays missing counts. Errors: a read that still fails for a
// reason the checker does not judge, ctx's error.
func sweepDatasets(ctx context.Context, rec *Recorder, cfg reader.Config) error {
	resources := map[string]bool{}
	for _, p := range rec.History().Publishes {
		if p.Files != nil {
			resources[p.Resource] = true
		}
	}
	for _, res := range keys(resources) {
		rd, err := reader.New(cfg, res)
		if err != nil {
			return err
		}
		var hist []fencepub.Pointer
		if err := sweepRetry(ctx, func() error { hist, err = rd.History(ctx); return err }); errors.Is(err, reader.ErrUnknownResource) {
			continue // nothing left after a replacement of etcd
		} else if err != nil {
			return fmt.Errorf("chaos: sweep: history of %s: %w", res, err)
		}
		for _, ptr := range hist {
			if !ptr.IsDataset() {
				continue
			}
			list := DatasetRead{Client: DatasetSweep, Resource: res, Version: ptr.Version, Retained: true}
			if err := sweepOne(ctx, rec, &list, func(op *DatasetRead) error { op.Listing = nil; return listFiles(ctx, rd, ptr, op) }); err != nil {
				return err
			}
			for _, f := range list.Listing {
				op := DatasetRead{Client: DatasetSweep, Resource: res, Version: ptr.Version, Retained: true, Path: f.Path}
				if err := sweepOne(ctx, rec, &op, func(op *DatasetRead) error { return openFile(ctx, rd, ptr, op) }); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// sweepOne makes one read of the sweep into op with read, retrying as
// sweepRetry does and a missing object too, and logs it.
func sweepOne(ctx context.Context, rec *Recorder, op *DatasetRead, read func(*DatasetRead) error) error {
	op.Call = rec.Clock().Now()
	var err error
	for attempt := 0; ; attempt++ {
		err = sweepRetry(ctx, func() error { return read(op) })
		if !errors.Is(err, reader.ErrObjectMissing) || attempt == 2 || !wait.Sleep(ctx, time.Second) {
			break
		}
	}
	op.Return = rec.Clock().Now()
	if op.Problem, op.Err = datasetProblem(err); op.Problem == "" && err != nil {
		return fmt.Errorf("chaos: sweep: %s %s %q: %w", op.Resource, op.Version, op.Path, err)
	}
	rec.DatasetRead(*op)
	return nil
}

// sweepRetry calls f until it returns an error other than
// fencepub.ErrUnavailable or a deadline, at most 10 times a second apart.
func sweepRetry(ctx context.Context, f func() error) error {
	for attempt := 0; ; attempt++ {
		err := f()
		if attempt == 9 || !errors.Is(err, fencepub.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) || !wait.Sleep(ctx, time.Second) {
			return err
		}
	}
}
