package fencepub

import (
	"errors"

	"github.com/fencepub/fencepub/internal/errkind"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
)

// Error kinds shared by every fencepub package and by Store: every package
// wraps these values, with its own context, in the errors it returns, so
// one errors.Is(err, fencepub.ErrUnavailable) answers "retry later"
// whichever package or server the failure came from.
var (
	// ErrUnavailable: etcd or the object store could not be reached or
	// did not answer in time. The operation may or may not have taken
	// effect; each package's documentation says how to retry it (an
	// acquire with the same request id, a publish with the same
	// idempotency key).
	ErrUnavailable = errkind.ErrUnavailable
	// ErrInvalid: a bad configuration value or argument (a name, a key, a
	// version, a negative duration), or a store configuration the store
	// refuses (credentials, a TLS handshake, a missing bucket); the error
	// names the field or the configuration key. Retrying does not help.
	ErrInvalid = errkind.ErrInvalid
	// ErrNotInitialized: the domain has no epoch key: neither `fencepub
	// init` nor a first authority.Authority.Acquire has run, or etcd lost
	// it.
	ErrNotInitialized = errors.New("fencepub: domain not initialised")
	// ErrCorruptState: a value fencepub wrote to etcd or the bucket does not
	// decode, or its keys disagree with each other. The package refuses to
	// act on it rather than guess.
	ErrCorruptState = errors.New("fencepub: corrupt state")
)

// Errors about names and records. ErrInvalidName is an ErrInvalid too;
// ParseVersion returns ErrBadVersion together with ErrInvalid.
var (
	// ErrInvalidName: a resource, owner, request id, idempotency key or
	// namespace that fencepub refuses; the error names the field and why.
	ErrInvalidName = layout.ErrInvalidName
	// ErrCorruptRecord: a value read from etcd that does not decode as the
	// record its key names (a pointer, a seal, a grant, an op record).
	ErrCorruptRecord = layout.ErrCorruptRecord
	// ErrBadVersion: a string or stored value that is not a Version
	// (ParseVersion, Version.Validate).
	ErrBadVersion = layout.ErrBadVersion
)

// ErrCreateOnlyIgnored: the object store accepted a create-only write
// (If-None-Match: *) onto a key that exists, so fencepub refuses it
// (DESIGN.md invariants 3 and 9). authority.Authority.Acquire and
// AcquireGroup return it (wrapped, naming the store and the probe key) when
// they initialise a domain, as `fencepub init` does.
var ErrCreateOnlyIgnored = objstore.ErrCreateOnlyIgnored
