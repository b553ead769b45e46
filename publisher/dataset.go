package publisher

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"iter"
	"sync"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/debuglog"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/manifest"
	"github.com/fencepub/fencepub/internal/retry"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Dataset publishes (DESIGN.md "Dataset versions", invariants 14 and 15).
// A dataset version is its files, written create-only under the version's
// own key (layout.FileKey), one manifest naming them (an index at the
// version's key, plus pages when large; internal/manifest), and the one
// publish transaction, whose pointer names the manifest and says kind
// dataset. Files whose path, size, sha256 and content type equal an entry
// of the base's manifest are not uploaded: the new manifest names the
// base's object, and the transaction then also requires the pointer to be
// the base exactly, so a reused file is named by the pointer from the
// moment it is chosen until the new manifest replaces it, and GC (which
// keeps what retained manifests name) never deletes it in between.

// ReasonBase is the Stale reason of a dataset publish whose base is no
// longer the pointer: the pointer moved (to a version still below the
// publish's) after the files to reuse were chosen (invariant 15).
const ReasonBase Reason = "base"

// Base selects the version a dataset publish reuses files from.
type Base string

// Bases.
const (
	// BaseCurrent (the default, ""): the current pointer, when it is a
	// dataset; otherwise nothing is reused.
	BaseCurrent Base = "current"
	// BaseNone: upload every file.
	BaseNone Base = "none"
)

// DefaultParallel is the number of file uploads a dataset publish runs at
// once unless Dataset.Parallel says otherwise.
const DefaultParallel = 8

// defaultFileSends bounds the sends of one file's upload that fails in
// transit (Dataset.FileSends).
const defaultFileSends = 3

// File is one file of a dataset publish.
type File struct {
	// Path names the file in the dataset: relative, '/'-separated, UTF-8
	// in NFC, no "." or ".." segment (the package doc, "Dataset paths").
	Path string
	// Size is the file's length in bytes when known; 0 means unknown (the
	// body is then sent in parts of Config.PartSize held in memory).
	Size int64
	// ContentType defaults to "application/octet-stream". It is part of
	// the request digest.
	ContentType string
	// Open returns the file's bytes. It may be called more than once (a
	// retried upload, or hashing before deciding to reuse a base's file)
	// and must give the same bytes each time. The publisher closes what it
	// returns.
	Open func() (io.ReadCloser, error)
	// copyFrom, set by a rollback instead of Open, is an object copied
	// server-side as the file.
	copyFrom *layout.Object
}

// Dataset is one logical dataset publish.
type Dataset struct {
	// IdempotencyKey names it across retries and terms, as
	// Operation.IdempotencyKey.
	IdempotencyKey string
	// Files yields the files in path order (the order of a directory walk;
	// the package doc, "Dataset paths"; FileList sorts a slice, DirFiles
	// walks a directory).
	// An error it yields ends the publish with that error, nothing
	// published. A path out of order, given twice or inside another file's
	// path is fencepub.ErrInvalid.
	Files iter.Seq2[File, error]
	// Base: BaseCurrent ("" too) or BaseNone. In a Pipeline, BaseCurrent
	// is the version submitted before (Pipeline.SubmitDataset).
	Base Base
	// Parallel is the number of files uploaded at once; 0 means
	// DefaultParallel.
	Parallel int
	// FileSends bounds the sends of one file whose upload fails in transit
	// (the store unavailable), re-opening it each time; 0 means 3.
	FileSends int
	// Progress, when set, is called once per file, in path order, from the
	// goroutine writing the manifest, as each file is uploaded or reused.
	Progress func(FileDone)
}

// FileDone reports one file of a dataset publish to Dataset.Progress.
type FileDone struct {
	Path   string
	Size   int64 // bytes
	Reused bool  // named from the base, not uploaded
}

// DatasetStats describes what a dataset publish wrote, whatever its
// outcome.
type DatasetStats struct {
	Files         int64 `json:"files"`
	Bytes         int64 `json:"bytes"`
	UploadedFiles int64 `json:"uploaded_files"`
	UploadedBytes int64 `json:"uploaded_bytes"`
	ReusedFiles   int64 `json:"reused_files"`
	// SHA256 is the manifest index's sha256 (the pointer's object's).
	SHA256 string `json:"sha256"`
	// Base is the version files were reused from; nil when none.
	Base *fencepub.Version `json:"base,omitempty"`
}

// DatasetResult is a dataset publish's Result with its DatasetStats.
type DatasetResult struct {
	Result
	DatasetStats
}

// FileList returns an iterator over a copy of files sorted by path (the
// package doc, "Dataset paths"), for Dataset.Files. It holds the slice; for
// many files, yield them in order from a generator instead.
func FileList(files []File) iter.Seq2[File, error] {
	sorted := make([]File, len(files))
	copy(sorted, files)
	sortFiles(sorted)
	return func(yield func(File, error) bool) {
		for _, f := range sorted {
			if !yield(f, nil) {
				return
			}
		}
	}
}

// BytesFile returns a File of path holding data (in memory).
func BytesFile(path string, data []byte, contentType string) File {
	return File{Path: path, Size: int64(len(data)), ContentType: contentType, Open: func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}}
}

// validate checks ds's fields. Errors: fencepub.ErrInvalid naming the field.
func (ds Dataset) validate() error {
	if err := layout.ValidateKey("idempotency key", ds.IdempotencyKey); err != nil {
		return fmt.Errorf("%w: %w", fencepub.ErrInvalid, err)
	}
	switch {
	case ds.Files == nil:
		return fmt.Errorf("%w: Dataset.Files is nil", fencepub.ErrInvalid)
	case ds.Base != "" && ds.Base != BaseCurrent && ds.Base != BaseNone:
		return fmt.Errorf("%w: Dataset.Base %q: want %q or %q", fencepub.ErrInvalid, ds.Base, BaseCurrent, BaseNone)
	case ds.Parallel < 0 || ds.FileSends < 0:
		return fmt.Errorf("%w: Dataset.Parallel %d and FileSends %d must not be negative", fencepub.ErrInvalid, ds.Parallel, ds.FileSends)
	}
	return nil
}

// PublishDataset uploads ds's files and publishes them as one dataset
// version with the next seq, in one etcd transaction (DESIGN.md "Dataset
// versions"; the package doc, "Publishing a dataset"). A file equal to an
// entry of the base (Dataset.Base) is not uploaded again. It blocks as
// Publish does and ends with the same outcomes; a pointer that moved off the
// base is Stale with ReasonBase, and Resolve settles an unknown outcome with
// the Result's AttemptID. Calls may overlap as Publish's do. Errors are
// Publish's, plus fencepub.ErrInvalid (a field or a path), ErrBody, an error
// Dataset.Files yielded and fencepub.ErrCorruptState (the base's manifest).
func (p *Publisher) PublishDataset(ctx context.Context, ds Dataset) (DatasetResult, error) {
	if err := ds.validate(); err != nil {
		p.c.m.failure("validate")
		return DatasetResult{}, err
	}
	base, err := p.c.readBase(ctx, p.term.resource, ds.Base)
	if err != nil {
		p.c.m.failure("base")
		return DatasetResult{}, err
	}
	c := p.take(0)
	w, stats, err := p.writeDataset(ctx, c.v, ds, base)
	if err != nil {
		p.c.m.failure("object")
		p.giveBack(c)
		return DatasetResult{DatasetStats: stats}, err
	}
	ctx, pr := p.datasetTxn(c.v, ds.IdempotencyKey, w, base)(ctx)
	res, err := p.send(ctx, c, pr)
	return DatasetResult{Result: res, DatasetStats: stats}, err
}

// datasetTxn returns the txnFunc of dataset attempt w at v with base b.
func (p *Publisher) datasetTxn(v layout.Version, key string, w writtenDataset, b *base) txnFunc {
	return func(ctx context.Context) (context.Context, *prepared) {
		ctx = debuglog.With(ctx, p.c.log, "resource", p.term.resource, "version", v.String(), "key", key)
		return ctx, p.c.prepareDataset(p.term, v, key, w, b)
	}
}

// base is the version a dataset publish reuses files from: the pointer's
// exact etcd value (the transaction compares it), its version and its
// manifest index.
type base struct {
	value   string
	version layout.Version
	index   *manifest.Index
}

// readBase reads the current pointer of res (linearizable) and, when mode
// is BaseCurrent and the pointer is a dataset, its manifest index. It
// returns nil when nothing is to be reused. Errors: fencepub.ErrUnavailable,
// fencepub.ErrNotInitialized, fencepub.ErrCorruptRecord, the store's errors
// and fencepub.ErrCorruptState for the manifest.
func (c *Client) readBase(ctx context.Context, res string, mode Base) (*base, error) {
	if mode == BaseNone {
		return nil, nil
	}
	var resp *clientv3.GetResponse
	if err := c.retry(ctx, "read the base pointer of "+res, func(ctx context.Context) error {
		var err error
		resp, err = c.kv.Get(ctx, c.ns.PointerKey(res))
		return err
	}); err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("%w: resource %q has no pointer", fencepub.ErrNotInitialized, res)
	}
	ptr, err := layout.DecodePointer(resp.Kvs[0].Value)
	if err != nil {
		return nil, fmt.Errorf("publisher: pointer of %q: %w", res, err)
	}
	if !ptr.IsDataset() {
		return nil, nil
	}
	ix, err := manifest.LoadIndex(ctx, c.cfg.Store, ptr.Object)
	if err != nil {
		return nil, fmt.Errorf("publisher: manifest of the base %s of %q: %w", ptr.Version, res, err)
	}
	return &base{value: string(resp.Kvs[0].Value), version: ptr.Version, index: ix}, nil
}

// baseCursor finds base entries by path for paths given in increasing
// order, reading one page of the base's manifest at a time and skipping
// pages that cannot hold the next path.
type baseCursor struct {
	c    *Client
	b    *base
	page int // next page to consider
	es   []manifest.Entry
	i    int
}

// find returns the base entry of path, nil when there is none (or no
// base). Errors: the manifest page's (LoadPage).
func (bc *baseCursor) find(ctx context.Context, path string) (*manifest.Entry, error) {
	if bc.b == nil {
		return nil, nil
	}
	if bc.es == nil && bc.page == 0 {
		bc.es = bc.b.index.Entries
	}
	for {
		for ; bc.i < len(bc.es); bc.i++ {
			switch c := manifest.ComparePaths(bc.es[bc.i].Path, path); {
			case c == 0:
				e := bc.es[bc.i]
				return &e, nil
			case c > 0:
				return nil, nil
			}
		}
		pages := bc.b.index.Pages
		for bc.page < len(pages) && manifest.ComparePaths(pages[bc.page].Last, path) < 0 {
			bc.page++
		}
		if bc.page == len(pages) {
			return nil, nil
		}
		es, err := manifest.LoadPage(ctx, bc.c.cfg.Store, pages[bc.page])
		if err != nil {
			return nil, fmt.Errorf("publisher: manifest page %d of the base %s: %w", bc.page, bc.b.version, err)
		}
		bc.page++
		bc.es, bc.i = es, 0
	}
}

// writtenDataset is a dataset attempt whose files and manifest are stored.
type writtenDataset struct {
	manifest     layout.Object
	digest       string
	files, bytes int64
	index        []byte // the manifest index's bytes (at manifest.Key)
}

// fileJob is one file to upload or reuse; out receives its result.
type fileJob struct {
	f    File
	base *manifest.Entry
	out  chan fileResult
}

type fileResult struct {
	e      manifest.Entry
	reused bool
	err    error
}

// writeDataset stores ds's files and manifest as the attempt at v (a fresh
// nonce). Files are read from ds.Files by one goroutine, which also finds
// each one's base entry; Parallel workers upload (or hash and reuse) them;
// this goroutine adds the results to the manifest in order, so the queue
// between them bounds what is held. The first error stops the rest.
func (p *Publisher) writeDataset(ctx context.Context, v layout.Version, ds Dataset, b *base) (writtenDataset, DatasetStats, error) {
	var stats DatasetStats
	if b != nil {
		bv := b.version
		stats.Base = &bv
	}
	wctx, cancel := context.WithCancelCause(ctx) // the uploads'; the index is written on ctx
	defer cancel(nil)
	vkey := p.c.ns.ObjectKey(p.term.resource, v, layout.NewNonce())
	parallel := cmp.Or(ds.Parallel, DefaultParallel)
	sends := cmp.Or(ds.FileSends, defaultFileSends)
	jobs := make(chan fileJob)
	order := make(chan chan fileResult, 2*parallel)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(jobs)
		defer close(order)
		bc := &baseCursor{c: p.c, b: b}
		prev := ""
		for f, err := range ds.Files {
			out := make(chan fileResult, 1)
			if err == nil {
				err = manifest.ValidatePath(f.Path)
			}
			if err == nil {
				err = manifest.CheckOrder(prev, f.Path)
			}
			var be *manifest.Entry
			if err == nil {
				be, err = bc.find(wctx, f.Path)
			}
			if err != nil {
				out <- fileResult{err: err}
				select {
				case order <- out:
				case <-wctx.Done():
				}
				return
			}
			prev = f.Path
			select {
			case order <- out:
			case <-wctx.Done():
				return
			}
			select {
			case jobs <- fileJob{f: f, base: be, out: out}:
			case <-wctx.Done():
				return
			}
		}
	})
	for range parallel {
		wg.Go(func() {
			for j := range jobs {
				j.out <- p.datasetFile(wctx, vkey, j, sends)
			}
		})
	}
	mw := manifest.NewWriter(0, func(n int, data []byte) (string, string, error) {
		obj, err := p.putBytes(ctx, layout.PageKey(vkey, n), data) // also from Finish, after the uploads ended
		return obj.Key, obj.ETag, err
	})
	err := func() error {
		for out := range order {
			var r fileResult
			select {
			case r = <-out:
			case <-wctx.Done():
				return context.Cause(wctx)
			}
			if r.err != nil {
				return r.err
			}
			if err := mw.Add(r.e); err != nil {
				return err
			}
			if r.reused {
				stats.ReusedFiles++
			} else {
				stats.UploadedFiles++
				stats.UploadedBytes += r.e.Size
			}
			if ds.Progress != nil {
				ds.Progress(FileDone{Path: r.e.Path, Size: r.e.Size, Reused: r.reused})
			}
		}
		return wctx.Err()
	}()
	cancel(err)
	wg.Wait()
	if err != nil {
		return writtenDataset{}, stats, err
	}
	idx, sum, err := mw.Finish()
	if err != nil {
		return writtenDataset{}, stats, err
	}
	obj, err := p.putBytes(ctx, vkey, idx)
	if err != nil {
		return writtenDataset{}, stats, err
	}
	stats.Files, stats.Bytes, stats.SHA256 = sum.Files, sum.Bytes, obj.SHA256
	return writtenDataset{manifest: obj, digest: sum.ContentDigest, files: sum.Files, bytes: sum.Bytes, index: idx}, stats, nil
}

// putBytes writes data (a manifest index or page) create-only at key.
func (p *Publisher) putBytes(ctx context.Context, key string, data []byte) (layout.Object, error) {
	sum := sha256.Sum256(data)
	obj := layout.Object{Bucket: p.c.cfg.Store.BucketName(), Key: key, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data))}
	return p.c.putSingle(ctx, obj, data, manifest.ContentType, nil)
}

// maxObjectKeyLen is S3's limit on an object key, in bytes.
const maxObjectKeyLen = 1024

// datasetFile uploads j's file under vkey, or, when its base entry has the
// same size, sha256 and content type, reuses it. An upload that fails in
// transit is sent again from a fresh Open, up to sends times.
func (p *Publisher) datasetFile(ctx context.Context, vkey string, j fileJob, sends int) fileResult {
	f := j.f
	fail := func(err error) fileResult {
		return fileResult{err: fmt.Errorf("publisher: dataset file %q: %w", f.Path, err)}
	}
	ct := cmp.Or(f.ContentType, defaultContentType)
	if err := checkHeaderValue("content type", ct, maxContentTypeLen); err != nil {
		return fail(err)
	}
	if f.Open == nil && f.copyFrom == nil || f.Size < 0 {
		return fail(fmt.Errorf("%w: no Open function, or a negative Size", fencepub.ErrInvalid))
	}
	if be := j.base; be != nil && be.ContentType == ct && (f.Size == 0 || f.Size == be.Size) {
		sha, n, err := hashFile(ctx, f)
		if err != nil {
			return fail(err)
		}
		if n == be.Size && sha == be.SHA256 {
			return fileResult{e: *be, reused: true}
		}
	}
	key := layout.FileKey(vkey, f.Path)
	if len(key) > maxObjectKeyLen {
		return fail(fmt.Errorf("%w: its object key is %d bytes; the store's limit is %d", fencepub.ErrInvalid, len(key), maxObjectKeyLen))
	}
	var obj layout.Object
	if f.copyFrom != nil {
		obj, err := p.c.copyObject(ctx, *f.copyFrom, key, ct, nil)
		if err != nil {
			return fail(err)
		}
		return fileResult{e: manifest.Entry{Path: f.Path, Size: obj.Size, SHA256: obj.SHA256, Key: key, ETag: obj.ETag, ContentType: ct}}
	}
	n := 0
	err := retry.Do(ctx, func(ctx context.Context) error {
		n++
		body, err := f.Open()
		if err != nil {
			return fmt.Errorf("%w: open: %w", ErrBody, err)
		}
		defer body.Close()
		obj, _, err = p.c.writeObject(ctx, key, body, bodySize(body, f.Size), ct, nil)
		return err
	}, func(err error) bool { return n < sends && retry.StoreUnavailable(err) })
	if err != nil {
		return fail(err)
	}
	return fileResult{e: manifest.Entry{Path: f.Path, Size: obj.Size, SHA256: obj.SHA256, Key: key, ETag: obj.ETag, ContentType: ct}}
}

// hashFile reads f once and returns its sha256 (hex) and length.
func hashFile(ctx context.Context, f File) (string, int64, error) {
	body, err := f.Open()
	if err != nil {
		return "", 0, fmt.Errorf("%w: open: %w", ErrBody, err)
	}
	defer body.Close()
	var r io.Reader = body
	if mayBlock(body) {
		r = &ctxReader{ctx: ctx, r: body}
	}
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return "", 0, bodyErr(ctx, f.Path, n, err)
	}
	if f.Size > 0 && n != f.Size {
		return "", 0, fmt.Errorf("%w: the file has %d bytes, not Size %d", ErrBody, n, f.Size)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// prepareDataset builds the publish transaction of dataset attempt w at v:
// Publish's (prepare), with a pointer of kind dataset naming w's manifest,
// and, with a base, the compare that the pointer is the base exactly
// (invariant 15).
func (c *Client) prepareDataset(t Term, v layout.Version, key string, w writtenDataset, b *base) *prepared {
	pr := c.prepare(t, v, key, w.digest, w.manifest, manifest.ContentType)
	pr.pointer.Kind, pr.pointer.Files, pr.pointer.Bytes = layout.KindDataset, w.files, w.bytes
	val, _ := layout.EncodePointer(pr.pointer) // cannot fail
	for i, op := range pr.then {
		if k := string(op.KeyBytes()); k == c.ns.PointerKey(t.resource) || k == c.ns.HistoryKey(t.resource, v) {
			pr.then[i] = clientv3.OpPut(k, val)
		}
	}
	if b != nil {
		pr.base = b
		pr.cmps = append(pr.cmps, clientv3.Compare(clientv3.Value(c.ns.PointerKey(t.resource)), "=", b.value))
	}
	return pr
}

// errBaseMoved is classify's explanation of ReasonBase.
func errBaseMoved(ptr layout.Version, b *base) string {
	return fmt.Sprintf("the pointer is at %s, no longer the base %s the publish reuses files from", ptr, b.version)
}
