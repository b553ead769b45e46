package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/reader"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// entry is what the service serves for one resource: the newest pointer the
// watch delivered and, for objects up to the cache limit, their verified
// bytes. Entries are immutable; a new version replaces the whole entry, so a
// request that loaded one entry never mixes two versions.
type entry struct {
	ptr  fencepub.Pointer
	body []byte // nil: streamed from the store per request
}

// service follows resources by watch and serves their current objects.
type service struct {
	log      *slog.Logger
	cfg      reader.Config // for consistent cuts (serveCut)
	maxCache int64         // bytes; larger objects are streamed per request
	readers  map[string]*reader.Reader
	current  map[string]*atomic.Pointer[entry]

	requests *prometheus.CounterVec
	updates  *prometheus.CounterVec
	errs     *prometheus.CounterVec
	version  *prometheus.GaugeVec
}

// newService prepares readers for resources; metrics go to reg.
func newService(cfg reader.Config, resources []string, maxCache int64, reg prometheus.Registerer, log *slog.Logger) (*service, error) {
	s := &service{
		log: log, cfg: cfg, maxCache: maxCache,
		readers: map[string]*reader.Reader{}, current: map[string]*atomic.Pointer[entry]{},
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fencepub_reader_service_requests_total", Help: "HTTP requests by resource and status code."}, []string{"resource", "code"}),
		updates:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fencepub_reader_service_updates_total", Help: "Newer pointers applied from the watch."}, []string{"resource"}),
		errs:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fencepub_reader_service_errors_total", Help: "Watch and load errors."}, []string{"resource"}),
		version:  prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fencepub_reader_service_fence", Help: "Fence of the version being served."}, []string{"resource"}),
	}
	for _, c := range []prometheus.Collector{s.requests, s.updates, s.errs, s.version} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, name := range resources {
		r, err := reader.New(cfg, name)
		if err != nil {
			return nil, err
		}
		s.readers[name] = r
		s.current[name] = new(atomic.Pointer[entry])
	}
	return s, nil
}

// run follows every resource until ctx ends.
func (s *service) run(ctx context.Context) {
	var wg sync.WaitGroup
	for name, r := range s.readers {
		wg.Add(1)
		go func() { defer wg.Done(); s.follow(ctx, name, r) }()
	}
	wg.Wait()
}

// follow applies each newer pointer of the watch: small objects are loaded
// and verified before the entry is swapped, so readers of the service never
// see bytes that did not match the pointer's digest.
func (s *service) follow(ctx context.Context, name string, r *reader.Reader) {
	for u := range r.Watch(ctx) {
		if u.Err != nil {
			s.errs.WithLabelValues(name).Inc()
			s.log.Warn("watch", "resource", name, "err", u.Err)
			continue
		}
		cur := s.current[name].Load()
		if cur != nil && cur.ptr.Version.Compare(u.Pointer.Version) >= 0 {
			continue
		}
		e, err := s.load(ctx, r, u.Pointer)
		if err != nil {
			s.errs.WithLabelValues(name).Inc()
			s.log.Warn("load", "resource", name, "version", u.Pointer.Version.String(), "err", err)
			continue
		}
		s.current[name].Store(e)
		s.updates.WithLabelValues(name).Inc()
		s.version.WithLabelValues(name).Set(float64(e.ptr.Version.Fence))
		s.log.Info("serving", "resource", name, "version", e.ptr.Version.String(), "bytes", e.ptr.Object.Size, "cached", e.body != nil)
	}
}

// load builds the entry of ptr: the pointer alone for a large object, or the
// pointer with the verified bytes of the object the reader opened (which is
// ptr's or, if it was already collected after supersession, a newer one).
func (s *service) load(ctx context.Context, r *reader.Reader, ptr fencepub.Pointer) (*entry, error) {
	if ptr.Object.Size > s.maxCache || ptr.IsDataset() { // a dataset's files are served by path (files.go)
		return &entry{ptr: ptr}, nil
	}
	b, err := r.OpenPointer(ctx, ptr)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	body, err := io.ReadAll(b) // fails at EOF unless sha256 and size match
	if err != nil {
		return nil, err
	}
	return &entry{ptr: b.Pointer, body: body}, nil
}

// etag is the HTTP ETag of a version: the version itself, quoted.
func etag(v fencepub.Version) string { return `"` + v.String() + `"` }

// handler routes the service's HTTP API.
func (s *service) handler(reg prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/resources/{name}", s.serveObject)
	mux.HandleFunc("GET /v1/resources/{name}/pointer", s.servePointer)
	mux.HandleFunc("GET /v1/resources/{name}/files/{path...}", s.serveFile) // files.go
	mux.HandleFunc("GET /v1/cut", s.serveCut)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		for name, c := range s.current {
			if c.Load() == nil {
				http.Error(w, "not ready: no pointer loaded for "+name, http.StatusServiceUnavailable)
				return
			}
		}
		io.WriteString(w, "ready\n")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}

// lookup returns the entry of the request's resource or writes the error.
func (s *service) lookup(w http.ResponseWriter, r *http.Request) (string, *entry, bool) {
	name := r.PathValue("name")
	c, ok := s.current[name]
	if !ok {
		s.requests.WithLabelValues("", "404").Inc()
		http.Error(w, fmt.Sprintf("resource %q is not followed by this service", name), http.StatusNotFound)
		return name, nil, false
	}
	e := c.Load()
	if e == nil {
		s.requests.WithLabelValues(name, "503").Inc()
		http.Error(w, fmt.Sprintf("resource %q: no published version loaded yet", name), http.StatusServiceUnavailable)
		return name, nil, false
	}
	return name, e, true
}

func (s *service) servePointer(w http.ResponseWriter, r *http.Request) {
	name, e, ok := s.lookup(w, r)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("ETag", etag(e.ptr.Version))
	s.requests.WithLabelValues(name, "200").Inc()
	_ = json.NewEncoder(w).Encode(e.ptr)
}

// serveObject streams the current object with ETag = its version and honours
// If-None-Match. Cached bytes are served from memory; a large object is
// streamed from the store through a verifying reader of the watched pointer
// (one GET, no etcd read per request), and if its bytes turn out not to
// match the pointer the connection is aborted rather than completed with
// bad data.
func (s *service) serveObject(w http.ResponseWriter, r *http.Request) {
	name, e, ok := s.lookup(w, r)
	if !ok {
		return
	}
	if e.body != nil {
		s.write(w, r, name, e.ptr, func(dst io.Writer) error {
			_, err := io.Copy(dst, bytes.NewReader(e.body))
			return err
		})
		return
	}
	b, err := s.readers[name].OpenPointer(r.Context(), e.ptr)
	if err != nil {
		s.requests.WithLabelValues(name, "502").Inc()
		http.Error(w, "open: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer b.Close()
	s.write(w, r, name, b.Pointer, func(dst io.Writer) error {
		_, err := io.Copy(dst, b)
		return err
	})
}

func (s *service) write(w http.ResponseWriter, r *http.Request, name string, ptr fencepub.Pointer, body func(io.Writer) error) {
	tag := etag(ptr.Version)
	h := w.Header()
	h.Set("ETag", tag)
	h.Set("X-Fencepub-Version", ptr.Version.String())
	h.Set("X-Fencepub-Sha256", ptr.Object.SHA256)
	if r.Header.Get("If-None-Match") == tag {
		s.requests.WithLabelValues(name, "304").Inc()
		w.WriteHeader(http.StatusNotModified)
		return
	}
	ct := ptr.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	h.Set("Content-Type", ct)
	h.Set("Content-Length", strconv.FormatInt(ptr.Object.Size, 10))
	s.requests.WithLabelValues(name, "200").Inc()
	if err := body(w); err != nil && !errors.Is(err, context.Canceled) {
		s.errs.WithLabelValues(name).Inc()
		s.log.Error("streaming aborted", "resource", name, "version", ptr.Version.String(), "err", err)
		panic(http.ErrAbortHandler) // the client sees a cut response, never wrong bytes
	}
}

// serveCut answers GET /v1/cut?resource=A&resource=B with the pointers of
// the named resources read at one etcd revision (reader.ReadCut), as JSON
// {"revision": R, "pointers": {"A": {...}, "B": {...}}}: a group publish is
// never seen torn in it (docs/groups.md). Only followed resources may be
// named (404 otherwise); 400 for none or a name given twice, 503 when etcd
// does not answer.
func (s *service) serveCut(w http.ResponseWriter, r *http.Request) {
	names := r.URL.Query()["resource"]
	for _, name := range names {
		if _, ok := s.current[name]; !ok {
			s.requests.WithLabelValues("", "404").Inc()
			http.Error(w, fmt.Sprintf("resource %q is not followed by this service", name), http.StatusNotFound)
			return
		}
	}
	cut, err := reader.ReadCut(r.Context(), s.cfg, names...)
	if err != nil {
		code := http.StatusBadGateway
		switch {
		case errors.Is(err, fencepub.ErrInvalid):
			code = http.StatusBadRequest
		case errors.Is(err, fencepub.ErrUnavailable):
			code = http.StatusServiceUnavailable
		}
		s.requests.WithLabelValues("", strconv.Itoa(code)).Inc()
		http.Error(w, "cut: "+err.Error(), code)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	s.requests.WithLabelValues("", "200").Inc()
	_ = json.NewEncoder(w).Encode(cut)
}
