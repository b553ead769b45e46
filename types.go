package fencepub

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/objstore/s3store"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Version is a publication's place in a resource's history: Epoch, Fence
// and Seq (uint64 each, at most MaxNumber), compared lexicographically
// (DESIGN.md "Words"). Fence is the generation the authority minted with
// the grant; Seq counts publishes within that grant from 1. The zero
// Version sorts before every published one. ParseVersion or a struct
// literal builds one.
//
// Methods: String() returns "epoch.fence.seq"; Compare(w) returns -1, 0
// or +1 as v sorts before, equal to or after w; IsZero() reports the zero
// Version; Validate() returns ErrBadVersion when a field exceeds MaxNumber.
type Version = layout.Version

// MaxNumber is the largest epoch, fence or seq fencepub mints (2^63-1);
// minting past it is refused rather than wrapped (DESIGN.md "Object
// layout").
const MaxNumber = layout.MaxNumber

// ParseVersion parses s as Version.String formats it, "epoch.fence.seq"
// (three decimal numbers, each at most MaxNumber), or as the 62-byte
// storage form ("<epoch>-<fence>-<seq>", 20 zero-padded digits each). It
// returns an error wrapping ErrBadVersion and ErrInvalid, quoting s, for
// anything else.
func ParseVersion(s string) (Version, error) {
	if len(s) == layout.VersionWidth {
		if v, err := layout.DecodeVersion(s); err == nil {
			return v, nil
		}
	}
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return Version{}, fmt.Errorf("%w: %w: %.80q: want epoch.fence.seq", ErrInvalid, ErrBadVersion, s)
	}
	var n [3]uint64
	for i, p := range parts {
		x, err := strconv.ParseUint(p, 10, 64)
		if err != nil || x > MaxNumber {
			return Version{}, fmt.Errorf("%w: %w: %.80q: want epoch.fence.seq, each 0..%d in decimal", ErrInvalid, ErrBadVersion, s, MaxNumber)
		}
		n[i] = x
	}
	return Version{Epoch: n[0], Fence: n[1], Seq: n[2]}, nil
}

// Object names one immutable object in the store. Fields: Bucket, Key,
// SHA256 (hex sha256 of the body), ETag (the store's, for If-Match reads)
// and Size (bytes).
type Object = layout.Object

// Pointer is the published state of a resource. Fields: Version, Object
// (the published object), IdempotencyKey and Digest (the publish request's
// key and hex sha256 digest), ContentType, Owner (the grant's owner) and
// CommittedAt (the publisher's clock, informative only). The zero Pointer
// (no object) is the state of a resource that was granted but never
// published (DESIGN.md "etcd layout").
type Pointer = layout.Pointer

// Namespace locates one fencepub domain: every etcd key lives under
// "<Prefix>/<Domain>/" and every object key too (the namespace.prefix and
// namespace.domain configuration keys; DESIGN.md "Object layout"). Build
// it with NewNamespace; each package's Config.Validate checks a Namespace
// built as a literal the same way, and the zero value is not valid.
type Namespace struct {
	Prefix string
	Domain string
}

// Root returns the namespace's key prefix, "<Prefix>/<Domain>/" (the domain
// path-escaped): every etcd key and object key of the domain starts with it.
func (n Namespace) Root() string { return layout.Namespace(n).Root() }

// NewNamespace validates prefix (one name, such as "fencepub": no '/') and
// domain (a name) and returns their Namespace, whose keys can never lie
// inside another namespace's (DESIGN.md "etcd layout"). It makes no network
// call. Errors: ErrInvalid and ErrInvalidName naming the part that is
// refused (empty, too long, a prefix of several components, a character
// outside letters, digits, '-', '_' and '.', or a name of one of a domain's
// key subtrees, such as "history").
func NewNamespace(prefix, domain string) (Namespace, error) {
	ns, err := layout.NewNamespace(prefix, domain)
	if err != nil {
		return Namespace{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return Namespace(ns), nil
}

// StoreConfig describes a bucket of an S3-compatible store (the s3.*
// configuration keys). Fields: Endpoint (host:port, HTTPS when Secure, or
// a URL http://host[:port] or https://host[:port] whose scheme decides),
// Credentials ("static", or "auto" and "" for the environment's credential
// chain), AccessKey and SecretKey (for "static"), Bucket, Secure, Region
// and TLS (CA, Cert and Key file paths: a private CA and a client
// certificate for HTTPS).
type StoreConfig = s3store.Config

// Store is one bucket of an object store as fencepub uses it: create-only
// writes (PutCreateOnly, and CompleteUpload of a multipart upload), reads
// conditioned on an ETag (Get), Stat, listings of objects and of
// incomplete uploads, AbortUpload and batch Delete, plus CheckBucket and
// EnsureBucket. Every method is safe for concurrent use, ends with ctx, and
// returns errors that wrap ErrObjectExists, ErrObjectNotFound,
// ErrConditionFailed, ErrUnavailable (retried where the request is safe to
// send again) or ErrInvalid. NewStore returns the S3 implementation;
// another implementation, or a wrapper, must pass storetest.AcceptanceTest
// (DESIGN.md "What the object store must provide").
type Store = objstore.Store

// The types of Store's methods, so that a program can wrap a Store without
// importing internal packages.
type (
	// ObjectInfo describes one object: key, size in bytes, ETag,
	// modification time, content type and user metadata.
	ObjectInfo = objstore.ObjectInfo
	// PutOptions are the attributes a write gives the object.
	PutOptions = objstore.PutOptions
	// Part is one uploaded part of a multipart upload.
	Part = objstore.Part
	// CopySource names the object a part is copied from (and its ETag).
	CopySource = objstore.CopySource
	// Upload is one incomplete multipart upload.
	Upload = objstore.Upload
	// ListOptions select what List returns.
	ListOptions = objstore.ListOptions
	// BucketSettings are the bucket's versioning and lifecycle rules.
	BucketSettings = objstore.BucketSettings
)

// The typed errors a Store's methods return (wrapped), besides
// ErrUnavailable (the store could not be reached or answered 5xx; the
// request may or may not have been applied) and ErrInvalid (the store
// refused the credentials, the TLS handshake failed, or the bucket does not
// exist, which is also an ErrObjectNotFound).
var (
	// ErrObjectExists: a create-only write found an object at the key
	// (HTTP 412 on If-None-Match: *).
	ErrObjectExists = objstore.ErrExists
	// ErrObjectNotFound: no such object (or upload, or bucket).
	ErrObjectNotFound = objstore.ErrNotFound
	// ErrConditionFailed: a condition on an existing object did not hold:
	// an If-Match whose ETag the object no longer has (HTTP 412 on a Get or
	// on a copy's source), or a concurrent conditional write to the same
	// key (HTTP 409 ConditionalRequestConflict; that write was not applied
	// and is safe to send again).
	ErrConditionFailed = objstore.ErrConditionFailed
	// ErrStoreUnavailable: the store could not be reached or answered 5xx;
	// the request may or may not have been applied. It is an
	// ErrUnavailable, which is all a caller that only retries needs; the
	// name tells a store outage from etcd's (the CLI's hint names the
	// store's endpoint and bucket).
	ErrStoreUnavailable = objstore.ErrUnavailable
)

// NewStore returns the S3-compatible Store of cfg (minio-go) without
// contacting the server (the first request that fails says why; use
// CheckBucket to ask). Errors: ErrInvalid naming the configuration key (an
// empty endpoint or bucket, a malformed endpoint, an unreadable TLS file).
func NewStore(cfg StoreConfig) (Store, error) {
	st, err := s3store.New(cfg)
	if err != nil {
		return nil, err
	}
	return st, nil
}

// Env is the setup every fencepub package's Config takes: the domain's
// Namespace, a connected etcd client and the domain's bucket. The clients
// are the caller's: no package closes them. An Env is a plain value; copy
// it into as many Configs as needed.
type Env struct {
	Namespace Namespace
	Etcd      *clientv3.Client
	Store     Store
}
