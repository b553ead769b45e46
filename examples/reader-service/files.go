package main

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/reader"
)

// serveFile serves one file of the current version of a dataset resource
// (GET /v1/resources/{name}/files/{path...}): the watched pointer's
// manifest (cached by the reader) names it, and it is streamed from the
// store through a verifying reader. Its ETag is the file's sha256, so an
// unchanged file keeps its ETag across versions; X-Fencepub-Version names
// the version. A path the manifest lacks is 404, a resource whose version
// is a single object 404 too, a path that cannot name a file 400.
func (s *service) serveFile(w http.ResponseWriter, r *http.Request) {
	name, e, ok := s.lookup(w, r)
	if !ok {
		return
	}
	b, err := s.readers[name].OpenPointerFile(r.Context(), e.ptr, r.PathValue("path"))
	if err != nil {
		code := http.StatusBadGateway
		switch {
		case errors.Is(err, reader.ErrNoSuchFile), errors.Is(err, reader.ErrNotDataset):
			code = http.StatusNotFound
		case errors.Is(err, fencepub.ErrInvalid):
			code = http.StatusBadRequest
		}
		s.requests.WithLabelValues(name, strconv.Itoa(code)).Inc()
		http.Error(w, err.Error(), code)
		return
	}
	defer b.Close()
	tag := `"` + b.Pointer.Object.SHA256 + `"`
	h := w.Header()
	h.Set("ETag", tag)
	h.Set("X-Fencepub-Version", b.Pointer.Version.String())
	if r.Header.Get("If-None-Match") == tag {
		s.requests.WithLabelValues(name, "304").Inc()
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", b.Pointer.ContentType)
	h.Set("Content-Length", strconv.FormatInt(b.Pointer.Object.Size, 10))
	s.requests.WithLabelValues(name, "200").Inc()
	if _, err := b.WriteTo(w); err != nil && !errors.Is(err, context.Canceled) {
		s.errs.WithLabelValues(name).Inc()
		s.log.Error("streaming aborted", "resource", name, "version", b.Pointer.Version.String(), "err", err)
		panic(http.ErrAbortHandler) // the client sees a cut response, never wrong bytes
	}
}
