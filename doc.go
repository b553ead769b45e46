// Package fencepub is the small public core shared by the fencepub library
// packages: the names a program needs to set up and call authority,
// publisher, reader and gc without importing anything internal.
//
// It holds:
//   - the setup every package's Config takes: Namespace (NewNamespace),
//     Store (NewStore, from a StoreConfig) and Env, which bundles them with
//     an etcd client;
//   - the records those packages take and return: Version (ParseVersion),
//     Object and Pointer;
//   - the errors every package shares, so one errors.Is check covers every
//     package and Store: the kinds ErrUnavailable (retry later) and
//     ErrInvalid (fix the input or configuration), ErrNotInitialized and
//     ErrCorruptState; ErrInvalidName, ErrCorruptRecord and ErrBadVersion
//     for names and records; ErrCreateOnlyIgnored for a store fencepub
//     refuses; and Store's own ErrObjectExists, ErrObjectNotFound,
//     ErrConditionFailed and ErrStoreUnavailable (an ErrUnavailable).
//
// Version, Object and Pointer are aliases of the records the storage
// layout (DESIGN.md "etcd layout", "Object layout") is written with, so
// that a value passes between the packages unconverted; a user needs only
// their fields and the few methods each comment lists (go doc does not list
// an alias's methods). Namespace is a type of its own: the names of the
// layout's keys are not API. ParseVersion, NewNamespace and NewStore build
// the arguments the packages take.
//
// This package imports none of authority, publisher, reader and gc; they
// import it.
package fencepub
