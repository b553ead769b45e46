package manifest

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"sort"

	"github.com/fencepub/fencepub"
)

// Format is the header's format tag; a decoder refuses any other.
const Format = "fencepub.manifest.v1"

// DefaultPageEntries is the number of entries per page NewWriter uses when
// given 0: a page is then about 200 KiB for typical paths.
const DefaultPageEntries = 1000

// Entry is one file of a dataset version.
type Entry struct {
	Path   string `json:"path"`   // ValidatePath's form
	Size   int64  `json:"size"`   // bytes
	SHA256 string `json:"sha256"` // 64 lowercase hex digits
	// Key is the object holding the bytes: under the version's own key, or,
	// for a file reused from the base, the object the base names.
	Key         string `json:"key"`
	ETag        string `json:"etag,omitempty"` // the store's ETag of Key, for If-Match reads
	ContentType string `json:"content_type"`
}

// Header is an index's first line.
type Header struct {
	Format string `json:"format"`
	Files  int64  `json:"files"` // entries in all
	Bytes  int64  `json:"bytes"` // sum of the entries' sizes
	// Pages counts the pages; 0 means the entries follow the header in
	// the index itself.
	Pages int `json:"pages"`
}

// PageRef names one page from the index: its path range, counts and the
// object holding it (verified by sha256 when read).
type PageRef struct {
	First  string `json:"first"` // path of the page's first entry
	Last   string `json:"last"`  // path of its last entry
	Files  int64  `json:"files"`
	Bytes  int64  `json:"bytes"`
	Key    string `json:"key"`
	SHA256 string `json:"sha256"` // of the page's bytes
	ETag   string `json:"etag,omitempty"`
	Size   int64  `json:"size"` // the page's length in bytes
}

// Index is a decoded index: the header, then the pages or, for an inline
// manifest, the entries.
type Index struct {
	Header
	Pages   []PageRef
	Entries []Entry // inline entries (Header.Pages == 0)
}

// Summary is what Writer.Finish returns beside the index bytes.
type Summary struct {
	Files int64
	Bytes int64
	Pages int
	// ContentDigest is 64 lowercase hex digits: sha256 over every entry's
	// path, size, sha256 and content type in order (never object keys or
	// ETags), so the same files give the same digest whichever objects
	// hold them: a dataset's request digest (DESIGN.md invariant 5).
	ContentDigest string
}

// line appends the canonical line of v (its JSON and '\n') to b.
func line(b []byte, v any) []byte {
	j, err := json.Marshal(v)
	if err != nil { // the types of this package always marshal
		panic(fmt.Sprintf("manifest: marshal %T: %v", v, err))
	}
	return append(append(b, j...), '\n')
}

// PutPage stores page n (from 0) holding data and returns its object key
// and ETag. The Writer calls it in page order, from the goroutine calling
// Add or Finish.
type PutPage func(n int, data []byte) (key, etag string, err error)

// Writer builds a manifest from entries added in ComparePaths order,
// holding at most one page of entries (plus one PageRef per page) in
// memory. Not safe for concurrent use.
type Writer struct {
	perPage int
	put     PutPage

	prev    string
	page    []byte // the encoded entries of the page being filled
	inPage  int
	first   string
	pBytes  int64
	pages   []PageRef
	files   int64
	total   int64
	content hash.Hash // the content digest of the entries so far
	field   []byte    // scratch for one entry's digest input
	done    bool
}

// NewWriter returns a Writer of perPage entries per page (0:
// DefaultPageEntries) storing pages with put.
func NewWriter(perPage int, put PutPage) *Writer {
	if perPage <= 0 {
		perPage = DefaultPageEntries
	}
	w := &Writer{perPage: perPage, put: put, content: sha256.New()}
	w.content.Write(lenField(nil, contentTag))
	return w
}

// contentTag versions the content digest's encoding.
const contentTag = "fencepub.dataset-content-digest.v1"

// lenField appends s with an 8-byte big-endian length before it.
func lenField(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

// ValidateEntry checks e's fields: ValidatePath, a size of at least 0, a
// sha256 of 64 lowercase hex digits, a key and a content type. Errors:
// fencepub.ErrInvalid naming the path and the field.
func ValidateEntry(e Entry) error {
	if err := ValidatePath(e.Path); err != nil {
		return err
	}
	switch {
	case e.Size < 0:
		return fmt.Errorf("%w: dataset entry %.120q has size %d", fencepub.ErrInvalid, e.Path, e.Size)
	case !isSHA256(e.SHA256):
		return fmt.Errorf("%w: dataset entry %.120q has sha256 %.80q, not 64 lowercase hex digits", fencepub.ErrInvalid, e.Path, e.SHA256)
	case e.Key == "":
		return fmt.Errorf("%w: dataset entry %.120q names no object key", fencepub.ErrInvalid, e.Path)
	case e.ContentType == "":
		return fmt.Errorf("%w: dataset entry %.120q has no content type", fencepub.ErrInvalid, e.Path)
	}
	return nil
}

func isSHA256(s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == 32 && hex.EncodeToString(b) == s
}

// Add appends e, which must follow the previous entry (ComparePaths order,
// no path inside a file's path). A full page is stored (PutPage) before
// the next entry is taken. Errors: fencepub.ErrInvalid (ValidateEntry, the
// order); PutPage's error. After an error the Writer is unusable.
func (w *Writer) Add(e Entry) error {
	if w.done {
		return fmt.Errorf("manifest: Add after Finish or an error")
	}
	if err := ValidateEntry(e); err != nil {
		w.done = true
		return err
	}
	if err := CheckOrder(w.prev, e.Path); err != nil {
		w.done = true
		return err
	}
	if w.inPage == w.perPage {
		if err := w.flush(); err != nil {
			w.done = true
			return err
		}
	}
	if w.inPage == 0 {
		w.first = e.Path
	}
	w.prev = e.Path
	w.page = line(w.page, e)
	w.inPage++
	w.pBytes += e.Size
	w.files++
	w.total += e.Size
	f := lenField(w.field[:0], e.Path)
	f = binary.BigEndian.AppendUint64(f, uint64(e.Size))
	f = lenField(f, e.SHA256)
	w.field = lenField(f, e.ContentType)
	w.content.Write(w.field)
	return nil
}

// flush stores the page being filled.
func (w *Writer) flush() error {
	n := len(w.pages)
	key, etag, err := w.put(n, w.page)
	if err != nil {
		return fmt.Errorf("manifest: store page %d: %w", n, err)
	}
	sum := sha256.Sum256(w.page)
	w.pages = append(w.pages, PageRef{
		First: w.first, Last: w.prev, Files: int64(w.inPage), Bytes: w.pBytes,
		Key: key, SHA256: hex.EncodeToString(sum[:]), ETag: etag, Size: int64(len(w.page)),
	})
	w.page, w.inPage, w.pBytes = w.page[:0], 0, 0
	return nil
}

// Finish stores the last page (unless the entries fit in the index) and
// returns the index's bytes and the Summary. Errors: PutPage's.
func (w *Writer) Finish() ([]byte, Summary, error) {
	if w.done {
		return nil, Summary{}, fmt.Errorf("manifest: Finish after Finish or an error")
	}
	w.done = true
	inline := len(w.pages) == 0
	if !inline && w.inPage > 0 {
		if err := w.flush(); err != nil {
			return nil, Summary{}, err
		}
	}
	h := Header{Format: Format, Files: w.files, Bytes: w.total, Pages: len(w.pages)}
	idx := line(nil, h)
	if inline {
		idx = append(idx, w.page...)
	}
	for _, p := range w.pages {
		idx = line(idx, p)
	}
	return idx, Summary{Files: w.files, Bytes: w.total, Pages: len(w.pages), ContentDigest: hex.EncodeToString(w.content.Sum(nil))}, nil
}

// corrupt is the error of a manifest that does not decode.
func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: manifest: "+format, append([]any{fencepub.ErrCorruptState}, args...)...)
}

// decodeLine decodes one canonical line into v: JSON with no unknown
// field, whose re-encoding is the line itself.
func decodeLine(l []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(l))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if again := line(nil, v); !bytes.Equal(again[:len(again)-1], l) {
		return fmt.Errorf("not in canonical form")
	}
	return nil
}

// lines splits b into lines, each ending with '\n' (not included).
func lines(b []byte) ([][]byte, error) {
	if len(b) == 0 || b[len(b)-1] != '\n' {
		return nil, fmt.Errorf("does not end with a newline")
	}
	return bytes.Split(b[:len(b)-1], []byte{'\n'}), nil
}

// entries decodes entry lines, checking each entry and their order; prev
// is the path before the first ("" for none). It returns the entries and
// their total size.
func entries(ls [][]byte, prev string) ([]Entry, int64, error) {
	out := make([]Entry, len(ls))
	var total int64
	for i, l := range ls {
		if err := decodeLine(l, &out[i]); err != nil {
			return nil, 0, corrupt("entry %d: %v", i, err)
		}
		if err := ValidateEntry(out[i]); err != nil {
			return nil, 0, corrupt("entry %d: %v", i, err)
		}
		if err := CheckOrder(prev, out[i].Path); err != nil {
			return nil, 0, corrupt("entry %d: %v", i, err)
		}
		prev = out[i].Path
		if total += out[i].Size; total < 0 {
			return nil, 0, corrupt("sizes overflow")
		}
	}
	return out, total, nil
}

// DecodeIndex decodes an index. Errors: fencepub.ErrCorruptState when b is
// not an index in the exact form Writer writes: another format tag, a line
// not canonical, entries or pages out of order or overlapping, counts or
// sizes that do not add up.
func DecodeIndex(b []byte) (*Index, error) {
	ls, err := lines(b)
	if err != nil {
		return nil, corrupt("index %v", err)
	}
	var ix Index
	if err := decodeLine(ls[0], &ix.Header); err != nil {
		return nil, corrupt("index header: %v", err)
	}
	if ix.Format != Format {
		return nil, corrupt("index format %.60q, want %q", ix.Format, Format)
	}
	body := ls[1:]
	if ix.Header.Pages == 0 {
		es, total, err := entries(body, "")
		if err != nil {
			return nil, err
		}
		if int64(len(es)) != ix.Files || total != ix.Bytes {
			return nil, corrupt("index says %d files, %d bytes; it holds %d, %d", ix.Files, ix.Bytes, len(es), total)
		}
		ix.Entries = es
		return &ix, nil
	}
	if len(body) != ix.Header.Pages {
		return nil, corrupt("index says %d pages; it holds %d", ix.Header.Pages, len(body))
	}
	ix.Pages = make([]PageRef, len(body))
	var files, total int64
	prev := ""
	for i, l := range body {
		p := &ix.Pages[i]
		if err := decodeLine(l, p); err != nil {
			return nil, corrupt("page %d: %v", i, err)
		}
		switch {
		case p.Files <= 0 || p.Bytes < 0 || p.Size <= 0 || p.Key == "" || !isSHA256(p.SHA256):
			return nil, corrupt("page %d: bad counts, key or sha256", i)
		case ValidatePath(p.First) != nil || ValidatePath(p.Last) != nil:
			return nil, corrupt("page %d: bad path range", i)
		case ComparePaths(p.First, p.Last) > 0 || p.Files == 1 && p.First != p.Last:
			return nil, corrupt("page %d: first %q after last %q", i, p.First, p.Last)
		}
		if err := CheckOrder(prev, p.First); err != nil {
			return nil, corrupt("page %d: %v", i, err)
		}
		prev = p.Last
		files += p.Files
		if total += p.Bytes; total < 0 {
			return nil, corrupt("sizes overflow")
		}
	}
	if files != ix.Files || total != ix.Bytes {
		return nil, corrupt("index says %d files, %d bytes; its pages hold %d, %d", ix.Files, ix.Bytes, files, total)
	}
	return &ix, nil
}

// DecodePage decodes page b that ref names, checking it against ref: its
// sha256 and size, then its entries (as DecodeIndex checks inline ones),
// their count, total size and path range. Errors: fencepub.ErrCorruptState.
func DecodePage(b []byte, ref PageRef) ([]Entry, error) {
	sum := sha256.Sum256(b)
	if int64(len(b)) != ref.Size || hex.EncodeToString(sum[:]) != ref.SHA256 {
		return nil, corrupt("%w: page %s: %d bytes, sha256 %x; the index says %d bytes, sha256 %s", ErrMismatch, ref.Key, len(b), sum, ref.Size, ref.SHA256)
	}
	ls, err := lines(b)
	if err != nil {
		return nil, corrupt("page %s %v", ref.Key, err)
	}
	es, total, err := entries(ls, "")
	if err != nil {
		return nil, err
	}
	if int64(len(es)) != ref.Files || total != ref.Bytes || es[0].Path != ref.First || es[len(es)-1].Path != ref.Last {
		return nil, corrupt("page %s does not hold what the index says", ref.Key)
	}
	return es, nil
}

// Locate finds path in ix: for an inline index, the entry (page -1); else
// the page whose range holds path (entry nil). found is false when no
// entry or page can hold path.
func (ix *Index) Locate(path string) (page int, e *Entry, found bool) {
	if ix.Header.Pages == 0 {
		e, ok := Find(ix.Entries, path)
		return -1, e, ok
	}
	i := sort.Search(len(ix.Pages), func(i int) bool { return ComparePaths(ix.Pages[i].Last, path) >= 0 })
	if i == len(ix.Pages) || ComparePaths(ix.Pages[i].First, path) > 0 {
		return 0, nil, false
	}
	return i, nil, true
}

// Find returns the entry of path in es, sorted by ComparePaths.
func Find(es []Entry, path string) (*Entry, bool) {
	i := sort.Search(len(es), func(i int) bool { return ComparePaths(es[i].Path, path) >= 0 })
	if i == len(es) || es[i].Path != path {
		return nil, false
	}
	return &es[i], true
}
