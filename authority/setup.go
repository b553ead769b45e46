package authority

import "github.com/fencepub/fencepub"

// The setup every fencepub library package takes is defined in package
// fencepub (Env, Namespace, Store); these names are kept for programs
// written against earlier versions.

// Namespace is fencepub.Namespace.
//
// Deprecated: use fencepub.Namespace.
type Namespace = fencepub.Namespace

// NewNamespace is fencepub.NewNamespace.
//
// Deprecated: use fencepub.NewNamespace.
func NewNamespace(prefix, domain string) (Namespace, error) {
	return fencepub.NewNamespace(prefix, domain)
}

// StoreConfig is fencepub.StoreConfig.
//
// Deprecated: use fencepub.StoreConfig.
type StoreConfig = fencepub.StoreConfig

// Store is fencepub.Store.
//
// Deprecated: use fencepub.Store.
type Store = fencepub.Store

// NewStore is fencepub.NewStore.
//
// Deprecated: use fencepub.NewStore.
func NewStore(cfg StoreConfig) (*Store, error) { return fencepub.NewStore(cfg) }

// Errors about names and records, shared by every fencepub package; test
// with errors.Is.
var (
	// ErrInvalidName is fencepub.ErrInvalidName.
	ErrInvalidName = fencepub.ErrInvalidName
	// ErrCorruptRecord is fencepub.ErrCorruptRecord.
	ErrCorruptRecord = fencepub.ErrCorruptRecord
)
