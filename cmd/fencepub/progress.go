package main

import (
	"context"
	"io"
	"time"

	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
)

// transferBar returns a progress bar of the bytes of a transfer (what:
// "publish", "read") on w, sized size bytes (-1: unknown, a spinner that
// counts), when w is a terminal and c logs text (progressTerminal), else
// nil: a log file, a pipe or JSON logs get no bar. The bar clears itself
// when finished, so the outcome's log line follows on a clean line.
func transferBar(c *cobra.Command, w io.Writer, what string, size int64) *progressbar.ProgressBar {
	f, ok := progressTerminal(c, w)
	if !ok {
		return nil
	}
	return progressbar.NewOptions64(size,
		progressbar.OptionSetWriter(f),
		progressbar.OptionSetDescription(what),
		progressbar.OptionShowBytes(true),
		progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionSetRenderBlankState(true),
		progressbar.OptionClearOnFinish(),
	)
}

// progressStore is a Store whose object writes count the bytes the store
// client reads from their bodies on bar: the bytes sent, whatever path the
// publisher takes (one PUT, multipart parts), each byte once. The
// publisher's own body is passed on unchanged underneath.
type progressStore struct {
	objstore.Store
	bar *progressbar.ProgressBar
}

func (s progressStore) PutCreateOnly(ctx context.Context, key string, body io.Reader, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	return s.Store.PutCreateOnly(ctx, key, counted(body, s.bar), size, opts)
}

func (s progressStore) UploadPart(ctx context.Context, key, uploadID string, number int, body io.Reader, size int64) (objstore.Part, error) {
	return s.Store.UploadPart(ctx, key, uploadID, number, counted(body, s.bar), size)
}

// counted returns r counting the bytes read on bar. When r can seek, so
// can the result (the S3 client sends a seekable body again after a
// failure in transit), and bytes read again after a seek back are not
// counted twice.
func counted(r io.Reader, bar *progressbar.ProgressBar) io.Reader {
	b := &countedBody{r: r, bar: bar}
	if s, ok := r.(io.Seeker); ok {
		if pos, err := s.Seek(0, io.SeekCurrent); err == nil {
			b.pos, b.top = pos, pos
			return countedSeeker{b, s}
		}
	}
	return b
}

// countedBody counts on bar the bytes of r past the furthest position
// read so far (top).
type countedBody struct {
	r        io.Reader
	bar      *progressbar.ProgressBar
	pos, top int64
}

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.pos += int64(n)
	if b.pos > b.top {
		_ = b.bar.Add64(b.pos - b.top)
		b.top = b.pos
	}
	return n, err
}

// countedSeeker is a countedBody over a body that can seek.
type countedSeeker struct {
	*countedBody
	s io.Seeker
}

func (b countedSeeker) Seek(offset int64, whence int) (int64, error) {
	pos, err := b.s.Seek(offset, whence)
	if err == nil {
		b.pos = pos
	}
	return pos, err
}
