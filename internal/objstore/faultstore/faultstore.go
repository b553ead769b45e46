// Package faultstore wraps an objstore.Store to inject faults into chosen
// calls, deterministically: fail a call before it reaches the store, drop
// its response after the store applied it (a lost response: the caller
// sees an error although the write happened), or delay it. Faults are
// queued per method and consumed by the next calls in order, so a test
// says exactly which call fails. For unit tests of the logic that meets
// such faults (DESIGN.md "Publish", "Garbage collection").
package faultstore

import (
	"context"
	"fmt"
	"io"
	"iter"
	"sync"
	"time"

	"github.com/fencepub/fencepub/internal/objstore"
)

// Method names an objstore.Store method, as Inject and Calls take it.
type Method string

// The methods faults can be injected into.
const (
	CheckBucket    Method = "CheckBucket"
	EnsureBucket   Method = "EnsureBucket"
	Settings       Method = "Settings"
	PutCreateOnly  Method = "PutCreateOnly"
	CreateUpload   Method = "CreateUpload"
	UploadPart     Method = "UploadPart"
	CopyPart       Method = "CopyPart"
	CompleteUpload Method = "CompleteUpload"
	AbortUpload    Method = "AbortUpload"
	ListUploads    Method = "ListUploads"
	Stat           Method = "Stat"
	Get            Method = "Get"
	List           Method = "List"
	Delete         Method = "Delete"
)

// Fault is what one call meets. Delay is waited first (ending early with
// ctx's error when ctx ends). Then, when Before is set, the call returns
// Before without reaching the store; else when After is set, the call
// reaches the store and its result is replaced by After (for Get the body
// is closed; for List and ListUploads the listing runs and After is
// yielded last; for Delete every key gets After). Callers that classify
// errors want Before and After to wrap objstore's sentinels, e.g.
// fmt.Errorf("%w: injected", objstore.ErrUnavailable).
type Fault struct {
	Delay  time.Duration
	Before error
	After  error
}

// Store is an objstore.Store that forwards every call to its inner store,
// after the faults injected for that method. Safe for concurrent use.
type Store struct {
	inner objstore.Store

	mu     sync.Mutex
	faults map[Method][]Fault
	calls  map[Method]int
}

var _ objstore.Store = (*Store)(nil)

// New wraps inner with no faults queued.
func New(inner objstore.Store) *Store {
	return &Store{inner: inner, faults: map[Method][]Fault{}, calls: map[Method]int{}}
}

// Inject queues f for the next n calls of m (after the faults already
// queued for m).
func (s *Store) Inject(m Method, n int, f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.faults[m] = append(s.faults[m], f)
	}
}

// Calls returns how many times m has been called, faulted or not.
func (s *Store) Calls(m Method) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[m]
}

// next counts a call of m and returns its fault, waiting its Delay. A
// non-nil error is ctx's, met during the delay.
func (s *Store) next(ctx context.Context, m Method) (Fault, error) {
	s.mu.Lock()
	s.calls[m]++
	var f Fault
	if q := s.faults[m]; len(q) > 0 {
		f, s.faults[m] = q[0], q[1:]
	}
	s.mu.Unlock()
	if f.Delay > 0 {
		t := time.NewTimer(f.Delay)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return f, ctx.Err()
		case <-t.C:
		}
	}
	return f, nil
}

// call runs op under m's next fault.
func call[T any](s *Store, ctx context.Context, m Method, op func() (T, error)) (T, error) {
	var zero T
	f, err := s.next(ctx, m)
	switch {
	case err != nil:
		return zero, err
	case f.Before != nil:
		return zero, f.Before
	}
	v, err := op()
	if f.After != nil {
		return zero, fmt.Errorf("%w (the store applied the call; its answer was dropped)", f.After)
	}
	return v, err
}

// none adapts a call that returns only an error.
func none(op func() error) func() (struct{}, error) {
	return func() (struct{}, error) { return struct{}{}, op() }
}

// BucketName implements objstore.Store; it is never faulted.
func (s *Store) BucketName() string { return s.inner.BucketName() }

// CheckBucket implements objstore.Store.
func (s *Store) CheckBucket(ctx context.Context) error {
	_, err := call(s, ctx, CheckBucket, none(func() error { return s.inner.CheckBucket(ctx) }))
	return err
}

// EnsureBucket implements objstore.Store.
func (s *Store) EnsureBucket(ctx context.Context) error {
	_, err := call(s, ctx, EnsureBucket, none(func() error { return s.inner.EnsureBucket(ctx) }))
	return err
}

// Settings implements objstore.Store.
func (s *Store) Settings(ctx context.Context) (objstore.BucketSettings, error) {
	return call(s, ctx, Settings, func() (objstore.BucketSettings, error) { return s.inner.Settings(ctx) })
}

// PutCreateOnly implements objstore.Store.
func (s *Store) PutCreateOnly(ctx context.Context, key string, body io.Reader, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	return call(s, ctx, PutCreateOnly, func() (objstore.ObjectInfo, error) { return s.inner.PutCreateOnly(ctx, key, body, size, opts) })
}

// CreateUpload implements objstore.Store.
func (s *Store) CreateUpload(ctx context.Context, key string, opts objstore.PutOptions) (string, error) {
	return call(s, ctx, CreateUpload, func() (string, error) { return s.inner.CreateUpload(ctx, key, opts) })
}

// UploadPart implements objstore.Store.
func (s *Store) UploadPart(ctx context.Context, key, uploadID string, number int, body io.Reader, size int64) (objstore.Part, error) {
	return call(s, ctx, UploadPart, func() (objstore.Part, error) { return s.inner.UploadPart(ctx, key, uploadID, number, body, size) })
}

// CopyPart implements objstore.Store.
func (s *Store) CopyPart(ctx context.Context, src objstore.CopySource, key, uploadID string, number int) (objstore.Part, error) {
	return call(s, ctx, CopyPart, func() (objstore.Part, error) { return s.inner.CopyPart(ctx, src, key, uploadID, number) })
}

// CompleteUpload implements objstore.Store.
func (s *Store) CompleteUpload(ctx context.Context, key, uploadID string, parts []objstore.Part) (objstore.ObjectInfo, error) {
	return call(s, ctx, CompleteUpload, func() (objstore.ObjectInfo, error) { return s.inner.CompleteUpload(ctx, key, uploadID, parts) })
}

// AbortUpload implements objstore.Store.
func (s *Store) AbortUpload(ctx context.Context, key, uploadID string) error {
	_, err := call(s, ctx, AbortUpload, none(func() error { return s.inner.AbortUpload(ctx, key, uploadID) }))
	return err
}

// Stat implements objstore.Store.
func (s *Store) Stat(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	return call(s, ctx, Stat, func() (objstore.ObjectInfo, error) { return s.inner.Stat(ctx, key) })
}

// Get implements objstore.Store.
func (s *Store) Get(ctx context.Context, key, ifMatch string) (io.ReadCloser, objstore.ObjectInfo, error) {
	type got struct {
		body io.ReadCloser
		info objstore.ObjectInfo
	}
	var opened io.ReadCloser
	g, err := call(s, ctx, Get, func() (got, error) {
		body, info, err := s.inner.Get(ctx, key, ifMatch)
		opened = body
		return got{body, info}, err
	})
	if err != nil {
		if opened != nil {
			_ = opened.Close()
		}
		return nil, objstore.ObjectInfo{}, err
	}
	return g.body, g.info, nil
}

// seq runs listing under m's next fault.
func seq[T any](s *Store, ctx context.Context, m Method, listing iter.Seq2[T, error]) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var zero T
		f, err := s.next(ctx, m)
		switch {
		case err != nil:
			yield(zero, err)
			return
		case f.Before != nil:
			yield(zero, f.Before)
			return
		}
		for v, err := range listing {
			if !yield(v, err) || err != nil {
				return
			}
		}
		if f.After != nil {
			yield(zero, f.After)
		}
	}
}

// ListUploads implements objstore.Store.
func (s *Store) ListUploads(ctx context.Context, prefix string) iter.Seq2[objstore.Upload, error] {
	return seq(s, ctx, ListUploads, s.inner.ListUploads(ctx, prefix))
}

// List implements objstore.Store.
func (s *Store) List(ctx context.Context, prefix string, opts objstore.ListOptions) iter.Seq2[objstore.ObjectInfo, error] {
	return seq(s, ctx, List, s.inner.List(ctx, prefix, opts))
}

// Delete implements objstore.Store.
func (s *Store) Delete(ctx context.Context, keys []string) []error {
	errs, err := call(s, ctx, Delete, func() ([]error, error) { return s.inner.Delete(ctx, keys), nil })
	if err != nil {
		errs = make([]error, len(keys))
		for i := range errs {
			errs[i] = err
		}
	}
	return errs
}
