// Package fencepub is the small public core shared by the fencepub library
// packages: the names a program needs to set up and call authority,
// publisher, reader and gc without importing anything internal.
//
// It holds:
//   - the setup every package's Config takes: Namespace (NewNamespace),
//     Store (NewStore, from a StoreConfig) and Env, which bundles them with
//     an etcd client;
//   - the records those packages take and return: Version (ParseVersion),
//     Object, Pointer and Seal;
//   - the errors every package shares, so one errors.Is check covers every
//     package and Store: the kinds ErrUnavailable (retry later) and
//     ErrInvalid (fix the input or configuration), ErrNotInitialized and
//     ErrCorruptState; ErrInvalidName, ErrCorruptRecord and ErrBadVersion
//     for names and records; ErrCreateOnlyIgnored for a store fencepub
//     refuses; and Store's own ErrObjectExists, ErrObjectNotFound,
//     ErrConditionFailed and ErrStoreUnavailable (an ErrUnavailable).
//
// The types are aliases of the ones the storage layout (DESIGN.md "etcd
// layout", "Object layout") is written with. They are aliases rather than
// types of their own because Namespace carries one method per etcd and
// object key of the layout, and Version its fixed-width storage encoding:
// moving them here would make the whole storage layout public API, while
// a user needs only their fields and the few methods listed in each
// comment below (go doc does not list an alias's methods, so the comments
// do). The functions here are real: ParseVersion, NewNamespace and
// NewStore are the way to build the arguments the packages take.
//
// This package imports none of authority, publisher, reader and gc; they
// import it.
package fencepub
