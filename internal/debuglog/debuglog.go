// Package debuglog logs every round trip to etcd and to the object store
// at debug level, as decorators of the clients the product packages use:
// KV and Lease over etcd's client, Store over an objstore.Store. Each
// round trip is one record when it ends: its message names the request
// ("etcd txn", "store put"), and its attributes say what it touched
// (etcd_key, object), how it ended (outcome "ok" or "error", with err)
// and how long it took (duration_ms, milliseconds), plus the attributes
// the caller put in the request's context with With (resource, version,
// key, ...).
//
// A logger that does not log debug records gets the clients back
// unchanged, so production at info level pays nothing. The logger is the
// caller's (injected), never a global.
package debuglog

import (
	"context"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"slices"
	"time"

	"github.com/fencepub/fencepub/internal/objstore"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// enabled reports whether log writes debug records.
func enabled(log *slog.Logger) bool {
	return log != nil && log.Enabled(context.Background(), slog.LevelDebug)
}

// attrsKey is the context key of With's attributes.
type attrsKey struct{}

// With returns ctx carrying args (slog's key-value pairs or Attrs) after
// those ctx already carries, for the round-trip records of requests made
// with it. It returns ctx unchanged when log does not log debug records.
func With(ctx context.Context, log *slog.Logger, args ...any) context.Context {
	if !enabled(log) {
		return ctx
	}
	prev, _ := ctx.Value(attrsKey{}).([]any)
	return context.WithValue(ctx, attrsKey{}, slices.Concat(prev, args))
}

// done logs the record of one round trip that began at start and ended
// with err, with ctx's attributes and attrs.
func done(ctx context.Context, log *slog.Logger, msg string, start time.Time, err error, attrs ...any) {
	outcome := "ok"
	if err != nil {
		outcome = "error"
		attrs = append(attrs, "err", err)
	}
	attrs = append(attrs, "outcome", outcome, "duration_ms", time.Since(start).Milliseconds())
	if c, ok := ctx.Value(attrsKey{}).([]any); ok {
		attrs = slices.Concat(c, attrs)
	}
	log.DebugContext(ctx, msg, attrs...)
}

// KV returns kv logging each Get, Put, Delete, Do and transaction commit
// at debug level ("etcd get", "etcd put", "etcd delete", "etcd do", "etcd
// txn"), or kv itself when log does not log debug records.
func KV(kv clientv3.KV, log *slog.Logger) clientv3.KV {
	if !enabled(log) {
		return kv
	}
	return loggedKV{KV: kv, log: log}
}

type loggedKV struct {
	clientv3.KV
	log *slog.Logger
}

func (k loggedKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	start := time.Now()
	resp, err := k.KV.Get(ctx, key, opts...)
	attrs := []any{"etcd_key", key}
	if err == nil {
		attrs = append(attrs, "count", resp.Count, "revision", resp.Header.Revision)
	}
	done(ctx, k.log, "etcd get", start, err, attrs...)
	return resp, err
}

func (k loggedKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	start := time.Now()
	resp, err := k.KV.Put(ctx, key, val, opts...)
	done(ctx, k.log, "etcd put", start, err, "etcd_key", key)
	return resp, err
}

func (k loggedKV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	start := time.Now()
	resp, err := k.KV.Delete(ctx, key, opts...)
	done(ctx, k.log, "etcd delete", start, err, "etcd_key", key)
	return resp, err
}

func (k loggedKV) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	start := time.Now()
	resp, err := k.KV.Do(ctx, op)
	done(ctx, k.log, "etcd do", start, err, "etcd_key", string(op.KeyBytes()))
	return resp, err
}

func (k loggedKV) Txn(ctx context.Context) clientv3.Txn {
	return &loggedTxn{Txn: k.KV.Txn(ctx), ctx: ctx, log: k.log}
}

// loggedTxn counts a transaction's compares and operations and logs its
// commit.
type loggedTxn struct {
	clientv3.Txn
	ctx              context.Context
	log              *slog.Logger
	key              string // the first key it compares or operates on
	ifs, thens, elss int
}

func (t *loggedTxn) first(key []byte) {
	if t.key == "" {
		t.key = string(key)
	}
}

// note records the first key of ops and returns how many there are.
func (t *loggedTxn) note(ops []clientv3.Op) int {
	for _, op := range ops {
		t.first(op.KeyBytes())
	}
	return len(ops)
}

func (t *loggedTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	for i := range cs {
		t.first(cs[i].KeyBytes())
	}
	t.ifs += len(cs)
	t.Txn = t.Txn.If(cs...)
	return t
}

func (t *loggedTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.thens += t.note(ops)
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t *loggedTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.elss += t.note(ops)
	t.Txn = t.Txn.Else(ops...)
	return t
}

func (t *loggedTxn) Commit() (*clientv3.TxnResponse, error) {
	start := time.Now()
	resp, err := t.Txn.Commit()
	attrs := []any{"etcd_key", t.key, "compares", t.ifs, "then", t.thens, "else", t.elss}
	if err == nil {
		attrs = append(attrs, "succeeded", resp.Succeeded, "revision", resp.Header.Revision)
	}
	done(t.ctx, t.log, "etcd txn", start, err, attrs...)
	return resp, err
}

// Lease returns l logging each Grant, Revoke, TimeToLive and KeepAliveOnce
// at debug level ("etcd lease grant", ...), or l itself when log does not
// log debug records. KeepAlive's stream is not logged.
func Lease(l clientv3.Lease, log *slog.Logger) clientv3.Lease {
	if !enabled(log) {
		return l
	}
	return loggedLease{Lease: l, log: log}
}

type loggedLease struct {
	clientv3.Lease
	log *slog.Logger
}

func (l loggedLease) Grant(ctx context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error) {
	start := time.Now()
	resp, err := l.Lease.Grant(ctx, ttl)
	attrs := []any{"ttl_seconds", ttl}
	if err == nil {
		attrs = append(attrs, "lease", int64(resp.ID))
	}
	done(ctx, l.log, "etcd lease grant", start, err, attrs...)
	return resp, err
}

func (l loggedLease) Revoke(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseRevokeResponse, error) {
	start := time.Now()
	resp, err := l.Lease.Revoke(ctx, id)
	done(ctx, l.log, "etcd lease revoke", start, err, "lease", int64(id))
	return resp, err
}

func (l loggedLease) TimeToLive(ctx context.Context, id clientv3.LeaseID, opts ...clientv3.LeaseOption) (*clientv3.LeaseTimeToLiveResponse, error) {
	start := time.Now()
	resp, err := l.Lease.TimeToLive(ctx, id, opts...)
	done(ctx, l.log, "etcd lease ttl", start, err, "lease", int64(id))
	return resp, err
}

func (l loggedLease) KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	start := time.Now()
	resp, err := l.Lease.KeepAliveOnce(ctx, id)
	done(ctx, l.log, "etcd lease keepalive", start, err, "lease", int64(id))
	return resp, err
}

// Store returns st logging each request at debug level ("store put",
// "store get", "store list", ...), or st itself when log does not log
// debug records. A listing is one record when its loop ends, with the
// number of entries it yielded; a Get's record is written when the
// response arrives (the body is read after). The result keeps st's
// OtherBuckets (its other buckets are logged too) and its String.
func Store(st objstore.Store, log *slog.Logger) objstore.Store {
	if st == nil || !enabled(log) {
		return st
	}
	s := loggedStore{st: st, log: log}
	if _, ok := st.(objstore.OtherBuckets); ok {
		return loggedBuckets{s}
	}
	return s
}

type loggedStore struct {
	st  objstore.Store
	log *slog.Logger
}

// loggedBuckets is a loggedStore over a Store that implements
// objstore.OtherBuckets.
type loggedBuckets struct{ loggedStore }

// InBucket returns the logged Store of bucket name.
func (s loggedBuckets) InBucket(name string) objstore.Store {
	return Store(s.st.(objstore.OtherBuckets).InBucket(name), s.log)
}

// String names the store as st does (objstore's messages use it).
func (s loggedStore) String() string {
	if n, ok := s.st.(fmt.Stringer); ok {
		return n.String()
	}
	return fmt.Sprintf("bucket %q", s.st.BucketName())
}

func (s loggedStore) BucketName() string { return s.st.BucketName() }

func (s loggedStore) CheckBucket(ctx context.Context) error {
	start := time.Now()
	err := s.st.CheckBucket(ctx)
	done(ctx, s.log, "store check bucket", start, err, "bucket", s.st.BucketName())
	return err
}

func (s loggedStore) EnsureBucket(ctx context.Context) error {
	start := time.Now()
	err := s.st.EnsureBucket(ctx)
	done(ctx, s.log, "store ensure bucket", start, err, "bucket", s.st.BucketName())
	return err
}

func (s loggedStore) Settings(ctx context.Context) (objstore.BucketSettings, error) {
	start := time.Now()
	set, err := s.st.Settings(ctx)
	done(ctx, s.log, "store settings", start, err, "bucket", s.st.BucketName())
	return set, err
}

func (s loggedStore) PutCreateOnly(ctx context.Context, key string, body io.Reader, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	start := time.Now()
	info, err := s.st.PutCreateOnly(ctx, key, body, size, opts)
	done(ctx, s.log, "store put", start, err, "object", key, "bytes", size)
	return info, err
}

func (s loggedStore) CreateUpload(ctx context.Context, key string, opts objstore.PutOptions) (string, error) {
	start := time.Now()
	id, err := s.st.CreateUpload(ctx, key, opts)
	done(ctx, s.log, "store create upload", start, err, "object", key, "upload_id", id)
	return id, err
}

func (s loggedStore) UploadPart(ctx context.Context, key, uploadID string, number int, body io.Reader, size int64) (objstore.Part, error) {
	start := time.Now()
	p, err := s.st.UploadPart(ctx, key, uploadID, number, body, size)
	done(ctx, s.log, "store upload part", start, err, "object", key, "part", number, "bytes", size)
	return p, err
}

func (s loggedStore) CopyPart(ctx context.Context, src objstore.CopySource, key, uploadID string, number int) (objstore.Part, error) {
	start := time.Now()
	p, err := s.st.CopyPart(ctx, src, key, uploadID, number)
	done(ctx, s.log, "store copy part", start, err, "object", key, "source", src.Key, "part", number)
	return p, err
}

func (s loggedStore) CompleteUpload(ctx context.Context, key, uploadID string, parts []objstore.Part) (objstore.ObjectInfo, error) {
	start := time.Now()
	info, err := s.st.CompleteUpload(ctx, key, uploadID, parts)
	done(ctx, s.log, "store complete upload", start, err, "object", key, "parts", len(parts))
	return info, err
}

func (s loggedStore) AbortUpload(ctx context.Context, key, uploadID string) error {
	start := time.Now()
	err := s.st.AbortUpload(ctx, key, uploadID)
	done(ctx, s.log, "store abort upload", start, err, "object", key, "upload_id", uploadID)
	return err
}

func (s loggedStore) ListUploads(ctx context.Context, prefix string) iter.Seq2[objstore.Upload, error] {
	return logSeq(ctx, s.log, "store list uploads", prefix, s.st.ListUploads(ctx, prefix))
}

func (s loggedStore) Stat(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	start := time.Now()
	info, err := s.st.Stat(ctx, key)
	done(ctx, s.log, "store stat", start, err, "object", key)
	return info, err
}

func (s loggedStore) Get(ctx context.Context, key, ifMatch string) (io.ReadCloser, objstore.ObjectInfo, error) {
	start := time.Now()
	body, info, err := s.st.Get(ctx, key, ifMatch)
	attrs := []any{"object", key, "if_match", ifMatch}
	if err == nil {
		attrs = append(attrs, "bytes", info.Size)
	}
	done(ctx, s.log, "store get", start, err, attrs...)
	return body, info, err
}

func (s loggedStore) List(ctx context.Context, prefix string, opts objstore.ListOptions) iter.Seq2[objstore.ObjectInfo, error] {
	return logSeq(ctx, s.log, "store list", prefix, s.st.List(ctx, prefix, opts))
}

func (s loggedStore) Delete(ctx context.Context, keys []string) []error {
	start := time.Now()
	errs := s.st.Delete(ctx, keys)
	failed := 0
	var first error
	for _, err := range errs {
		if err != nil && first == nil {
			first = err
		}
		if err != nil {
			failed++
		}
	}
	done(ctx, s.log, "store delete", start, first, "objects", len(keys), "failed", failed)
	return errs
}

// logSeq passes seq on and logs one record, with the number of entries
// yielded, when the loop over it ends.
func logSeq[T any](ctx context.Context, log *slog.Logger, msg, prefix string, seq iter.Seq2[T, error]) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		start := time.Now()
		n := 0
		var failed error
		for v, err := range seq {
			if err != nil {
				failed = err
			} else {
				n++
			}
			if !yield(v, err) {
				break
			}
		}
		done(ctx, log, msg, start, failed, "prefix", prefix, "entries", n)
	}
}
