package authority

import (
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
)

// The setup every fencepub library package takes — the domain's namespace
// and the bucket — is defined in internal packages; these names make it
// usable from other modules. authority.Namespace is the Namespace field of
// authority.Config, publisher.Config, reader.Config and gc.Config alike,
// and *authority.Store their Store field.

// Namespace is the etcd key prefix and object key prefix of one domain
// (the namespace.prefix and namespace.domain configuration keys; DESIGN.md
// "Object layout"). Build it with NewNamespace.
type Namespace = layout.Namespace

// NewNamespace validates prefix ("fencepub", or components joined by '/')
// and domain and returns their Namespace. Errors: ErrInvalidName naming the
// part that is refused (empty, too long, a character outside letters,
// digits, '-', '_' and '.', or a name fencepub reserves).
func NewNamespace(prefix, domain string) (Namespace, error) {
	return layout.NewNamespace(prefix, domain)
}

// StoreConfig describes a bucket of an S3-compatible store: Endpoint
// (host:port, no scheme), AccessKey, SecretKey, Bucket, Secure (HTTPS) and
// Region (the s3.* configuration keys).
type StoreConfig = objstore.Config

// Store is a bucket of an S3-compatible store; safe for concurrent use.
type Store = objstore.Store

// NewStore returns the Store of cfg without contacting the server (the
// first request that fails says why). Errors: an empty endpoint or
// bucket, a malformed endpoint.
func NewStore(cfg StoreConfig) (*Store, error) { return objstore.New(cfg) }

// Errors about names and records, shared by every fencepub package; test
// with errors.Is.
var (
	// ErrInvalidName: a resource, owner, request id, idempotency key or
	// namespace that fencepub refuses; the error names the field and why.
	ErrInvalidName = layout.ErrInvalidName
	// ErrCorruptRecord: a value read from etcd that does not decode as the
	// record its key names (a pointer, a grant, an op record).
	ErrCorruptRecord = layout.ErrCorruptRecord
)
