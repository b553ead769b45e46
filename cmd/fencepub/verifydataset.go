package main

import (
	"fmt"
	"io"

	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/reader"
)

// datasetFiles reads every file of ptr's dataset version through a
// verifying reader (its entry's ETag, size and sha256) and records a
// finding, naming the path, for each file that is missing or does not
// match, and for a manifest that cannot be read. It returns the bytes
// verified. Memory holds one manifest page.
func (v *verifier) datasetFiles(res string, ptr layout.Pointer) int64 {
	r, err := reader.New(readerConfig(v.env), res)
	if err != nil {
		v.find(res, "object", ptr.Object.Key, "dataset manifest: %v", err)
		return 0
	}
	var total int64
	for f, err := range r.Files(v.ctx, ptr) {
		if err != nil {
			v.find(res, "object", ptr.Object.Key, "dataset manifest: %v", err)
			return total
		}
		n, err := v.datasetFile(r, ptr, f.Path)
		total += n
		if err != nil {
			v.find(res, "object", ptr.Object.Key, "file %q: %v", f.Path, err)
		}
	}
	return total
}

// datasetFile reads one file of ptr's dataset to its end (where the
// reader checks sha256 and size).
func (v *verifier) datasetFile(r *reader.Reader, ptr layout.Pointer, path string) (int64, error) {
	body, err := r.OpenPointerFile(v.ctx, ptr, path)
	if err != nil {
		return 0, err
	}
	defer body.Close()
	n, err := io.Copy(io.Discard, body)
	if err != nil {
		return n, fmt.Errorf("reading: %w", err)
	}
	return n, nil
}
